//! The spot-check panels: the detail panel's section, the central tab and
//! the stream panel's progress line. They read [`SpotView`] and send
//! commands; the jobs live in the parent module.

use egui::{Color32, RichText};
use egui_extras::{Column, TableBuilder};

use super::{JobKind, SpotView, checkable};
use crate::app::{Command, Commands};
use crate::format::Bundle;
use crate::mlx;
use crate::spotcheck::{DEFAULT_MAX_ROWS, SpotResult, XDtype};

fn not_built_ui(ui: &mut egui::Ui) {
    ui.label(
        RichText::new("This bundlescope was built without MLX, so it cannot run spot checks.")
            .color(ui.visuals().warn_fg_color),
    );
    ui.label(
        RichText::new(format!(
            "Install MLX ({}) and rebuild with `cargo build --release --features mlx`.",
            mlx::INSTALL_HINT
        ))
        .weak(),
    );
}

fn settings_ui(v: &mut SpotView, ui: &mut egui::Ui) {
    ui.horizontal(|ui| {
        ui.label("x");
        egui::ComboBox::from_id_salt("spot-dtype")
            .selected_text(v.dtype.as_str())
            .width(60.0)
            .show_ui(ui, |ui| {
                ui.selectable_value(&mut v.dtype, XDtype::F32, "f32");
                ui.selectable_value(&mut v.dtype, XDtype::Bf16, "bf16");
            })
            .response
            .on_hover_text("dtype of the random input x: f32 (tolerance 1e-5) or bf16 (1e-2; more on MLX's CPU, which accumulates bf16 in bf16)");
        if v.batch == 0 {
            v.batch = 8;
        }
        ui.label("batch");
        ui.add(egui::DragValue::new(&mut v.batch).range(1..=4096))
            .on_hover_text("Rows of x");
    });
}

/// The detail panel's spot-check section for tensor `i`.
pub fn detail_section_ui(
    ui: &mut egui::Ui,
    spot: &mut SpotView,
    bundle: &Bundle,
    i: usize,
    tx: &mut Commands,
) {
    if !checkable(bundle, i) {
        return;
    }
    ui.add_space(6.0);
    ui.label(RichText::new("Spot check on MLX").strong()).on_hover_text(
        "MLX computes x·Wᵀ from the packed bytes, fed as the reference loader feeds them; bundlescope's own decoder computes it in f64. They must agree.",
    );
    if !mlx::available() {
        not_built_ui(ui);
        return;
    }
    settings_ui(spot, ui);
    let running = spot.running();
    ui.horizontal(|ui| {
        let run = ui
            .add_enabled(!running, egui::Button::new("Run on MLX"))
            .on_hover_text(format!(
                "Spot-check this tensor, every row ({})",
                ui.ctx().format_shortcut(&run_shortcut())
            ));
        if run.clicked() {
            tx.send(Command::SpotCheck(Some(i)));
        }
        if matches!(spot.kind(), Some(JobKind::Tensor(t)) if t == i) {
            ui.spinner();
            ui.label("running…");
        }
    });
    if let Some(e) = &spot.error {
        ui.label(RichText::new(e).color(ui.visuals().error_fg_color));
    }
    let target = bundle.resolve_alias(i).unwrap_or(i);
    let results = spot.results_of(i).or_else(|| spot.results_of(target));
    if let Some(results) = results {
        if let Some(r) = results.first() {
            ui.label(
                RichText::new(format!(
                    "on {} · {} x · batch {} · {} of {} rows",
                    r.device,
                    r.dtype.as_str(),
                    r.batch,
                    r.rows_checked,
                    r.shape[0]
                ))
                .weak(),
            );
        }
        results_table_ui(ui, &format!("spot-t{i}"), results, None);
    }
}

/// The shortcut of "Run on MLX" (from the app's one table).
pub fn run_shortcut() -> egui::KeyboardShortcut {
    crate::app::shortcuts::shortcut(crate::app::shortcuts::Action::SpotCheck)
}

