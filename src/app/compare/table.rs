//! The diff table: one row per tensor (or changed expert), filterable by
//! status, sortable by weight error and the other columns.

use egui::RichText;
use egui_extras::{Column, TableBuilder};

use super::{Command, Commands, CompareView};
use crate::diff::markdown::status_text;
use crate::diff::{DiffReport, Status, TensorDiff};
use crate::format::natural_cmp;

/// Which statuses the table shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusFilter {
    /// Identical tensors.
    pub identical: bool,
    /// Changed tensors.
    pub changed: bool,
    /// Tensors only in A.
    pub only_a: bool,
    /// Tensors only in B.
    pub only_b: bool,
}

impl Default for StatusFilter {
    fn default() -> Self {
        Self {
            identical: true,
            changed: true,
            only_a: true,
            only_b: true,
        }
    }
}

impl StatusFilter {
    /// Is a row of status `s` shown?
    pub fn shows(&self, s: Status) -> bool {
        match s {
            Status::Identical => self.identical,
            Status::Changed => self.changed,
            Status::OnlyA => self.only_a,
            Status::OnlyB => self.only_b,
        }
    }

    fn flag(&mut self, s: Status) -> &mut bool {
        match s {
            Status::Identical => &mut self.identical,
            Status::Changed => &mut self.changed,
            Status::OnlyA => &mut self.only_a,
            Status::OnlyB => &mut self.only_b,
        }
    }
}

/// Columns the diff table sorts by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DiffSort {
    /// The engine's order: changed first (structural changes, then by
    /// error), one-sided, then identical.
    #[default]
    Engine,
    /// Status.
    Status,
    /// Name.
    Name,
    /// Weight-space relative error (rows without one last).
    Error,
    /// Share of changed codes.
    Codes,
}

/// The rows shown, filtered and sorted (indices into `r.tensors`).
pub fn visible_rows(
    r: &DiffReport,
    f: &StatusFilter,
    sort: DiffSort,
    ascending: bool,
) -> Vec<usize> {
    let mut rows: Vec<usize> = (0..r.tensors.len())
        .filter(|&k| f.shows(r.tensors[k].status))
        .collect();
    let t = |k: usize| &r.tensors[k];
    // Missing values sort last whichever the direction.
    let by = |x: Option<f64>, y: Option<f64>, asc: bool| match (x, y) {
        (Some(p), Some(q)) if asc => p.total_cmp(&q),
        (Some(p), Some(q)) => q.total_cmp(&p),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => std::cmp::Ordering::Equal,
    };
    match sort {
        DiffSort::Engine => {
            if !ascending {
                rows.reverse();
            }
        }
        DiffSort::Status => {
            rows.sort_by_key(|&k| t(k).status);
            if !ascending {
                rows.reverse();
            }
        }
        DiffSort::Name => {
            rows.sort_by(|&a, &b| {
                natural_cmp(&t(a).name, &t(b).name).then(t(a).expert.cmp(&t(b).expert))
            });
            if !ascending {
                rows.reverse();
            }
        }
        DiffSort::Error => {
            rows.sort_by(|&a, &b| by(t(a).weight_rel_err, t(b).weight_rel_err, ascending))
        }
        DiffSort::Codes => rows.sort_by(|&a, &b| {
            let share = |k: usize| t(k).codes.as_ref().map(|c| c.changed_share);
            by(share(a), share(b), ascending)
        }),
    }
    rows
}

/// The status chips: click one to hide or show that status.
pub(super) fn filter_ui(ui: &mut egui::Ui, view: &mut CompareView) {
    ui.horizontal(|ui| {
        ui.label("Show");
        for s in [
            Status::Changed,
            Status::OnlyA,
            Status::OnlyB,
            Status::Identical,
        ] {
            let on = view.filter.shows(s);
            if ui
                .selectable_label(on, status_text(s))
                .on_hover_text("Show or hide the tensors in this state")
                .clicked()
            {
                *view.filter.flag(s) = !on;
            }
        }
        ui.label(RichText::new(format!("{} rows", view.rows.len())).weak());
    });
}

