//! The tensor table: virtualised rows, sort by any column, substring filter,
//! precision chips, status marks from each tensor's findings.

use egui::{Id, RichText};
use egui_extras::{Column, TableBuilder};

use super::{App, Command, RowStatus, Session, TableView};
use crate::format::{Bundle, TensorInfo, natural_cmp};
use crate::report::human_bytes;

/// Columns the table sorts by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SortColumn {
    /// Payload order: file by file, by offset within each.
    Offset,
    /// Name.
    Name,
    /// Precision.
    Precision,
    /// Parameters.
    Shape,
    /// Source dtype.
    Dtype,
    /// Payload bytes.
    Bytes,
    /// Resident bytes.
    Resident,
    /// Status mark.
    Status,
}

/// The filter box's id (for focus and shortcuts).
pub fn filter_id() -> Id {
    Id::unique("tensor-filter")
}

fn dtype_text(t: &TensorInfo) -> String {
    match (&t.source_dtype, t.precision.packed()) {
        (Some(d), _) => d.clone(),
        (None, Some(k)) => format!("u{}+F16", k.bits()),
        _ => "—".into(),
    }
}

/// Indices of the rows to show, filtered and sorted.
pub fn visible_rows(s: &Session, b: &Bundle, view: &TableView) -> Vec<usize> {
    let needle = view.filter.to_lowercase();
    let mut rows: Vec<usize> = (0..b.tensors.len())
        .filter(|&i| {
            let t = &b.tensors[i];
            (needle.is_empty() || t.name.to_lowercase().contains(&needle))
                && (view.precisions.is_empty() || view.precisions.contains(t.precision.as_str()))
        })
        .collect();
    let t = |i: usize| &b.tensors[i];
    match view.sort {
        SortColumn::Offset => {
            rows.sort_by_key(|&i| (t(i).alias_of.is_some(), t(i).file, t(i).offset, i))
        }
        SortColumn::Name => rows.sort_by(|&a, &c| natural_cmp(&t(a).name, &t(c).name)),
        SortColumn::Precision => rows.sort_by(|&a, &c| t(a).precision.cmp(&t(c).precision)),
        SortColumn::Shape => rows.sort_by_key(|&i| t(i).parameters()),
        SortColumn::Dtype => rows.sort_by_key(|&i| dtype_text(t(i))),
        SortColumn::Bytes => rows.sort_by_key(|&i| t(i).bytes),
        SortColumn::Resident => rows.sort_by_key(|&i| t(i).resident_bytes),
        SortColumn::Status => rows.sort_by_key(|&i| std::cmp::Reverse(s.status(i))),
    }
    if !view.ascending {
        rows.reverse();
    }
    rows
}

fn chips_ui(app: &mut App, ui: &mut egui::Ui, b: &Bundle) {
    let mut precisions: Vec<&str> = b.tensors.iter().map(|t| t.precision.as_str()).collect();
    precisions.sort_unstable();
    precisions.dedup();
    for p in precisions {
        let on = app.view.precisions.contains(p);
        if ui
            .selectable_label(on, p)
            .on_hover_text("Show only these precisions (click again to clear)")
            .clicked()
        {
            if on {
                app.view.precisions.remove(p);
            } else {
                app.view.precisions.insert(p.to_string());
            }
        }
    }
}

fn header_ui(app: &mut App, ui: &mut egui::Ui, label: &str, col: SortColumn) {
    let arrow = if app.view.sort == col {
        if app.view.ascending { " ⏶" } else { " ⏷" }
    } else {
        ""
    };
    if ui
        .add(egui::Button::new(RichText::new(format!("{label}{arrow}")).strong()).frame(false))
        .on_hover_text(format!("Sort by {label}"))
        .clicked()
    {
        if app.view.sort == col {
            app.view.ascending = !app.view.ascending;
        } else {
            app.view.sort = col;
            app.view.ascending = !matches!(
                col,
                SortColumn::Bytes | SortColumn::Resident | SortColumn::Status
            );
        }
    }
}

