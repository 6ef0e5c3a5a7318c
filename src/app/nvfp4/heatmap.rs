//! The layer × expert map of one statistic, drawn as a texture built once
//! per statistic and bundle; it rings the most extreme cell.

use egui::{Color32, Pos2, Rect, RichText, Sense, Stroke, Vec2};

use super::{ExpertSet, Heat, HeatStat, Nvfp4View, PICKED, finite_range, most_extreme};
use crate::app::{Command, Commands, Session};
use crate::format::{Bundle, nvfp4};

/// An approximation of viridis through five stops, `t` in 0..=1.
fn colour(t: f64) -> Color32 {
    const STOPS: [[f32; 3]; 5] = [
        [68.0, 1.0, 84.0],
        [59.0, 82.0, 139.0],
        [33.0, 145.0, 140.0],
        [94.0, 201.0, 98.0],
        [253.0, 231.0, 37.0],
    ];
    let x = (t.clamp(0.0, 1.0) * 4.0) as f32;
    let k = (x.floor() as usize).min(3);
    let f = x - k as f32;
    let c: Vec<u8> = (0..3)
        .map(|j| (STOPS[k][j] + (STOPS[k + 1][j] - STOPS[k][j]) * f).round() as u8)
        .collect();
    Color32::from_rgb(c[0], c[1], c[2])
}

const MISSING: Color32 = Color32::from_gray(90);
const INVALID: Color32 = Color32::from_rgb(0xe0, 0x1e, 0x5a);

fn heat_value(s: &Session, set: &ExpertSet, stat: HeatStat, e: usize) -> Option<f64> {
    let stats = |j: Option<usize>| {
        j.and_then(|j| s.model.stats.get(j))
            .and_then(Option::as_deref)
    };
    let x = || {
        stats(set.scales)
            .and_then(|t| t.e4m3.as_ref())
            .and_then(|x| x.experts.get(e))
    };
    match stat {
        HeatStat::Global => stats(set.global)
            .and_then(|t| t.global_scales.as_ref())
            .and_then(|g| g.get(e).copied()),
        HeatStat::MeanScale => x().map(|x| x.mean),
        HeatStat::MaxScale => x().map(|x| x.max),
        HeatStat::ZeroShare => x().map(|x| x.zero_share),
    }
}

/// Rebuilds the map's values and texture when the statistic or the audit's
/// progress changed.
fn build_heat(ctx: &egui::Context, view: &mut Nvfp4View, s: &Session) {
    let rows: Vec<usize> = (0..view.sets.len())
        .filter(|&r| view.sets[r].experts > 0)
        .collect();
    let filled = rows
        .iter()
        .flat_map(|&r| [view.sets[r].scales, view.sets[r].global])
        .filter(|j| j.is_some_and(|j| s.model.stats.get(j).is_some_and(Option::is_some)))
        .count();
    let key = (view.heat_stat, filled);
    if view.heat.as_ref().is_some_and(|h| h.key == key) {
        return;
    }
    let stat = view.heat_stat;
    let cols = rows
        .iter()
        .map(|&r| view.sets[r].experts)
        .max()
        .unwrap_or(0);
    let mut values = vec![None; rows.len() * cols];
    for (k, &r) in rows.iter().enumerate() {
        let set = &view.sets[r];
        for e in 0..set.experts {
            values[k * cols + e] = heat_value(s, set, stat, e);
        }
    }
    let log = stat.log();
    let valid = |x: f64| x.is_finite() && (!log || x > 0.0);
    let t = |x: f64| if log { x.log10() } else { x };
    let range = finite_range(
        values
            .iter()
            .flatten()
            .copied()
            .filter(|&x| valid(x))
            .map(t),
    );
    let pixels: Vec<Color32> = values
        .iter()
        .map(|&v| match v {
            None => MISSING,
            Some(v) if !valid(v) => INVALID,
            Some(v) if range.1 > range.0 => colour((t(v) - range.0) / (range.1 - range.0)),
            Some(_) => colour(0.5),
        })
        .collect();
    let extreme = most_extreme(&values, log).map(|i| (i / cols.max(1), i % cols.max(1)));
    let texture = (cols > 0 && !rows.is_empty()).then(|| {
        let image = egui::ColorImage::new([cols, rows.len()], pixels);
        match view.heat.take().and_then(|h| h.texture) {
            Some(mut tex) => {
                tex.set(image, egui::TextureOptions::NEAREST);
                tex
            }
            None => ctx.load_texture("nvfp4-heat", image, egui::TextureOptions::NEAREST),
        }
    });
    view.heat = Some(Heat {
        key,
        rows,
        cols,
        values,
        range,
        extreme,
        texture,
    });
}

