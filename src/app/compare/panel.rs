//! The Compare tab (header, progress, chips, table, the selected row) and
//! the Summary tab's Compare with… button and drop zone.

use egui::{Key, RichText};

use super::{CompareView, charts, shortcut, table};
use crate::app::{Command, Commands};

/// The central Compare tab: header (paths, counts, progress, Cancel,
/// Close), status chips, the table, and the selected row's detail.
pub(in crate::app) fn compare_ui(ui: &mut egui::Ui, view: &mut CompareView, tx: &mut Commands) {
    if let Some(b) = &view.queued {
        ui.horizontal(|ui| {
            ui.spinner();
            ui.label(format!(
                "Opening bundle A, then comparing with {}",
                b.display()
            ));
        });
        return;
    }
    if let Some(b) = view.pending.clone() {
        ui.horizontal(|ui| {
            ui.spinner();
            ui.label(format!("Comparing with {}", b.display()));
            if ui.button("Cancel").clicked() {
                tx.send(Command::CancelCompare);
            }
        });
        if let Some(j) = &view.job {
            let (done, total) = j.progress().get();
            let label = j.progress().label();
            let frac = if total > 0 {
                done as f32 / total as f32
            } else {
                0.0
            };
            ui.add(egui::ProgressBar::new(frac).show_percentage().text(format!(
                "{label} · {} of {}",
                crate::report::human_bytes(done),
                crate::report::human_bytes(total)
            )));
        }
        return;
    }
    if let Some(e) = &view.error {
        ui.label(RichText::new(e).color(ui.visuals().error_fg_color));
        if ui.button("Close").clicked() {
            tx.send(Command::CloseCompare);
        }
        return;
    }
    let Some(r) = &view.result else {
        ui.label("Compare the open bundle with another: Compare with… (Ctrl/Cmd+Shift+O), or drop a folder while holding Alt/Option or Shift.");
        return;
    };
    ui.horizontal(|ui| {
        ui.label(RichText::new("A").strong());
        ui.label(RichText::new(&r.report.a.path).monospace());
        ui.label(RichText::new(format!("({})", r.report.a.format)).weak());
    });
    ui.horizontal(|ui| {
        ui.label(RichText::new("B").strong());
        ui.label(RichText::new(&r.report.b.path).monospace());
        ui.label(RichText::new(format!("({})", r.report.b.format)).weak());
        ui.with_layout(egui::Layout::right_to_left(egui::Align::Center), |ui| {
            if ui
                .button("Close comparison")
                .on_hover_text("Forget bundle B")
                .clicked()
            {
                tx.send(Command::CloseCompare);
            }
            if ui
                .button("Save diff report…")
                .on_hover_text("The comparison as JSON or Markdown (by the extension)")
                .clicked()
            {
                tx.send(Command::SaveDiffReportDialog);
            }
        });
    });
    let s = &r.report.summary;
    ui.label(format!(
        "{} identical · {} changed · {} only in A · {} only in B · {:.2} s",
        s.identical,
        s.changed,
        s.only_a,
        s.only_b,
        r.duration.as_secs_f64()
    ));
    table::filter_ui(ui, view);
    view.refresh();
    arrows(ui, view, tx);
    let avail = ui.available_height();
    let table_h = if view.selected.is_some() {
        (avail * 0.4).max(120.0)
    } else {
        avail
    };
    ui.allocate_ui(egui::vec2(ui.available_width(), table_h), |ui| {
        table::table_ui(ui, view, tx);
    });
    if let Some(k) = view.selected {
        ui.separator();
        egui::ScrollArea::vertical()
            .id_salt("compare-detail")
            .auto_shrink([false, false])
            .show(ui, |ui| charts::detail_ui(ui, view, k));
    }
}

/// ↑/↓ move the diff table's selection (the tensor table's keys, here).
fn arrows(ui: &egui::Ui, view: &mut CompareView, tx: &mut Commands) {
    if view.rows.is_empty() || ui.ctx().memory(|m| m.focused().is_some()) {
        return;
    }
    let (down, up) = ui
        .ctx()
        .input(|i| (i.key_pressed(Key::ArrowDown), i.key_pressed(Key::ArrowUp)));
    if !(down || up) {
        return;
    }
    let pos = view
        .selected
        .and_then(|s| view.rows.iter().position(|&r| r == s));
    let next = match (pos, down) {
        (None, _) => 0,
        (Some(p), true) => (p + 1).min(view.rows.len() - 1),
        (Some(p), false) => p.saturating_sub(1),
    };
    view.scroll_to_selected = true;
    tx.send(Command::SelectDiffRow(view.rows.get(next).copied()));
}

/// The Summary tab's part: Compare with… and the drop zone.
pub(in crate::app) fn summary_ui(ui: &mut egui::Ui, view: &mut CompareView, tx: &mut Commands) {
    ui.add_space(8.0);
    ui.label(RichText::new("Compare").strong());
    if ui
        .button("Compare with…")
        .on_hover_text(format!(
            "Compare this bundle with another, tensor by tensor ({})",
            ui.ctx().format_shortcut(&shortcut())
        ))
        .clicked()
    {
        tx.send(Command::PickCompare);
    }
    let hovering = ui.ctx().input(|i| !i.raw.hovered_files.is_empty());
    let frame = egui::Frame::new()
        .stroke(egui::Stroke::new(
            1.0,
            if hovering {
                ui.visuals().selection.stroke.color
            } else {
                ui.visuals().weak_text_color()
            },
        ))
        .corner_radius(6.0)
        .inner_margin(egui::Margin::same(12));
    let r = frame.show(ui, |ui| {
        ui.set_width(ui.available_width());
        ui.label(RichText::new("Drop a second bundle here to compare").weak());
    });
    view.drop_zone = Some(r.response.rect);
    if let Some(c) = view.compared() {
        ui.label(
            RichText::new(format!("compared with {}", c.path.display()))
                .small()
                .weak(),
        );
    }
}
