//! Summary and provenance: format, source revision, profile, each file's
//! SHA-256 against its expected value, the expected config.json hash, and
//! totals by precision with each one's share of the bundle.

use egui::RichText;

use super::{FileState, Session};
use crate::report::human_bytes;

/// Draws the summary tab. The totals were computed when the index arrived.
pub(super) fn summary_ui(ui: &mut egui::Ui, s: &Session) {
    let Some(b) = &s.model.bundle else { return };
    let p = &b.provenance;
    egui::Grid::new("provenance")
        .num_columns(2)
        .striped(true)
        .show(ui, |ui| {
            let mut row = |k: &str, v: String| {
                ui.label(RichText::new(k).strong());
                let short = short_hash(&v);
                let r = ui.label(RichText::new(&short).monospace());
                if short != v {
                    r.on_hover_text(v);
                }
                ui.end_row();
            };
            row(
                "format",
                p.format.clone().unwrap_or_else(|| b.format.name().into()),
            );
            row(
                "source revision",
                p.source_revision.clone().unwrap_or_else(|| "—".into()),
            );
            row("profile", p.profile.clone().unwrap_or_else(|| "—".into()));
            if p.calibrated.is_some() {
                row(
                    "read as",
                    format!("{} (see Lineage)", crate::format::gptq::READING),
                );
            }
            row("manifest SHA-256", p.manifest_sha256.clone());
            row(
                "config.json (expected)",
                p.expected_config_sha256
                    .clone()
                    .unwrap_or_else(|| "not given".into()),
            );
            // Checkpoints: the config's architecture, sizes and
            // quantization block, the shards' metadata.
            for (k, v) in &p.extra {
                row(k, v.clone());
            }
        });
    ui.add_space(8.0);
    ui.label(RichText::new("Files").strong());
    for (i, f) in s.model.files.iter().enumerate() {
        let state = s.file_state(i);
        let color = match state {
            FileState::Verified => egui::Color32::from_rgb(0x2e, 0xa0, 0x4e),
            FileState::VerifiedCached => egui::Color32::from_rgb(0x5b, 0x8a, 0x68),
            FileState::Mismatch => ui.visuals().error_fg_color,
            FileState::Hashed => ui.visuals().text_color(),
            FileState::Pending => ui.visuals().weak_text_color(),
        };
        ui.horizontal(|ui| {
            ui.label(RichText::new(&f.file).monospace());
            let r = ui.label(RichText::new(state.text()).color(color));
            if state == FileState::VerifiedCached {
                r.on_hover_text("From the cached audit: not hashed again in this session yet");
            }
        });
        for (what, v) in [
            ("sha256  ", f.sha256.as_deref()),
            ("expected", f.expected_sha256.as_deref()),
        ] {
            let full = v.unwrap_or(if what == "expected" {
                "not given"
            } else {
                "…"
            });
            ui.label(
                RichText::new(format!("{what} {}", short_hash(full)))
                    .monospace()
                    .small(),
            )
            .on_hover_text(full);
        }
    }
    if let Some(meta) = &p.gguf {
        ui.add_space(8.0);
        super::gguf_meta::metadata_ui(ui, meta);
    }
    ui.add_space(8.0);
    ui.label(RichText::new("Totals by precision").strong());
    let Some(t) = &s.totals else { return };
    egui::Grid::new("totals")
        .num_columns(5)
        .striped(true)
        .show(ui, |ui| {
            for h in ["precision", "tensors", "bytes", "share", "bits/weight"] {
                ui.label(RichText::new(h).weak());
            }
            ui.end_row();
            for (name, v) in &t.by_precision {
                ui.label(name);
                ui.label(v.tensors.to_string());
                ui.label(human_bytes(v.bytes));
                let share = if t.bytes > 0 {
                    v.bytes as f32 / t.bytes as f32
                } else {
                    0.0
                };
                ui.add(
                    egui::ProgressBar::new(share)
                        .desired_width(90.0)
                        .text(format!("{:.0}%", share * 100.0)),
                );
                ui.label(v.bits_per_weight.map_or("—".into(), |b| format!("{b:.2}")));
                ui.end_row();
            }
            ui.label(RichText::new("all").strong());
            ui.label(t.tensors.to_string());
            ui.label(human_bytes(t.bytes));
            ui.label("");
            ui.label(t.bits_per_weight.map_or("—".into(), |b| format!("{b:.2}")));
            ui.end_row();
        });
    if t.aliases > 0 {
        ui.label(
            RichText::new(format!("{} aliases share their targets' memory", t.aliases)).weak(),
        );
    }
}

/// A 64-digit hash shortened to fit a side panel: head…tail (hover shows all).
fn short_hash(v: &str) -> String {
    if v.len() == 64 && v.bytes().all(|b| b.is_ascii_hexdigit()) {
        format!("{}…{}", &v[..16], &v[56..])
    } else {
        v.to_string()
    }
}