/// The filter bar and the table.
pub fn table_ui(app: &mut App, ui: &mut egui::Ui, focus_filter: bool, scroll_to_selected: bool) {
    let Some(bundle) = app.session.as_ref().and_then(|s| s.model.bundle.clone()) else {
        return;
    };
    ui.horizontal(|ui| {
        ui.label("Filter");
        let edit = egui::TextEdit::singleline(&mut app.view.filter)
            .id(filter_id())
            .hint_text("tensor name…  (Ctrl/Cmd+F, Esc clears)")
            .desired_width(260.0);
        let r = ui.add(edit);
        if focus_filter {
            r.request_focus();
        }
        chips_ui(app, ui, &bundle);
        ui.label(
            RichText::new(format!(
                "{} of {} tensors",
                app.rows.len(),
                bundle.tensors.len()
            ))
            .weak(),
        );
    });
    app.refresh_rows();
    let selected_pos = app
        .selected
        .and_then(|s| app.rows.iter().position(|&r| r == s));
    let row_h = ui.text_style_height(&egui::TextStyle::Body) + 6.0;
    let mut table = TableBuilder::new(ui)
        .id_salt("tensor-table")
        .striped(true)
        .resizable(true)
        .sense(egui::Sense::click())
        .cell_layout(egui::Layout::left_to_right(egui::Align::Center))
        .column(Column::exact(22.0))
        .column(Column::remainder().at_least(160.0).clip(true))
        .column(Column::exact(70.0))
        .column(Column::exact(86.0))
        .column(Column::exact(64.0))
        .column(Column::exact(76.0))
        .column(Column::exact(76.0));
    if scroll_to_selected && let Some(p) = selected_pos {
        table = table.scroll_to_row(p, None);
    }
    let mut clicked = None;
    let rows = app.rows.clone();
    table
        .header(row_h, |mut h| {
            h.col(|ui| header_ui(app, ui, "", SortColumn::Status));
            h.col(|ui| header_ui(app, ui, "name", SortColumn::Name));
            h.col(|ui| header_ui(app, ui, "precision", SortColumn::Precision));
            h.col(|ui| header_ui(app, ui, "shape", SortColumn::Shape));
            h.col(|ui| header_ui(app, ui, "dtype", SortColumn::Dtype));
            h.col(|ui| header_ui(app, ui, "bytes", SortColumn::Bytes));
            h.col(|ui| header_ui(app, ui, "resident", SortColumn::Resident));
        })
        .body(|body| {
            let Some(session) = app.session.as_ref() else {
                return;
            };
            body.rows(row_h, rows.len(), |mut row| {
                let i = rows[row.index()];
                let t = &bundle.tensors[i];
                row.set_selected(app.selected == Some(i));
                row.col(|ui| status_ui(ui, session.status(i)));
                row.col(|ui| {
                    let name = match &t.alias_of {
                        Some(target) => format!("{} → {target}", t.name),
                        None => t.name.clone(),
                    };
                    ui.add(
                        egui::Label::new(RichText::new(name).monospace())
                            .truncate()
                            .selectable(false),
                    );
                });
                row.col(|ui| {
                    ui.label(t.precision.as_str());
                });
                row.col(|ui| {
                    ui.label(t.shape_text());
                });
                row.col(|ui| {
                    ui.label(dtype_text(t));
                });
                row.col(|ui| {
                    ui.label(t.bytes.map_or("—".into(), human_bytes));
                });
                row.col(|ui| {
                    ui.label(t.resident_bytes.map_or("—".into(), human_bytes));
                });
                if row.response().clicked() {
                    clicked = Some(i);
                }
            });
        });
    if let Some(i) = clicked {
        app.commands.push(Command::Select(Some(i)));
    }
}

/// The mark shown for a status, with its hover text.
pub fn status_mark(s: RowStatus) -> (&'static str, &'static str) {
    match s {
        RowStatus::Pending => ("·", "not checked yet"),
        RowStatus::Ok => ("✔", "no finding"),
        RowStatus::Warning => ("⚠", "warnings"),
        RowStatus::Error => ("✖", "errors: see the detail panel"),
    }
}

fn status_ui(ui: &mut egui::Ui, s: RowStatus) {
    let (mark, hover) = status_mark(s);
    let color = match s {
        RowStatus::Pending => ui.visuals().weak_text_color(),
        RowStatus::Ok => egui::Color32::from_rgb(0x2e, 0xa0, 0x4e),
        RowStatus::Warning => ui.visuals().warn_fg_color,
        RowStatus::Error => ui.visuals().error_fg_color,
    };
    ui.label(RichText::new(mark).color(color))
        .on_hover_text(hover);
}