/// Draws the layer × expert map; a click on a cell selects that set's
/// tensor and expert.
pub(super) fn heat_ui(
    ui: &mut egui::Ui,
    view: &mut Nvfp4View,
    s: &Session,
    b: &Bundle,
    i: usize,
    commands: &mut Commands,
) {
    ui.horizontal(|ui| {
        ui.label("Colour by");
        egui::ComboBox::from_id_salt("nv-heat-stat")
            .selected_text(view.heat_stat.label())
            .show_ui(ui, |ui| {
                for stat in HeatStat::ALL {
                    ui.selectable_value(&mut view.heat_stat, stat, stat.label());
                }
            });
    });
    build_heat(ui.ctx(), view, s);
    let Some(heat) = &view.heat else { return };
    let Some(tex) = &heat.texture else {
        ui.label(RichText::new("no expert set has a valid layout").weak());
        return;
    };
    let (nrows, cols) = (heat.rows.len(), heat.cols);
    let label_w = 56.0;
    let cell = Vec2::new(
        ((ui.available_width() - label_w) / cols as f32).max(1.0),
        (320.0 / nrows as f32).clamp(3.0, 14.0),
    );
    let size = Vec2::new(label_w + cell.x * cols as f32, cell.y * nrows as f32);
    let (rect, resp) = ui.allocate_exact_size(size, Sense::click());
    resp.widget_info(|| egui::WidgetInfo::labeled(egui::Role::Image, true, "layer × expert map"));
    let img = Rect::from_min_size(
        rect.min + Vec2::new(label_w, 0.0),
        Vec2::new(cell.x * cols as f32, size.y),
    );
    view.heat_geom = Some((img, cell));
    let painter = ui.painter_at(rect);
    let uv = Rect::from_min_max(Pos2::ZERO, Pos2::new(1.0, 1.0));
    painter.image(tex.id(), img, uv, Color32::WHITE);
    let text = ui.visuals().text_color();
    let font = egui::FontId::monospace(9.0);
    let every = (11.0 / cell.y).ceil().max(1.0) as usize;
    let current = heat.rows.iter().position(|&r| view.sets[r].holds(i));
    for (k, &r) in heat.rows.iter().enumerate() {
        // Every `every`-th row is labelled; the current one always, in colour.
        let is_current = Some(k) == current;
        let near_current = current.is_some_and(|c| c.abs_diff(k) < every);
        if !is_current && (k % every != 0 || near_current) {
            continue;
        }
        let set = &view.sets[r];
        let label = if is_current || every == 1 {
            set.short()
        } else {
            format!("L{}", set.layer)
        };
        painter.text(
            Pos2::new(
                rect.left(),
                (img.top() + (k as f32 + 0.5) * cell.y)
                    .clamp(rect.top() + 5.0, rect.bottom() - 5.0),
            ),
            egui::Align2::LEFT_CENTER,
            label,
            font.clone(),
            if is_current { PICKED } else { text },
        );
    }
    let cell_rect = |k: usize, e: usize| {
        Rect::from_min_size(
            img.min + Vec2::new(e as f32 * cell.x, k as f32 * cell.y),
            cell,
        )
    };
    if let Some(k) = current {
        let row = Rect::from_min_size(
            img.min + Vec2::new(0.0, k as f32 * cell.y),
            Vec2::new(img.width(), cell.y),
        );
        painter.rect_stroke(row, 0.0, Stroke::new(1.0, text), egui::StrokeKind::Outside);
        if let Some(e) = view.expert.filter(|&e| e < cols) {
            painter.rect_stroke(
                cell_rect(k, e),
                0.0,
                Stroke::new(2.0, PICKED),
                egui::StrokeKind::Outside,
            );
        }
    }
    if let Some((k, e)) = heat.extreme {
        // Small cells get a ring around them (not over them): one of 128 is a few pixels.
        let c = cell_rect(k, e);
        let stroke = Stroke::new(2.0, INVALID);
        if c.size().min_elem() >= 8.0 {
            painter.rect_stroke(c, 0.0, stroke, egui::StrokeKind::Inside);
        } else {
            let r = c.size().max_elem() / 2.0 + 5.0;
            ui.painter_at(rect.expand(10.0))
                .circle_stroke(c.center(), r, stroke);
        }
    }
    let at = |p: Pos2| {
        let d = p - img.min;
        (d.x >= 0.0 && d.y >= 0.0)
            .then(|| ((d.y / cell.y) as usize, (d.x / cell.x) as usize))
            .filter(|&(k, e)| k < nrows && e < cols)
    };
    let describe = |k: usize, e: usize| {
        let set = &view.sets[heat.rows[k]];
        let value = match heat.values[k * cols + e] {
            _ if e >= set.experts => "no such expert".to_string(),
            None => "no data yet".to_string(),
            Some(v) => format!("{v:.6e}"),
        };
        format!(
            "layer {} · {} · expert {e}\n{} = {value}",
            set.layer,
            set.proj,
            view.heat_stat.label()
        )
    };
    let hovered = resp.hover_pos().and_then(at);
    let clicked = resp
        .clicked()
        .then(|| resp.interact_pointer_pos())
        .flatten()
        .and_then(at);
    if let Some((k, e)) = hovered {
        resp.on_hover_text_at_pointer(describe(k, e));
    }
    legend_ui(ui, heat, view.heat_stat);
    if let Some((k, e)) = heat.extreme {
        ui.label(
            RichText::new(format!(
                "most extreme: {}",
                describe(k, e).replace('\n', " · ")
            ))
            .small(),
        );
    }
    if let Some((k, e)) = clicked {
        let set = &view.sets[heat.rows[k]];
        if e < set.experts {
            // Keep showing the same part (weight, scales, global) of the other set.
            let part = b
                .tensors
                .get(i)
                .and_then(|t| nvfp4::is_expert(&t.name))
                .map(|p| p.2);
            let target = match part {
                Some("scales") => set.scales,
                Some("global_scale") => set.global,
                _ => None,
            }
            .unwrap_or(set.weight);
            view.expert = Some(e);
            commands.send(Command::Select(Some(target)));
        }
    }
}

