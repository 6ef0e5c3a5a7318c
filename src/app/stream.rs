//! The stream panel: per-file progress (bytes, throughput, ETA) and the
//! checks as they arrive, with pass/fail marks. Once an audit ends with
//! errors, they are listed first and the list scrolls to the top, so an
//! invalid bundle shows why at once.

use egui::RichText;

use super::{App, CentralTab, Commands, FileState, RowStatus, Session, SideTab, SpotView};
use crate::audit::Severity;
use crate::report::human_bytes;
use crate::util::text::{SHOWN_CHARS, shown};

/// The stream panel's own state: the filter, and the log lines it lets
/// through, extended as the log grows (never rebuilt per frame).
#[derive(Default)]
pub(super) struct StreamPanel {
    errors_only: bool,
    /// Indices into the session's log of its error lines.
    errors: Vec<usize>,
    /// Indices of the other lines (the errors-first order's tail).
    others: Vec<usize>,
    /// Log lines already looked at, and the session they belong to.
    scanned: usize,
    session: Option<u64>,
    /// The session whose finished list was scrolled to the top.
    topped: Option<u64>,
}

/// Which log line the k-th row of the list shows.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Order {
    /// As they arrived (while the audit runs, or when it found no error).
    Arrival,
    /// Errors only.
    ErrorsOnly,
    /// Errors, then the rest in arrival order.
    ErrorsFirst,
}

impl StreamPanel {
    fn scan(&mut self, s: &Session) {
        if self.session != Some(s.id) || self.scanned > s.log.len() {
            self.errors.clear();
            self.others.clear();
            self.scanned = 0;
            self.session = Some(s.id);
        }
        for (i, r) in s.log.iter().enumerate().skip(self.scanned) {
            if r.severity == Some(Severity::Error) {
                self.errors.push(i);
            } else {
                self.others.push(i);
            }
        }
        self.scanned = s.log.len();
    }

    fn order(&self, s: &Session) -> Order {
        if self.errors_only {
            Order::ErrorsOnly
        } else if !s.running() && !self.errors.is_empty() {
            Order::ErrorsFirst
        } else {
            Order::Arrival
        }
    }

    fn count(&self, order: Order, s: &Session) -> usize {
        match order {
            Order::Arrival => s.log.len(),
            Order::ErrorsOnly => self.errors.len(),
            Order::ErrorsFirst => self.errors.len() + self.others.len(),
        }
    }

    fn line(&self, order: Order, k: usize) -> Option<usize> {
        match order {
            Order::Arrival => Some(k),
            Order::ErrorsOnly => self.errors.get(k).copied(),
            Order::ErrorsFirst => match k.checked_sub(self.errors.len()) {
                None => self.errors.get(k).copied(),
                Some(rest) => self.others.get(rest).copied(),
            },
        }
    }
}

impl App {
    /// The Invalid badge's click: selects the first tensor with an error in
    /// the table's order (clearing a filter that hides every one of them)
    /// and scrolls the table to it.
    pub(super) fn show_first_error(&mut self) {
        let Some(s) = &self.session else { return };
        let failing = |i: &usize| s.status(*i) == RowStatus::Error;
        let mut first = self.table.rows().iter().copied().find(failing);
        if first.is_none() && (0..s.tensor_findings.len()).any(|i| failing(&i)) {
            self.table.view.filter.clear();
            self.table.view.precisions.clear();
            self.table.refresh(Some(s));
            first = self.table.rows().iter().copied().find(failing);
        }
        match first {
            Some(i) => {
                self.selected = Some(i);
                self.side = SideTab::Tensor;
                self.central = CentralTab::Tensors;
                self.table.scroll_to_selected = true;
            }
            // The errors concern no tensor (a file's hash, the manifest):
            // the summary lists the files, the stream panel the findings.
            None => self.side = SideTab::Summary,
        }
    }
}

