//! The tensor table: virtualised rows, sort by any column, substring filter,
//! precision chips, status marks from each tensor's findings.

use std::collections::BTreeSet;
use std::sync::Arc;

use egui::{Id, RichText};
use egui_extras::{Column, TableBuilder};

use super::{Command, Commands, RowStatus, Session};
use crate::format::{Bundle, TensorInfo, natural_cmp};
use crate::report::human_bytes;
use crate::util::text::{SHOWN_CHARS, shown};

/// The filter and sort of the tensor table.
#[derive(Debug, Clone, PartialEq)]
pub struct TableView {
    /// Substring filter on names.
    pub filter: String,
    /// Precisions to show; empty shows all.
    pub precisions: BTreeSet<String>,
    /// MLX-LM bit widths to show (a module's weight, scales and biases);
    /// empty shows all.
    pub bits: BTreeSet<u8>,
    /// Sort column.
    pub sort: SortColumn,
    /// Ascending?
    pub ascending: bool,
}

impl Default for TableView {
    fn default() -> Self {
        Self {
            filter: String::new(),
            precisions: BTreeSet::new(),
            bits: BTreeSet::new(),
            sort: SortColumn::Offset,
            ascending: true,
        }
    }
}

/// What the shown rows were computed from: rows are recomputed only when
/// this changes, never per frame.
#[derive(Debug, Clone, PartialEq)]
struct RowsKey {
    view: TableView,
    /// The bundle's address: a new bundle is new rows.
    bundle: usize,
    /// The session's generation, when the order depends on statuses.
    generation: u64,
}

/// The tensor table's own state.
#[derive(Default)]
pub struct TablePanel {
    /// Filter and sort.
    pub view: TableView,
    rows: Vec<usize>,
    key: Option<RowsKey>,
    /// Give the filter box focus on the next frame.
    pub(super) focus_filter: bool,
    /// Scroll to the selection on the next frame.
    pub(super) scroll_to_selected: bool,
}

impl TablePanel {
    /// The rows shown, in order (indices into the bundle's tensors).
    pub fn rows(&self) -> &[usize] {
        &self.rows
    }

    /// Recomputes the rows when the filter, sort or data changed.
    pub fn refresh(&mut self, session: Option<&Session>) {
        let Some((s, b)) = session.and_then(|s| Some((s, s.model.bundle.as_ref()?))) else {
            self.rows.clear();
            self.key = None;
            return;
        };
        let bundle = Arc::as_ptr(b) as usize;
        let generation = if self.view.sort == SortColumn::Status {
            s.generation
        } else {
            0
        };
        if let Some(k) = &self.key
            && k.bundle == bundle
            && k.generation == generation
            && k.view == self.view
        {
            return;
        }
        self.rows = visible_rows(s, b, &self.view);
        self.key = Some(RowsKey {
            view: self.view.clone(),
            bundle,
            generation,
        });
    }
}

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
    crate::report::stored_dtype(t)
}

/// An MLX-LM module member's quantization, as the format layer noted it
/// on the tensor's record (weight, scales, biases and global scale alike).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuantParams {
    /// Bits per code.
    pub bits: u8,
    /// Inputs per scale.
    pub group: u64,
    /// `affine`, `mxfp4`, `nvfp4`, `mxfp8`.
    pub mode: String,
    /// Set by a per-module entry of the config (not the global block).
    pub entry: bool,
}

/// The quantization of tensor `t`'s module, when it belongs to one.
pub fn quant_params(t: &TensorInfo) -> Option<QuantParams> {
    let q = t.quantization()?;
    Some(QuantParams {
        bits: q.bits,
        group: q.group_size,
        mode: q.mode.as_str().to_string(),
        entry: q.from_entry(),
    })
}

/// The bit width of tensor `t`'s module alone (no allocation: the index's
/// first frame asks it of every tensor).
pub fn quant_bits(t: &TensorInfo) -> Option<u8> {
    Some(t.quantization()?.bits)
}

