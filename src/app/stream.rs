//! The stream panel: per-file progress (bytes, throughput, ETA) and the
//! checks as they arrive, with pass/fail marks.

use egui::RichText;

use super::{Commands, FileState, Session, SpotView};
use crate::audit::Severity;
use crate::report::human_bytes;

/// The stream panel's own state: the filter, and the log lines it lets
/// through, extended as the log grows (never rebuilt per frame).
#[derive(Default)]
pub(super) struct StreamPanel {
    errors_only: bool,
    /// Indices into the session's log of its error lines.
    errors: Vec<usize>,
    /// Log lines already looked at, and the session they belong to.
    scanned: usize,
    session: Option<u64>,
}

impl StreamPanel {
    fn error_rows(&mut self, s: &Session) -> &[usize] {
        if self.session != Some(s.id) || self.scanned > s.log.len() {
            self.errors.clear();
            self.scanned = 0;
            self.session = Some(s.id);
        }
        for (i, r) in s.log.iter().enumerate().skip(self.scanned) {
            if r.severity == Some(Severity::Error) {
                self.errors.push(i);
            }
        }
        self.scanned = s.log.len();
        &self.errors
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
    let errors_only = panel.errors_only;
    let errors = panel.error_rows(s);
    let count = if errors_only {
        errors.len()
    } else {
        s.log.len()
    };
    let row_h = ui.text_style_height(&egui::TextStyle::Body) + 2.0;
    egui::ScrollArea::vertical()
        .id_salt("check-log")
        .auto_shrink([false, false])
        .stick_to_bottom(true)
        .show_rows(ui, row_h, count, |ui, range| {
            for k in range {
                let i = if errors_only {
                    errors.get(k).copied()
                } else {
                    Some(k)
                };
                let Some(r) = i.and_then(|i| s.log.get(i)) else {
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
                        ui.label(RichText::new(t).weak());
                    }
                    if let Some(m) = &r.message {
                        ui.label(m);
                    }
                });
            }
        });
}