fn status_color(ui: &egui::Ui, s: Status) -> egui::Color32 {
    match s {
        Status::Identical => ui.visuals().weak_text_color(),
        Status::Changed => ui.visuals().warn_fg_color,
        Status::OnlyA | Status::OnlyB => ui.visuals().error_fg_color,
    }
}

/// Painted text (not a widget), as the tensor table's plain cells.
fn cell_ui(ui: &mut egui::Ui, text: &str, color: Option<egui::Color32>) {
    use egui::emath::GuiRounding as _;
    let rect = ui.max_rect();
    let font = egui::TextStyle::Body.resolve(ui.style());
    let color = color.unwrap_or_else(|| ui.visuals().text_color());
    let galley = ui.painter().layout_no_wrap(text.to_owned(), font, color);
    let pos = egui::pos2(rect.left(), rect.center().y - galley.size().y / 2.0).round_ui();
    ui.painter().galley(pos, galley, color);
}

/// Short text of a row's columns after the name.
fn cells(t: &TensorDiff) -> [String; 6] {
    let opt = |v: Option<f64>, f: &dyn Fn(f64) -> String| v.map_or("—".into(), f);
    [
        t.expert.map_or(String::new(), |e| e.to_string()),
        t.differs.join(", "),
        t.codes
            .as_ref()
            .map_or("—".into(), |c| format!("{:.4}%", c.changed_share * 100.0)),
        t.scales.as_ref().map_or("—".into(), |s| {
            opt(s.median_ratio, &|x| format!("{x:.4}"))
        }),
        opt(t.weight_rel_err, &|x| format!("{x:.3e}")),
        t.worst_row.as_ref().map_or("—".into(), |w| {
            format!("{} ({})", w.row, opt(w.rel_err, &|x| format!("{x:.2e}")))
        }),
    ]
}

/// The virtualised table; a click selects a row.
pub(super) fn table_ui(ui: &mut egui::Ui, view: &mut CompareView, tx: &mut Commands) {
    let Some(r) = &view.result else { return };
    let row_h = ui.text_style_height(&egui::TextStyle::Body) + 6.0;
    let mut clicked = None;
    let selected = view.selected;
    let scroll = std::mem::take(&mut view.scroll_to_selected);
    let rows = &view.rows;
    let report = &r.report;
    let mut sort_click = None;
    let (cur_sort, asc) = (view.sort, view.ascending);
    // The expert column only for bundles with stacked experts (NVFP4).
    let experts = r.has_experts;
    let columns: Vec<(&str, DiffSort, f32)> = [
        ("expert", DiffSort::Engine, 48.0),
        ("differs", DiffSort::Engine, 96.0),
        ("codes Δ", DiffSort::Codes, 70.0),
        ("scale B/A", DiffSort::Engine, 64.0),
        ("rel error", DiffSort::Error, 72.0),
        ("worst row", DiffSort::Engine, 100.0),
    ]
    .into_iter()
    .filter(|c| experts || c.0 != "expert")
    .collect();
    let mut table = TableBuilder::new(ui)
        .id_salt("diff-table")
        .striped(true)
        .resizable(true)
        .sense(egui::Sense::click())
        .cell_layout(egui::Layout::left_to_right(egui::Align::Center))
        .column(Column::exact(70.0))
        .column(Column::remainder().at_least(160.0).clip(true));
    for c in &columns {
        table = table.column(Column::exact(c.2).clip(true));
    }
    if scroll && let Some(p) = selected.and_then(|s| rows.iter().position(|&r| r == s)) {
        table = table.scroll_to_row(p, None);
    }
    let sortable = |ui: &mut egui::Ui, label: &str, col: DiffSort| {
        if col == DiffSort::Engine {
            ui.label(RichText::new(label).strong());
            return false;
        }
        ui.add(
            egui::Button::new(RichText::new(header_text(label, col, cur_sort, asc)).strong())
                .frame(false),
        )
        .on_hover_text(format!("Sort by {label}"))
        .clicked()
    };
    table
        .header(row_h, |mut h| {
            let first = [("status", DiffSort::Status), ("tensor", DiffSort::Name)];
            for (label, col) in first.into_iter().chain(columns.iter().map(|c| (c.0, c.1))) {
                h.col(|ui| {
                    if sortable(ui, label, col) {
                        sort_click = Some(col);
                    }
                });
            }
        })
        .body(|body| {
            body.rows(row_h, rows.len(), |mut row| {
                let Some((k, t)) = rows
                    .get(row.index())
                    .and_then(|&k| Some((k, report.tensors.get(k)?)))
                else {
                    return;
                };
                row.set_selected(selected == Some(k));
                row.col(|ui| {
                    let c = status_color(ui, t.status);
                    cell_ui(ui, status_text(t.status), Some(c));
                });
                row.col(|ui| {
                    ui.add(
                        egui::Label::new(RichText::new(&t.name).monospace())
                            .truncate()
                            .selectable(false),
                    );
                });
                for (i, text) in cells(t).iter().enumerate() {
                    if i > 0 || experts {
                        row.col(|ui| cell_ui(ui, text, None));
                    }
                }
                if row.response().clicked() {
                    clicked = Some(k);
                }
            });
        });
    if let Some(col) = sort_click {
        sort_by(view, col);
    }
    if let Some(k) = clicked {
        tx.send(Command::SelectDiffRow(Some(k)));
    }
}