/// The shortcut of "Spot-check all" (from the app's one table).
pub fn run_all_shortcut() -> egui::KeyboardShortcut {
    crate::app::shortcuts::shortcut(crate::app::shortcuts::Action::SpotCheckAll)
}

fn pass_text(ui: &egui::Ui, pass: bool) -> RichText {
    if pass {
        RichText::new("✔ pass").color(Color32::from_rgb(0x2e, 0x9e, 0x4e))
    } else {
        RichText::new("✖ FAIL").color(ui.visuals().error_fg_color)
    }
}

/// The longest dotted prefix every name shares (shown once, above the table).
fn common_prefix(names: &[&str]) -> String {
    let Some(first) = names.first() else {
        return String::new();
    };
    let mut prefix = *first;
    for n in &names[1..] {
        while !n.starts_with(prefix) {
            prefix = parent(prefix);
        }
    }
    let mut prefix = match prefix.rfind('.') {
        Some(k) if names.len() > 1 => &prefix[..=k],
        _ => "",
    };
    // Keep the word a number belongs to: `layers.3.mlp`, not `3.mlp`.
    if names
        .iter()
        .any(|n| n[prefix.len()..].starts_with(|c: char| c.is_ascii_digit()))
    {
        prefix = parent(prefix);
    }
    prefix.to_string()
}

/// `a.b.c` → `a.b.`, `a.b.` → `a.`, `a` → ``: the prefix one dotted word up.
fn parent(prefix: &str) -> &str {
    match prefix[..prefix.len().saturating_sub(1)].rfind('.') {
        Some(k) => &prefix[..=k],
        None => "",
    }
}

