//! Summary and provenance: format, source revision, profile, each file's
//! SHA-256 against its expected value, the expected config.json hash, and
//! totals by precision with each one's share of the bundle.

use egui::RichText;

use super::{FileState, Session};
use crate::report::{human_bytes, lineage};

/// Draws the summary tab. The totals were computed when the index arrived.
pub(super) fn summary_ui(ui: &mut egui::Ui, s: &Session) {
    let Some(b) = &s.model.bundle else { return };
    // The signature leads: who signed, and whether every digest matched.
    if matches!(s.model.outcome, Some(Ok(_))) {
        let head = crate::report::lineage::signature_headline(s.model.signature.as_ref());
        signature_line_ui(ui, s.model.signature.as_ref(), &head);
    } else if std::fs::symlink_metadata(b.dir.join(crate::signing::SIGNATURE_FILE)).is_ok() {
        ui.label(RichText::new("Signature: checking…").weak());
    }
    ui.add_space(4.0);
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
            // A GGUF file or a checkpoint's config declares no source
            // revision, profile or source config: no rows of dashes.
            let declares = lineage::declares_source(b.format.name());
            if declares {
                row(
                    "source revision",
                    p.source_revision.clone().unwrap_or_else(|| "—".into()),
                );
                row("profile", p.profile.clone().unwrap_or_else(|| "—".into()));
            }
            if p.calibrated.is_some() {
                row(
                    "read as",
                    format!("{} (see Lineage)", crate::format::gptq::READING),
                );
            }
            if !p.manifest_sha256.is_empty() {
                row(
                    &lineage::manifest_hash_label(b.format.name(), p.manifest_file.as_deref()),
                    p.manifest_sha256.clone(),
                );
            }
            if declares {
                row(
                    "config.json (expected)",
                    p.expected_config_sha256
                        .clone()
                        .unwrap_or_else(|| "not given".into()),
                );
            }
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
            FileState::Verified | FileState::AsSigned => egui::Color32::from_rgb(0x2e, 0xa0, 0x4e),
            FileState::VerifiedCached => egui::Color32::from_rgb(0x5b, 0x8a, 0x68),
            FileState::Mismatch | FileState::NotAsSigned => ui.visuals().error_fg_color,
            FileState::Hashed | FileState::ReadNotHashed => ui.visuals().text_color(),
            FileState::Pending => ui.visuals().weak_text_color(),
        };
        ui.horizontal(|ui| {
            ui.label(RichText::new(&f.file).monospace());
            let r = ui.label(RichText::new(state.text()).color(color));
            if state == FileState::VerifiedCached {
                r.on_hover_text("From the cached audit: not hashed again in this session yet");
            } else if state == FileState::AsSigned {
                r.on_hover_text(
                    "The folder claims no digest of this file; the OMS signature verified and \
                     every digest it signs for the file matched",
                );
            } else if state == FileState::NotAsSigned {
                r.on_hover_text(
                    "The OMS signature does not vouch for these bytes: a digest differs, a \
                     signed range is gone or bytes are not covered (see the oms.* findings), \
                     even where the folder's own manifest agrees with them",
                );
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
        ui.label(RichText::new(crate::report::aliases_line(t.aliases)).weak());
    }
    ui.add_space(8.0);
    ui.label(RichText::new("Stored by dtype").strong());
    egui::Grid::new("totals-by-dtype")
        .num_columns(4)
        .striped(true)
        .show(ui, |ui| {
            for h in ["dtype", "tensors", "parameters", "bytes"] {
                ui.label(RichText::new(h).weak());
            }
            ui.end_row();
            for (name, v) in &t.by_dtype {
                ui.label(RichText::new(name).monospace());
                ui.label(v.tensors.to_string());
                ui.label(count_text(v.parameters))
                    .on_hover_text(format!("{} parameters", v.parameters));
                ui.label(human_bytes(v.bytes));
                ui.end_row();
            }
        });
}

/// A parameter count a person reads at a glance: 7.2 B, 350 M, 4.1 K.
fn count_text(n: u64) -> String {
    match n {
        0..1_000 => n.to_string(),
        1_000..1_000_000 => format!("{:.1} K", n as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1} M", n as f64 / 1e6),
        _ => format!("{:.2} B", n as f64 / 1e9),
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

/// The signature's state as one coloured line, labelled "Signature: …"
/// for screen readers and tests.
pub(super) fn signature_line_ui(
    ui: &mut egui::Ui,
    sig: Option<&crate::signing::SignatureReport>,
    headline: &str,
) {
    let color = match sig {
        Some(s) if s.verified => egui::Color32::from_rgb(0x2e, 0xa0, 0x4e),
        Some(s)
            if s.signature_valid == Some(false)
                || !s.not_verified.is_empty() && s.files_checked == 0 =>
        {
            ui.visuals().error_fg_color
        }
        Some(_) => ui.visuals().warn_fg_color,
        None => ui.visuals().weak_text_color(),
    };
    let text = format!("Signature: {headline}");
    let r = ui.add(egui::Label::new(RichText::new(&text).strong().color(color)).wrap());
    if let Some(s) = sig {
        let mut tip = format!("{}\n{}", s.file, s.media_type.clone().unwrap_or_default());
        for t in &s.signing_times {
            tip.push_str(&format!("\nsigned at {t}"));
        }
        for n in &s.not_verified {
            tip.push_str(&format!("\nnot verified: {n}"));
        }
        r.on_hover_text(tip);
    }
}

/// The keys and roots remembered for this folder, and buttons to pick
/// more (the file dialog runs on a job; the audit then runs again).
pub(super) fn signing_trust_ui(
    ui: &mut egui::Ui,
    s: &Session,
    trust: &crate::signing::TrustPaths,
    tx: &mut super::Commands,
) {
    use super::Command;
    use super::signing::TrustFile;
    let signed = s.model.signature.is_some();
    let nothing = trust.keys.is_empty() && trust.roots.is_empty() && trust.trusted_root.is_none();
    if !signed && nothing {
        return;
    }
    ui.add_space(6.0);
    ui.horizontal(|ui| {
        ui.label(RichText::new("Verify with").strong());
        if ui
            .button("Key…")
            .on_hover_text("Pick the signer's public key (PEM); remembered for this folder")
            .clicked()
        {
            tx.send(Command::PickSigningFile(TrustFile::Key));
        }
        if ui
            .button("Root…")
            .on_hover_text("Pick a trusted root certificate (PEM), or a Sigstore trusted_root.json for the sigstore method; remembered for this folder")
            .clicked()
        {
            tx.send(Command::PickSigningFile(TrustFile::Root));
        }
        if !nothing
            && ui
                .button("Forget")
                .on_hover_text("Forget the keys and roots remembered for this folder")
                .clicked()
        {
            tx.send(Command::ForgetSigningFiles);
        }
    });
    for k in &trust.keys {
        ui.label(
            RichText::new(format!("key  {}", k.display()))
                .monospace()
                .weak(),
        );
    }
    for r in &trust.roots {
        ui.label(
            RichText::new(format!("root {}", r.display()))
                .monospace()
                .weak(),
        );
    }
    if let Some(t) = &trust.trusted_root {
        ui.label(
            RichText::new(format!("trusted root {}", t.display()))
                .monospace()
                .weak(),
        );
    }
}