fn eta(done: u64, total: u64, rate: f64) -> String {
    if rate <= 0.0 || done >= total {
        return String::new();
    }
    let secs = (total - done) as f64 / rate;
    if secs < 1.0 {
        "ETA <1 s".into()
    } else {
        format!("ETA {secs:.0} s")
    }
}

/// Draws the stream panel.
pub(super) fn stream_ui(
    ui: &mut egui::Ui,
    panel: &mut StreamPanel,
    s: &Session,
    spot: &SpotView,
    tx: &mut Commands,
) {
    let passed = s.model.passed;
    let errors = s.model.errors();
    ui.horizontal(|ui| {
        ui.label(RichText::new("Audit").strong());
        ui.label(format!("{passed} checks passed"));
        if errors > 0 {
            let plural = if errors == 1 { "error" } else { "errors" };
            ui.label(
                RichText::new(format!("{errors} {plural}")).color(ui.visuals().error_fg_color),
            );
        }
        if let Some(date) = &s.cached {
            ui.label(RichText::new(format!("(from the cache, {date})")).weak());
        }
        ui.with_layout(egui::Layout::right_to_left(egui::Align::Center), |ui| {
            ui.checkbox(&mut panel.errors_only, "errors only");
        });
    });
    super::spotcheck::stream_line_ui(ui, spot, tx);
    for (i, f) in s.model.files.iter().enumerate() {
        let (done, total, rate) = s.model.progress.get(i).copied().unwrap_or((0, 0, 0.0));
        let (done, total) = match (f.sha256.as_ref(), f.bytes) {
            (Some(_), Some(b)) => (b, b),
            _ => (done, total),
        };
        let frac = if total > 0 {
            done as f32 / total as f32
        } else {
            0.0
        };
        ui.horizontal(|ui| {
            ui.label(RichText::new(&f.file).monospace());
            let state = match s.file_state(i) {
                FileState::Mismatch => "✖ SHA-256 mismatch".to_string(),
                FileState::Pending => format!(
                    "{} / {}  {}/s  {}",
                    human_bytes(done),
                    human_bytes(total),
                    human_bytes(rate as u64),
                    eta(done, total, rate)
                ),
                other => other.text().to_string(),
            };
            ui.add(
                egui::ProgressBar::new(frac)
                    .desired_width(320.0)
                    .text(state),
            );
        });
    }
    ui.separator();
    panel.scan(s);
    let order = panel.order(s);
    let count = panel.count(order, s);
    let row_h = ui.text_style_height(&egui::TextStyle::Body) + 2.0;
    let mut area = egui::ScrollArea::vertical()
        .id_salt("check-log")
        .auto_shrink([false, false])
        .stick_to_bottom(order == Order::Arrival);
    if order == Order::ErrorsFirst && panel.topped != Some(s.id) {
        // Once, when the audit ends with errors: show them.
        panel.topped = Some(s.id);
        area = area.vertical_scroll_offset(0.0);
    }
    let panel = &*panel;
    area.show_rows(ui, row_h, count, |ui, range| {
        for k in range {
            let Some(r) = panel.line(order, k).and_then(|i| s.log.get(i)) else {
                continue;
            };
            ui.horizontal(|ui| {
                let (mark, color) = match r.severity {
                    None => ("✔", egui::Color32::from_rgb(0x2e, 0xa0, 0x4e)),
                    Some(Severity::Error) => ("✖", ui.visuals().error_fg_color),
                    Some(Severity::Warning) => ("⚠", ui.visuals().warn_fg_color),
                    Some(Severity::Info) => ("ℹ", ui.visuals().text_color()),
                };
                ui.label(RichText::new(mark).color(color));
                ui.label(RichText::new(r.check.as_str()).monospace());
                if let Some(t) = &r.tensor {
                    ui.label(RichText::new(shown(t, SHOWN_CHARS)).weak());
                }
                if let Some(m) = &r.message {
                    ui.label(shown(m, 4 * SHOWN_CHARS));
                }
            });
        }
    });
}