/// One row per result. `names`: the central table, with the tensor column
/// (click selects the tensor); otherwise the detail panel's compact table.
fn results_table_ui(
    ui: &mut egui::Ui,
    id: &str,
    results: &[SpotResult],
    mut names: Option<(&Bundle, &mut Commands)>,
) {
    let with_ref = results.iter().any(|r| r.reference.is_some());
    let full = names.is_some();
    let prefix = if full {
        common_prefix(
            &results
                .iter()
                .map(|r| r.tensor.as_str())
                .collect::<Vec<_>>(),
        )
    } else {
        String::new()
    };
    if !prefix.is_empty() {
        ui.label(RichText::new(format!("tensors under {prefix}")).weak());
    }
    let row_h = 18.0;
    let mut headers: Vec<(&str, &str)> = Vec::new();
    if full {
        headers.push(("tensor", "Click a name to select the tensor"));
    }
    headers.push(("check", "matmul, embedding gather, or one NVFP4 expert"));
    if full {
        headers.push(("device", "Where MLX ran"));
    }
    headers.push((
        "rel err",
        "‖y_mlx − y_ref‖ / ‖y_ref‖ against the f64 decoder",
    ));
    if full {
        headers.push(("cosine", "cosine of y_mlx and y_ref"));
    }
    headers.push(("ms", "MLX wall time"));
    headers.push(("GFLOP/s", "MLX throughput (2·batch·rows·cols / time)"));
    if with_ref {
        headers.push((
            "out err",
            "‖x(Wq−W)ᵀ‖ / ‖xWᵀ‖ against the reference checkpoint",
        ));
        if full {
            headers.push(("w err", "‖Wq − W‖ / ‖W‖"));
        }
        headers.push(("SNR dB", "10·log10(‖W‖² / ‖Wq − W‖²)"));
    }
    headers.push((
        "result",
        "pass: MLX agrees with the decoder (and the source, where measured)",
    ));
    let mut select = None;
    ui.push_id(id, |ui| {
        let mut t = TableBuilder::new(ui)
            .striped(true)
            .resizable(true)
            .max_scroll_height(if full { f32::INFINITY } else { 260.0 })
            .cell_layout(egui::Layout::left_to_right(egui::Align::Center));
        for (k, _) in headers.iter().enumerate() {
            t = t.column(if k == 0 && full {
                Column::initial(310.0).at_least(80.0).clip(true)
            } else if k + 1 == headers.len() {
                Column::remainder().at_least(50.0)
            } else {
                Column::auto()
            });
        }
        t.header(row_h, |mut h| {
            for (name, hover) in &headers {
                h.col(|ui| {
                    ui.strong(*name).on_hover_text(*hover);
                });
            }
        })
        .body(|body| {
            body.rows(row_h, results.len(), |mut row| {
                let r = &results[row.index()];
                if full {
                    row.col(|ui| {
                        let short = r.tensor.strip_prefix(prefix.as_str()).unwrap_or(&r.tensor);
                        let l = ui
                            .add(
                                egui::Label::new(RichText::new(short).monospace())
                                    .truncate()
                                    .sense(egui::Sense::click()),
                            )
                            .on_hover_text(&r.tensor);
                        if l.clicked() {
                            select = Some(r.tensor.clone());
                        }
                    });
                }
                row.col(|ui| {
                    let hover = if r.kind == crate::spotcheck::Kind::Loader {
                        format!(
                            "{} · words, scales and biases of {} rows against MLX's own GGUF loader ({}) on {}",
                            r.precision, r.rows_checked, r.mlx_op, r.device
                        )
                    } else {
                        format!(
                            "{} · {} x · batch {} · rows {}/{} · MLX {} on {}",
                            r.precision,
                            r.dtype.as_str(),
                            r.batch,
                            r.rows_checked,
                            r.shape[0],
                            r.mlx_op,
                            r.device
                        )
                    };
                    ui.label(r.check_label()).on_hover_text(hover);
                });
                if full {
                    row.col(|ui| {
                        ui.label(&r.device);
                    });
                }
                row.col(|ui| {
                    ui.monospace(format!("{:.2e}", r.rel_err))
                        .on_hover_text(format!(
                            "bound {:.1e} · max abs {:.3e} · cosine {:.7}",
                            r.tolerance, r.max_abs_err, r.cosine
                        ));
                });
                if full {
                    row.col(|ui| {
                        ui.monospace(format!("{:.6}", r.cosine));
                    });
                }
                row.col(|ui| {
                    ui.monospace(format!("{:.2}", r.time_s * 1e3));
                });
                row.col(|ui| {
                    ui.monospace(r.gflops.map_or("-".into(), |g| format!("{g:.2}")))
                        .on_hover_text(format!(
                            "f64 reference: {}",
                            r.ref_gflops
                                .map_or("-".into(), |g| format!("{g:.2} GFLOP/s"))
                        ));
                });
                if with_ref {
                    let q = r.reference.as_ref();
                    row.col(|ui| {
                        ui.monospace(q.map_or("-".into(), |q| format!("{:.4}", q.output_rel_err)));
                    });
                    if full {
                        row.col(|ui| {
                            ui.monospace(
                                q.map_or("-".into(), |q| format!("{:.4}", q.weight_rel_err)),
                            );
                        });
                    }
                    row.col(|ui| {
                        ui.monospace(q.map_or("-".into(), |q| format!("{:.1}", q.snr_db)));
                    });
                }
                row.col(|ui| {
                    let l = ui.label(pass_text(ui, r.pass));
                    if let Some(f) = r.findings.first() {
                        l.on_hover_text(&f.message);
                    }
                });
            });
        });
    });
    if let (Some(name), Some((bundle, tx))) = (select, names.as_mut())
        && let Some(i) = bundle.find(&name)
    {
        tx.send(Command::Select(Some(i)));
    }
}