/// A sortable column's title, with an arrow on the sorted one.
fn header_text(label: &str, col: DiffSort, sort: DiffSort, ascending: bool) -> String {
    match (col == sort, ascending) {
        (false, _) => label.to_string(),
        (true, true) => format!("{label} ⏶"),
        (true, false) => format!("{label} ⏷"),
    }
}

/// A header click: sort by `col`, again to reverse.
pub(super) fn sort_by(view: &mut CompareView, col: DiffSort) {
    if view.sort == col {
        view.ascending = !view.ascending;
    } else {
        view.sort = col;
        view.ascending = !matches!(col, DiffSort::Error | DiffSort::Codes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diff::{SideRef, Summary};

    fn row(name: &str, status: Status, err: Option<f64>) -> TensorDiff {
        TensorDiff {
            name: name.into(),
            status,
            expert: None,
            differs: Vec::new(),
            a: None,
            b: None,
            codes: None,
            scales: None,
            weight_rel_err: err,
            worst_row: None,
        }
    }

    fn report() -> DiffReport {
        let side = SideRef {
            path: "x".into(),
            format: "f".into(),
            manifest_sha256: String::new(),
        };
        DiffReport {
            a: side.clone(),
            b: side,
            summary: Summary::default(),
            tensors: vec![
                row("c1", Status::Changed, Some(0.1)),
                row("c2", Status::Changed, Some(0.3)),
                row("c3", Status::Changed, None),
                row("oa", Status::OnlyA, None),
                row("i1", Status::Identical, None),
            ],
        }
    }

    #[test]
    fn filter_hides_a_status_and_error_sort_puts_missing_last() {
        let r = report();
        let mut f = StatusFilter::default();
        assert_eq!(visible_rows(&r, &f, DiffSort::Engine, true).len(), 5);
        f.identical = false;
        assert_eq!(visible_rows(&r, &f, DiffSort::Engine, true), [0, 1, 2, 3]);
        let desc = visible_rows(&r, &f, DiffSort::Error, false);
        assert_eq!(&desc[..2], &[1, 0]);
        let asc = visible_rows(&r, &f, DiffSort::Error, true);
        assert_eq!(&asc[..2], &[0, 1]);
    }
}