/// The bits cell: `4b g64`, `mxfp4 g32`, with `*` when a per-module entry
/// of the config set it.
pub fn bits_text(t: &TensorInfo) -> String {
    match quant_params(t) {
        None => "—".into(),
        Some(q) => {
            let head = if q.mode == "affine" {
                format!("{}b", q.bits)
            } else {
                q.mode
            };
            format!("{head} g{}{}", q.group, if q.entry { " *" } else { "" })
        }
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
                && (view.bits.is_empty() || quant_bits(t).is_some_and(|b| view.bits.contains(&b)))
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

fn chips_ui(ui: &mut egui::Ui, view: &mut TableView, precisions: &[String]) {
    for p in precisions {
        let on = view.precisions.contains(p);
        if ui
            .selectable_label(on, p)
            .on_hover_text("Show only these precisions (click again to clear)")
            .clicked()
        {
            if on {
                view.precisions.remove(p);
            } else {
                view.precisions.insert(p.clone());
            }
        }
    }
}

fn bits_chips_ui(ui: &mut egui::Ui, view: &mut TableView, bits: &[u8]) {
    ui.label("Bits");
    for &b in bits {
        let on = view.bits.contains(&b);
        if ui
            .selectable_label(on, format!("{b}-bit"))
            .on_hover_text(
                "Show only the modules (weight, scales, biases) quantized with these bits (click again to clear)",
            )
            .clicked()
        {
            if on {
                view.bits.remove(&b);
            } else {
                view.bits.insert(b);
            }
        }
    }
}

fn header_ui(ui: &mut egui::Ui, view: &mut TableView, label: &str, col: SortColumn) {
    let arrow = if view.sort == col {
        if view.ascending { " ⏶" } else { " ⏷" }
    } else {
        ""
    };
    if ui
        .add(egui::Button::new(RichText::new(format!("{label}{arrow}")).strong()).frame(false))
        .on_hover_text(format!("Sort by {label}"))
        .clicked()
    {
        if view.sort == col {
            view.ascending = !view.ascending;
        } else {
            view.sort = col;
            view.ascending = !matches!(
                col,
                SortColumn::Bytes | SortColumn::Resident | SortColumn::Status
            );
        }
    }
}

/// The filter bar and the table. Only the visible rows are laid out and
/// formatted; nothing here walks every tensor.
pub fn table_ui(
    ui: &mut egui::Ui,
    panel: &mut TablePanel,
    session: &Session,
    bundle: &Bundle,
    selected: Option<usize>,
    tx: &mut Commands,
) {
    let focus_filter = std::mem::take(&mut panel.focus_filter);
    let scroll_to_selected = std::mem::take(&mut panel.scroll_to_selected);
    // Wrapped: a GGUF or mixed checkpoint has more precision chips than one
    // line holds, and an overflowing row would push the table's columns out
    // of the panel.
    ui.horizontal_wrapped(|ui| {
        ui.label("Filter");
        let edit = egui::TextEdit::singleline(&mut panel.view.filter)
            .id(filter_id())
            .hint_text("tensor name…  (Ctrl/Cmd+F, Esc clears)")
            .desired_width(260.0);
        let r = ui.add(edit);
        if focus_filter {
            r.request_focus();
        }
        chips_ui(ui, &mut panel.view, &session.precisions);
        ui.label(
            RichText::new(format!(
                "{} of {} tensors",
                panel.rows.len(),
                bundle.tensors.len()
            ))
            .weak(),
        );
    });
    // MLX-LM: a second row, so the first's chips keep their places.
    if !session.bits.is_empty() {
        ui.horizontal_wrapped(|ui| bits_chips_ui(ui, &mut panel.view, &session.bits));
    }
    panel.refresh(Some(session));
    let row_h = ui.text_style_height(&egui::TextStyle::Body) + 6.0;
    // MLX-LM checkpoints: each module's bits, group and mode, beside the
    // precision (the last column can fall outside a narrow panel).
    let with_bits = !session.bits.is_empty();
    let mut table = TableBuilder::new(ui)
        .id_salt("tensor-table")
        .striped(true)
        .resizable(true)
        .sense(egui::Sense::click())
        .cell_layout(egui::Layout::left_to_right(egui::Align::Center))
        .column(Column::exact(22.0))
        .column(Column::remainder().at_least(160.0).clip(true))
        .column(Column::exact(70.0));
    if with_bits {
        table = table.column(Column::exact(96.0));
    }
    table = table
        .column(Column::exact(86.0))
        .column(Column::exact(64.0))
        .column(Column::exact(76.0))
        .column(Column::exact(76.0));
    // Searching the rows is O(rows); only done on the frame that asks.
    if scroll_to_selected
        && let Some(p) = selected.and_then(|s| panel.rows.iter().position(|&r| r == s))
    {
        table = table.scroll_to_row(p, None);
    }
    let mut clicked = None;
    let (view, rows) = (&mut panel.view, &panel.rows);
    table
        .header(row_h, |mut h| {
            h.col(|ui| header_ui(ui, view, "", SortColumn::Status));
            h.col(|ui| header_ui(ui, view, "name", SortColumn::Name));
            h.col(|ui| header_ui(ui, view, "precision", SortColumn::Precision));
            if with_bits {
                h.col(|ui| {
                    ui.label(RichText::new("bits").strong()).on_hover_text(
                        "The module's bits (or float mode) and group size; * when a per-module entry of config.json's quantization block sets them",
                    );
                });
            }
            h.col(|ui| header_ui(ui, view, "shape", SortColumn::Shape));
            h.col(|ui| header_ui(ui, view, "dtype", SortColumn::Dtype));
            h.col(|ui| header_ui(ui, view, "bytes", SortColumn::Bytes));
            h.col(|ui| header_ui(ui, view, "resident", SortColumn::Resident));
        })
        .body(|body| {
            body.rows(row_h, rows.len(), |mut row| {
                let Some(t) = rows
                    .get(row.index())
                    .and_then(|&i| Some((i, bundle.tensors.get(i)?)))
                else {
                    return;
                };
                let (i, t) = t;
                row.set_selected(selected == Some(i));
                row.col(|ui| status_ui(ui, session.status(i)));
                row.col(|ui| {
                    let name = match &t.alias_of {
                        Some(target) => RichText::new(format!(
                            "{} → {}",
                            shown(&t.name, SHOWN_CHARS),
                            shown(target, SHOWN_CHARS)
                        )),
                        None => RichText::new(shown(&t.name, SHOWN_CHARS)),
                    };
                    ui.add(
                        egui::Label::new(name.monospace())
                            .truncate()
                            .selectable(false),
                    );
                });
                row.col(|ui| {
                    cell_ui(ui, t.precision.as_str());
                });
                if with_bits {
                    row.col(|ui| cell_ui(ui, &bits_text(t)));
                }
                row.col(|ui| {
                    cell_ui(ui, &t.shape_text());
                });
                row.col(|ui| {
                    cell_ui(ui, &dtype_text(t));
                });
                row.col(|ui| {
                    cell_ui(ui, &t.bytes.map_or("—".into(), human_bytes));
                });
                row.col(|ui| {
                    cell_ui(ui, &t.resident_bytes.map_or("—".into(), human_bytes));
                });
                if row.response().clicked() {
                    clicked = Some(i);
                }
            });
        });
    if let Some(i) = clicked {
        tx.send(Command::Select(Some(i)));
    }
}

/// A plain cell: painted text, not a widget. A table of thousands of rows
/// shows a few dozen at a time, but each label is a widget with its own
/// id, response and accessibility node every frame; the row itself is the
/// widget (it is clicked and selected), and the name cell stays a label so
/// the row can be found by its name.
fn cell_ui(ui: &mut egui::Ui, text: &str) {
    use egui::emath::GuiRounding as _;
    let rect = ui.max_rect();
    let font = egui::TextStyle::Body.resolve(ui.style());
    // The colour a label would take (a selected row overrides it).
    let galley = ui
        .painter()
        .layout_no_wrap(text.to_owned(), font, ui.visuals().text_color());
    // Where a centred label would sit: on the layout's rounding grid, so the
    // glyphs stay as sharp as a label's.
    let pos = egui::pos2(rect.left(), rect.center().y - galley.size().y / 2.0).round_ui();
    ui.painter().galley(pos, galley, ui.visuals().text_color());
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