/// The central "Spot checks" tab: reference picker, "Spot-check all" and
/// the ranked table.
pub fn central_ui(
    ui: &mut egui::Ui,
    spot: &mut SpotView,
    bundle: Option<&Bundle>,
    tx: &mut Commands,
) {
    if !mlx::available() {
        not_built_ui(ui);
        return;
    }
    let running = spot.running();
    ui.horizontal(|ui| {
        if ui
            .add_enabled(!running, egui::Button::new("Spot-check all"))
            .on_hover_text(format!(
                "Every packed tensor (every expert), at most {DEFAULT_MAX_ROWS} rows each, on MLX's default device ({})",
                ui.ctx().format_shortcut(&run_all_shortcut())
            ))
            .clicked()
        {
            tx.send(Command::SpotCheck(None));
        }
        if running && ui.button("Cancel").clicked() {
            tx.send(Command::CancelSpotCheck);
        }
        ui.separator();
        ui.label("Reference checkpoint:");
        match &spot.reference {
            Some(r) => {
                ui.label(RichText::new(r.path().display().to_string()).monospace())
                    .on_hover_text("The unquantised safetensors the bundle was made from");
                if ui.add_enabled(!running, egui::Button::new("×")).on_hover_text("Forget the reference").clicked() {
                    tx.send(Command::ClearReference);
                }
            }
            None => {
                ui.label(RichText::new("none").weak());
            }
        }
        if ui
            .add_enabled(!running, egui::Button::new("Choose…"))
            .on_hover_text("A folder of safetensors (BF16/F16/F32) with the bundle's tensor names")
            .clicked()
        {
            tx.send(Command::PickReference);
        }
    });
    settings_ui(spot, ui);
    if let Some(e) = &spot.error {
        ui.label(RichText::new(e).color(ui.visuals().error_fg_color));
    }
    if let Some(p) = spot.progress() {
        ui.horizontal(|ui| {
            ui.spinner();
            ui.label(format!("checking {}/{} · {}", p.done, p.total, p.tensor));
        });
    }
    let Some(r) = &spot.all else {
        if !running {
            ui.label(
                RichText::new(
                    "Spot-check all runs MLX on every packed tensor and compares with bundlescope's own decoder; with a reference checkpoint it also ranks tensors by how far they are from their source.",
                )
                .weak(),
            );
        }
        return;
    };
    ui.horizontal(|ui| {
        ui.label(format!(
            "MLX {} on {}: {}",
            r.mlx_version,
            r.device,
            r.tally()
        ));
        ui.label(
            RichText::new(if r.reference_dir.is_some() {
                "· ranked worst first against the reference"
            } else {
                "· failures first, then closest to their bound"
            })
            .weak(),
        );
    });
    for s in &r.skipped {
        ui.label(
            RichText::new(format!("skipped {}: {}", s.tensor, s.reason))
                .color(ui.visuals().warn_fg_color),
        );
    }
    for n in &r.notes {
        ui.label(RichText::new(n).weak());
    }
    let results = r.results.clone();
    if let Some(b) = bundle {
        results_table_ui(ui, "spot-all", &results, Some((b, tx)));
    }
}

/// The stream panel's line while "Spot-check all" runs.
pub fn stream_line_ui(ui: &mut egui::Ui, spot: &SpotView, tx: &mut Commands) {
    let Some(p) = spot.progress() else { return };
    let mut cancel = false;
    ui.horizontal(|ui| {
        ui.label(RichText::new("Spot check").strong());
        let frac = if p.total > 0 {
            p.done as f32 / p.total as f32
        } else {
            0.0
        };
        ui.add(
            egui::ProgressBar::new(frac)
                .desired_width(220.0)
                .text(format!("{}/{}", p.done, p.total)),
        );
        ui.add(egui::Label::new(RichText::new(&p.tensor).monospace().weak()).truncate());
        cancel = ui.button("Cancel").clicked();
    });
    if cancel {
        tx.send(Command::CancelSpotCheck);
    }
}

#[cfg(test)]
mod tests {
    use super::common_prefix;

    #[test]
    fn the_shared_prefix_ends_at_a_dot_and_keeps_the_word_of_a_number() {
        let p = |names: &[&str]| common_prefix(names);
        assert_eq!(
            p(&[
                "m.decoder.layers.3.experts.up",
                "m.decoder.layers.0.experts.up"
            ]),
            "m.decoder."
        );
        assert_eq!(p(&["lm.model.embed", "lm.model.norm"]), "lm.model.");
        // Never part of a word: `proj` and `projection` share `lm.`, not `lm.proj`.
        assert_eq!(p(&["lm.proj.w", "lm.projection.w"]), "lm.");
        assert_eq!(p(&["only.one"]), "");
        assert_eq!(p(&["a.b", "c.d"]), "");
        assert_eq!(p(&["3.x", "4.x"]), "");
    }
}
