//! The stream panel: per-file progress (bytes, throughput, ETA) and the
//! checks as they arrive, with pass/fail marks.

use egui::RichText;

use super::App;
use crate::audit::Severity;
use crate::report::human_bytes;

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
pub fn stream_ui(app: &mut App, ui: &mut egui::Ui) {
    let Some(s) = &app.session else { return };
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
            ui.checkbox(&mut app.errors_only, "errors only");
        });
    });
    super::spotcheck::stream_line_ui(&app.spot, ui);
    let Some(s) = &app.session else { return };
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
            let state = match f.ok {
                Some(true) => "✔ verified".to_string(),
                Some(false) => "✖ SHA-256 mismatch".to_string(),
                None if f.sha256.is_some() => "hashed".to_string(),
                None => format!(
                    "{} / {}  {}/s  {}",
                    human_bytes(done),
                    human_bytes(total),
                    human_bytes(rate as u64),
                    eta(done, total, rate)
                ),
            };
            ui.add(
                egui::ProgressBar::new(frac)
                    .desired_width(320.0)
                    .text(state),
            );
        });
    }
    ui.separator();
    let rows: Vec<usize> = s
        .log
        .iter()
        .enumerate()
        .filter(|(_, r)| !app.errors_only || r.severity == Some(Severity::Error))
        .map(|(i, _)| i)
        .collect();
    let row_h = ui.text_style_height(&egui::TextStyle::Body) + 2.0;
    egui::ScrollArea::vertical()
        .id_salt("check-log")
        .auto_shrink([false, false])
        .stick_to_bottom(true)
        .show_rows(ui, row_h, rows.len(), |ui, range| {
            for &i in &rows[range] {
                let r = &s.log[i];
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