fn legend_ui(ui: &mut egui::Ui, heat: &Heat, stat: HeatStat) {
    let (lo, hi) = heat.range;
    let shown = |x: f64| {
        if stat.log() {
            format!("{:.3e}", 10f64.powf(x))
        } else {
            format!("{:.2}%", x * 100.0)
        }
    };
    ui.horizontal(|ui| {
        ui.label(
            RichText::new(if lo.is_finite() {
                shown(lo)
            } else {
                "—".into()
            })
            .small(),
        );
        let (r, _) = ui.allocate_exact_size(Vec2::new(120.0, 10.0), Sense::hover());
        let steps = 24;
        for k in 0..steps {
            let x0 = r.left() + r.width() * k as f32 / steps as f32;
            let seg = Rect::from_min_max(
                Pos2::new(x0, r.top()),
                Pos2::new(x0 + r.width() / steps as f32 + 0.5, r.bottom()),
            );
            ui.painter()
                .rect_filled(seg, 0.0, colour(f64::from(k) / f64::from(steps - 1)));
        }
        ui.label(
            RichText::new(if hi.is_finite() {
                shown(hi)
            } else {
                "—".into()
            })
            .small(),
        );
        if stat.log() {
            ui.label(RichText::new("(log)").small().weak());
        }
        let swatch = |ui: &mut egui::Ui, c: Color32, text: &str| {
            let (r, _) = ui.allocate_exact_size(Vec2::splat(10.0), Sense::hover());
            ui.painter().rect_filled(r, 0.0, c);
            ui.label(RichText::new(text).small());
        };
        swatch(ui, INVALID, "invalid");
        swatch(ui, MISSING, "no data");
    });
}
