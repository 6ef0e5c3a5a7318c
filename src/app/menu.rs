//! The menu bar (File, View, Help), the About window and the `?` overlay.
//! Items carry their shortcut's text from the one table in
//! [`super::shortcuts`], and send the same commands the keys do.

use egui::{Button, RichText, ThemePreference};

use super::jobs::{Job, Poll};
use super::shortcuts::{self, Action};
use super::{App, CentralTab, Command, SideTab};

/// What floats over the window, if anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overlay {
    /// The list of keyboard shortcuts.
    Shortcuts,
    /// Version and MLX version.
    About,
}

/// The View menu's tabs: label, tab, shortcut.
const CENTRAL_TABS: [(&str, CentralTab, Action); 4] = [
    ("Tensors", CentralTab::Tensors, Action::TabTensors),
    ("Quality", CentralTab::Quality, Action::TabQuality),
    ("Spot checks", CentralTab::SpotChecks, Action::TabSpotChecks),
    ("Lineage", CentralTab::Lineage, Action::TabLineage),
];

/// MLX's version, asked for on a job the first time About opens (the
/// bridge takes a lock a running spot check may hold).
#[derive(Default)]
pub(super) struct MlxVersion {
    job: Option<Job<Result<String, String>>>,
    answer: Option<Result<String, String>>,
}

impl MlxVersion {
    fn fetch(&mut self, wake: Option<egui::Context>) {
        if self.job.is_some() || self.answer.is_some() {
            return;
        }
        self.job = Job::once_on_mlx("mlx-version", wake, |_| {
            crate::mlx::version().map_err(|e| e.to_string())
        })
        .ok();
    }

    pub(super) fn poll(&mut self) {
        let Some(job) = &self.job else { return };
        match job.poll() {
            Poll::Msg(a) => {
                self.answer = Some(a);
                self.job = None;
            }
            Poll::Ended => self.job = None,
            Poll::Empty => {}
        }
    }

    fn text(&self) -> String {
        match &self.answer {
            Some(Ok(v)) => format!("MLX {v}"),
            Some(Err(_)) if !crate::mlx::available() => {
                "MLX: not built in (spot checks need it; see ./scripts/install-mlx.sh)".into()
            }
            Some(Err(e)) => format!("MLX: {e}"),
            None => "MLX: …".into(),
        }
    }
}

/// The text About shows for the app's version.
pub fn version_text() -> String {
    format!("bundlescope {}", env!("CARGO_PKG_VERSION"))
}

fn item(ui: &mut egui::Ui, label: &str, action: Option<Action>, enabled: bool) -> bool {
    let mut b = Button::new(label);
    if let Some(a) = action {
        b = b.shortcut_text(shortcuts::text(ui.ctx(), a));
    }
    ui.add_enabled(enabled, b).clicked()
}

impl App {
    /// Has the open bundle been audited (so it has a report to save and an
    /// audit to run again)?
    pub fn audited(&self) -> bool {
        self.session
            .as_ref()
            .is_some_and(|s| matches!(s.model.outcome, Some(Ok(_))))
    }

    /// What floats over the window.
    pub fn overlay(&self) -> Option<Overlay> {
        self.overlay
    }

    pub(super) fn show_overlay(&mut self, o: Overlay) {
        if o == Overlay::About {
            self.mlx_version.fetch(self.ctx.clone());
        }
        self.overlay = Some(o);
    }

    /// Draws the menu bar.
    pub(super) fn menu_bar_ui(&mut self, ui: &mut egui::Ui) {
        let audited = self.audited();
        let open = self.session.is_some();
        let indexed = self
            .session
            .as_ref()
            .is_some_and(|s| s.model.bundle.is_some());
        let comparing = self.compare.active();
        let tx = &mut self.commands;
        let recent = &self.recent;
        let (central, side) = (self.central, self.side);
        let theme = self.theme;
        egui::MenuBar::new().ui(ui, |ui| {
            ui.menu_button("File", |ui| {
                if item(ui, "Open…", Some(Action::Open), true) {
                    tx.send(Command::OpenDialog);
                }
                ui.menu_button("Open Recent", |ui| {
                    if recent.paths().is_empty() {
                        ui.add_enabled(false, Button::new("No recent bundles"));
                    }
                    for p in recent.paths() {
                        let exists = recent.exists(p);
                        let r = ui.add_enabled(exists, Button::new(p.display().to_string()));
                        if r.on_disabled_hover_text("no longer exists").clicked() {
                            tx.send(Command::Open(p.clone()));
                        }
                    }
                });
                if item(ui, "Compare with…", Some(Action::Compare), indexed) {
                    tx.send(Command::PickCompare);
                }
                ui.separator();
                if item(ui, "Save Report…", Some(Action::SaveReport), audited) {
                    tx.send(Command::SaveReportDialog);
                }
                ui.separator();
                if item(ui, "Close", Some(Action::Close), open) {
                    tx.send(Command::Close);
                }
            });
            ui.menu_button("View", |ui| {
                for (label, tab, action) in CENTRAL_TABS {
                    let b = Button::selectable(central == tab, label)
                        .shortcut_text(shortcuts::text(ui.ctx(), action));
                    if ui.add(b).clicked() {
                        tx.send(Command::ShowTab(tab));
                    }
                }
                if comparing {
                    let b = Button::selectable(central == CentralTab::Compare, "Compare");
                    if ui.add(b).clicked() {
                        tx.send(Command::ShowTab(CentralTab::Compare));
                    }
                }
                ui.separator();
                for (label, tab) in [
                    ("Tensor details", SideTab::Tensor),
                    ("Summary", SideTab::Summary),
                ] {
                    if ui.add(Button::selectable(side == tab, label)).clicked() {
                        tx.send(Command::ShowSide(tab));
                    }
                }
                ui.separator();
                ui.menu_button("Theme", |ui| {
                    for (label, pref) in [
                        ("Follow the system", ThemePreference::System),
                        ("Light", ThemePreference::Light),
                        ("Dark", ThemePreference::Dark),
                    ] {
                        if ui.add(Button::selectable(theme == pref, label)).clicked() {
                            tx.send(Command::SetTheme(pref));
                        }
                    }
                });
            });
            ui.menu_button("Help", |ui| {
                if item(ui, "Keyboard shortcuts", Some(Action::Help), true) {
                    tx.send(Command::ShowOverlay(Overlay::Shortcuts));
                }
                if item(ui, "About bundlescope", None, true) {
                    tx.send(Command::ShowOverlay(Overlay::About));
                }
            });
        });
    }

    /// Draws the overlay, if one is shown.
    pub(super) fn overlay_ui(&mut self, ctx: &egui::Context) {
        let close = match self.overlay {
            None => return,
            Some(Overlay::Shortcuts) => shortcuts::overlay_ui(ctx),
            Some(Overlay::About) => self.about_ui(ctx),
        };
        if close {
            self.overlay = None;
        }
    }

    fn about_ui(&mut self, ctx: &egui::Context) -> bool {
        let mlx = self.mlx_version.text();
        let modal = egui::Modal::new(egui::Id::unique("about")).show(ctx, |ui| {
            ui.set_min_width(360.0);
            ui.vertical_centered(|ui| {
                ui.heading(RichText::new(version_text()).strong());
                ui.label(env!("CARGO_PKG_DESCRIPTION"));
                ui.add_space(6.0);
                ui.label(mlx);
                ui.add_space(8.0);
                ui.button("Close").clicked()
            })
            .inner
        });
        modal.inner || modal.should_close()
    }
}
