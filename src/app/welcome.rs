//! The welcome screen: open, demo, recent bundles. Which recent bundles
//! still exist is learnt by a job, never by the frame.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use egui::RichText;

use super::jobs::{Job, Poll};
use super::{Command, Commands, MAX_RECENT};

/// What the app reads, as the welcome screen names it. A new format adds
/// its line here when the app can open it.
pub const READS: &[&str] = &[
    "audio8 mixed-precision bundles (v1 and v2)",
    "mlx-nvfp4 MoE artifacts",
    "calibrated GPTQ-Q4 overlays (bundlescope's documented reading)",
    "GGUF files (llama.cpp, Ollama, LM Studio)",
    "MLX-LM quantized checkpoints (mlx_lm.convert -q)",
    "safetensors checkpoints (a folder of shards or one .safetensors file)",
];

/// The recent-bundles list and what a job last found of each entry.
#[derive(Default)]
pub(super) struct Recent {
    paths: Vec<PathBuf>,
    missing: HashSet<PathBuf>,
    job: Option<Job<(Vec<PathBuf>, HashSet<PathBuf>)>>,
}

impl Recent {
    /// The stored list; a job checks which entries still exist.
    pub(super) fn from_paths(paths: Vec<PathBuf>, wake: Option<egui::Context>) -> Self {
        let mut r = Self {
            paths,
            ..Self::default()
        };
        r.check(wake);
        r
    }

    /// Newest first.
    pub(super) fn paths(&self) -> &[PathBuf] {
        &self.paths
    }

    /// Did the last check find `path` on disk (true until checked)?
    pub(super) fn exists(&self, path: &Path) -> bool {
        !self.missing.contains(path)
    }

    /// Puts `path` first at once; a job then resolves it (so the same folder
    /// reached through a symlink or its manifest is listed once) and
    /// rechecks which entries exist.
    pub(super) fn remember(&mut self, path: &Path, wake: Option<egui::Context>) {
        self.paths.retain(|p| p != path);
        self.paths.insert(0, path.to_path_buf());
        self.paths.truncate(MAX_RECENT);
        self.missing.remove(path);
        self.check(wake);
    }

    fn check(&mut self, wake: Option<egui::Context>) {
        if let Some(old) = self.job.take() {
            old.cancel();
        }
        let paths = self.paths.clone();
        self.job = Job::once("recent", wake, move |_| {
            let mut out: Vec<PathBuf> = Vec::new();
            for p in paths {
                let p = std::fs::canonicalize(&p).unwrap_or(p);
                if !out.contains(&p) {
                    out.push(p);
                }
            }
            let missing = out.iter().filter(|p| !p.exists()).cloned().collect();
            (out, missing)
        })
        .ok();
    }

    /// Takes the job's answer when it has come.
    pub(super) fn poll(&mut self) {
        let Some(job) = &self.job else { return };
        match job.poll() {
            Poll::Msg((paths, missing)) => {
                self.paths = paths;
                self.missing = missing;
                self.job = None;
            }
            Poll::Ended => self.job = None,
            Poll::Empty => {}
        }
    }
}

/// Draws the welcome screen. `busy`: what is on its way (opening a bundle,
/// writing the demo), shown with a spinner.
pub(super) fn welcome_ui(
    ui: &mut egui::Ui,
    recent: &Recent,
    busy: Option<&str>,
    tx: &mut Commands,
) {
    ui.vertical_centered(|ui| {
        ui.add_space(ui.available_height() * 0.15);
        ui.heading(RichText::new("bundlescope").size(32.0).strong());
        ui.label(
            "Inspect and audit quantized weight bundles: every rule checked, every byte hashed.",
        );
        ui.add_space(6.0);
        ui.label(RichText::new(format!("Reads {}.", READS.join("; "))).weak());
        ui.add_space(18.0);
        let open = ui.add_sized(
            [240.0, 36.0],
            egui::Button::new(RichText::new("Open bundle…").size(16.0)),
        );
        if open
            .on_hover_text(format!(
                "Choose a bundle folder ({})",
                super::shortcuts::text(ui.ctx(), super::shortcuts::Action::Open)
            ))
            .clicked()
        {
            tx.send(Command::OpenDialog);
        }
        ui.add_space(8.0);
        let demo = ui.add_enabled(
            busy.is_none(),
            egui::Button::new(RichText::new("Open demo bundle").size(16.0))
                .min_size(egui::vec2(240.0, 36.0)),
        );
        if demo
            .on_hover_text("A small valid audio8 v2 bundle written by the sample writer")
            .clicked()
        {
            tx.send(Command::OpenDemo);
        }
        ui.add_space(4.0);
        let overlay = ui.add_enabled(
            busy.is_none(),
            egui::Button::new(RichText::new("Open demo GPTQ-Q4 overlay").size(16.0))
                .min_size(egui::vec2(240.0, 36.0)),
        );
        if overlay
            .on_hover_text(
                "A calibrated GPTQ-Q4 overlay of the demo bundle, written beside it: see the Lineage tab",
            )
            .clicked()
        {
            tx.send(Command::OpenDemoOverlay);
        }
        if let Some(label) = busy {
            ui.horizontal(|ui| {
                ui.spinner();
                ui.label(label);
            });
        }
        ui.add_space(12.0);
        ui.label(
            RichText::new(
                "…or drop a bundle folder (or its manifest.json), or a .gguf file, anywhere on this window. Press ? for the keyboard shortcuts.",
            )
            .weak(),
        );
        if !recent.paths.is_empty() {
            ui.add_space(28.0);
            ui.label(RichText::new("Recent").strong());
            for p in &recent.paths {
                let exists = !recent.missing.contains(p);
                let r = ui.add_enabled(
                    exists,
                    egui::Button::new(RichText::new(p.display().to_string()).monospace())
                        .frame(false),
                );
                let r = if exists {
                    r
                } else {
                    r.on_disabled_hover_text("no longer exists")
                };
                if r.clicked() {
                    tx.send(Command::Open(p.clone()));
                }
            }
        }
    });
}
