//! The welcome screen: open, demo, recent bundles.

use egui::RichText;

use super::{App, Command};

/// Draws the welcome screen.
pub fn welcome_ui(app: &mut App, ui: &mut egui::Ui) {
    ui.vertical_centered(|ui| {
        ui.add_space(ui.available_height() * 0.15);
        ui.heading(RichText::new("bundlescope").size(32.0).strong());
        ui.label(
            "Inspect and audit quantized weight bundles: every rule checked, every byte hashed.",
        );
        ui.add_space(24.0);
        let open = ui.add_sized(
            [240.0, 36.0],
            egui::Button::new(RichText::new("Open bundle…").size(16.0)),
        );
        if open
            .on_hover_text("Choose a bundle folder (Ctrl/Cmd+O)")
            .clicked()
        {
            app.commands.push(Command::OpenDialog);
        }
        ui.add_space(8.0);
        let demo = ui.add_sized(
            [240.0, 36.0],
            egui::Button::new(RichText::new("Open demo bundle").size(16.0)),
        );
        if demo
            .on_hover_text("A small valid audio8 v2 bundle written by the sample writer")
            .clicked()
        {
            app.commands.push(Command::OpenDemo);
        }
        ui.add_space(12.0);
        ui.label(
            RichText::new(
                "…or drop a bundle folder (or its manifest.json) anywhere on this window.",
            )
            .weak(),
        );
        if !app.recent.is_empty() {
            ui.add_space(28.0);
            ui.label(RichText::new("Recent").strong());
            let mut open = None;
            for p in &app.recent {
                let text = p.display().to_string();
                let exists = p.exists();
                let r = ui.add_enabled(
                    exists,
                    egui::Button::new(RichText::new(&text).monospace()).frame(false),
                );
                let r = if exists {
                    r
                } else {
                    r.on_disabled_hover_text("no longer exists")
                };
                if r.clicked() {
                    open = Some(p.clone());
                }
            }
            if let Some(p) = open {
                app.commands.push(Command::Open(p));
            }
        }
    });
}
