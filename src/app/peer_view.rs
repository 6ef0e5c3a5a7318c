//! The Quality view's peer pictures: the selected tensor's scale histogram
//! over the median histogram of its peers (so a deviation is seen, not only
//! read as a number), and the layers × role heat map of the score or of one
//! statistic's z-score, for every format whose names carry a layer index.

use std::collections::BTreeMap;

use egui::{Color32, RichText, Sense, Stroke};
use egui_plot::{Bar, BarChart, Line, Plot, PlotPoints};

use super::{Command, Commands, Session};
use crate::decode::peers::{Feature, PeerVerdict, role_of};
use crate::format::Bundle;

const MINE: Color32 = Color32::from_rgb(0x3b, 0x82, 0xc4);
const PEERS: Color32 = Color32::from_rgb(0xe0, 0x8a, 0x1e);

/// Half-octave bin index → share of the scales, for tensor `i`.
fn shares(s: &Session, i: usize) -> BTreeMap<i32, f64> {
    let mut out = BTreeMap::new();
    let Some(sc) = s
        .model
        .stats
        .get(i)
        .and_then(Option::as_ref)
        .and_then(|st| st.scales.as_ref())
    else {
        return out;
    };
    let total: u64 = sc.bins.iter().map(|b| b.count).sum();
    if total == 0 {
        return out;
    }
    for b in &sc.bins {
        if b.lo > 0.0 {
            let k = (b.lo.log2() * 2.0).round() as i32;
            *out.entry(k).or_insert(0.0) += b.count as f64 / total as f64;
        }
    }
    out
}

/// The median over `peers` of each bin's share (a bin a peer lacks counts
/// as 0 for it).
pub fn median_histogram(peers: &[BTreeMap<i32, f64>]) -> BTreeMap<i32, f64> {
    let keys: std::collections::BTreeSet<i32> =
        peers.iter().flat_map(|p| p.keys().copied()).collect();
    keys.into_iter()
        .map(|k| {
            let mut v: Vec<f64> = peers
                .iter()
                .map(|p| p.get(&k).copied().unwrap_or(0.0))
                .collect();
            v.sort_by(f64::total_cmp);
            let n = v.len();
            let m = if n % 2 == 1 {
                v[n / 2]
            } else {
                (v[n / 2 - 1] + v[n / 2]) / 2.0
            };
            (k, m)
        })
        .collect()
}

/// The selected tensor against its peers: group, score, reason, and its
/// scales (bars) over its peers' median histogram (line).
pub(super) fn against_peers_ui(
    ui: &mut egui::Ui,
    s: &Session,
    b: &Bundle,
    i: usize,
    verdicts: &[Option<PeerVerdict>],
) {
    let Some(Some(v)) = verdicts.get(i) else {
        return;
    };
    let peers: Vec<usize> = verdicts
        .iter()
        .enumerate()
        .filter(|(j, w)| *j != i && w.as_ref().is_some_and(|w| w.peer_group == v.peer_group))
        .map(|(j, _)| j)
        .collect();
    egui::Frame::group(ui.style()).show(ui, |ui| {
        ui.horizontal_wrapped(|ui| {
            ui.label(RichText::new(&b.tensors[i].name).monospace().strong());
            ui.label(format!("score {:.2}", v.score));
        });
        ui.label(format!("peer group {} · {} peers", v.peer_group, v.peers));
        if !v.reason.is_empty() {
            ui.label(RichText::new(&v.reason).color(ui.visuals().warn_fg_color));
        }
        let mine = shares(s, i);
        if mine.is_empty() {
            return;
        }
        let others: Vec<BTreeMap<i32, f64>> = peers.iter().map(|&j| shares(s, j)).collect();
        let median = median_histogram(&others);
        let bars: Vec<Bar> = mine
            .iter()
            .map(|(&k, &p)| {
                Bar::new((f64::from(k) + 0.5) / 2.0, p * 100.0)
                    .width(0.45)
                    .name(format!(
                        "2^{:.1} – 2^{:.1}",
                        f64::from(k) / 2.0,
                        f64::from(k + 1) / 2.0
                    ))
                    .fill(MINE)
            })
            .collect();
        let line: PlotPoints = median
            .iter()
            .map(|(&k, &p)| [(f64::from(k) + 0.5) / 2.0, p * 100.0])
            .collect();
        ui.horizontal(|ui| {
            ui.label(RichText::new("■ this tensor's scales").color(MINE).small());
            if !others.is_empty() {
                ui.label(
                    RichText::new(format!("— median of its {} peers", others.len()))
                        .color(PEERS)
                        .small(),
                );
            }
        });
        Plot::new(format!("peer-overlay-{i}"))
            .height(110.0)
            .allow_zoom(false)
            .allow_drag(false)
            .allow_scroll(false)
            .show_y(false)
            .x_axis_formatter(super::histograms::log_axis)
            .y_axis_formatter(|m, _| format!("{:.0}%", m.value))
            .show(ui, |p| {
                p.bar_chart(BarChart::new("this tensor", bars));
                if !others.is_empty() {
                    p.line(Line::new("peers' median", line).color(PEERS).width(2.0));
                }
            });
    });
}

/// The heat map's value of a verdict: the score, or a statistic's z.
fn value(v: &PeerVerdict, stat: Option<Feature>) -> Option<f64> {
    match stat {
        None => Some(v.score),
        Some(f) => v.z.get(f.key()).copied(),
    }
}

/// A colour for `x`: the score from neutral to the warning colour at 1
/// and beyond; a z-score diverging, blue below, red above, full at ±6.
fn colour(x: f64, stat: Option<Feature>) -> Color32 {
    let lerp = |a: Color32, b: Color32, t: f64| {
        let t = t.clamp(0.0, 1.0) as f32;
        let m = |x: u8, y: u8| (f32::from(x) + (f32::from(y) - f32::from(x)) * t) as u8;
        Color32::from_rgb(m(a.r(), b.r()), m(a.g(), b.g()), m(a.b(), b.b()))
    };
    let grey = Color32::from_rgb(0x40, 0x44, 0x4a);
    match stat {
        None => lerp(grey, Color32::from_rgb(0xe5, 0x48, 0x3c), x),
        Some(_) if x >= 0.0 => lerp(grey, Color32::from_rgb(0xe5, 0x48, 0x3c), x / 6.0),
        Some(_) => lerp(grey, Color32::from_rgb(0x3c, 0x8c, 0xe5), -x / 6.0),
    }
}

/// Layers × role: one row per role (the name with its layer index taken
/// out), one column per layer; click a cell to select that tensor.
pub(super) fn heat_ui(
    ui: &mut egui::Ui,
    stat: &mut Option<Feature>,
    b: &Bundle,
    verdicts: &[Option<PeerVerdict>],
    selected: Option<usize>,
    tx: &mut Commands,
) {
    // role → layer → tensor
    let mut grid: BTreeMap<String, BTreeMap<u64, usize>> = BTreeMap::new();
    for (i, v) in verdicts.iter().enumerate() {
        if v.is_none() {
            continue;
        }
        let Some(t) = b.tensors.get(i) else { continue };
        if let (role, Some(layer)) = role_of(&t.name) {
            grid.entry(role).or_default().insert(layer, i);
        }
    }
    let layers = grid
        .values()
        .flat_map(|m| m.keys().copied())
        .max()
        .map_or(0, |m| m + 1);
    if grid.is_empty() || layers == 0 {
        return;
    }
    egui::CollapsingHeader::new(format!("Heat map: {} roles × {layers} layers", grid.len()))
        .id_salt("peer-heat")
        .default_open(true)
        .show(ui, |ui| {
            ui.horizontal(|ui| {
                ui.label("statistic");
                let label = |s: Option<Feature>| s.map_or("score", Feature::key);
                egui::ComboBox::from_id_salt("peer-heat-stat")
                    .selected_text(label(*stat))
                    .show_ui(ui, |ui| {
                        ui.selectable_value(stat, None, "score");
                        for f in Feature::ALL {
                            ui.selectable_value(stat, Some(f), format!("z of {}", f.key()));
                        }
                    });
            });
            let label_w = 260.0f32.min(ui.available_width() * 0.4);
            let cell_w = ((ui.available_width() - label_w) / layers as f32).clamp(4.0, 28.0);
            let cell_h = 12.0;
            let h = cell_h * grid.len() as f32;
            let (rect, _) = ui.allocate_exact_size(
                egui::vec2(label_w + cell_w * layers as f32, h),
                Sense::hover(),
            );
            let painter = ui.painter_at(rect);
            let text = ui.visuals().text_color();
            let font = egui::FontId::monospace(9.0);
            for (r, (role, cells)) in grid.iter().enumerate() {
                let y = rect.top() + r as f32 * cell_h;
                let short: String = if role.len() > 40 {
                    format!("…{}", &role[role.len() - 39..])
                } else {
                    role.clone()
                };
                painter.text(
                    egui::pos2(rect.left(), y + cell_h / 2.0),
                    egui::Align2::LEFT_CENTER,
                    short,
                    font.clone(),
                    text,
                );
                for (&layer, &i) in cells {
                    let x = rect.left() + label_w + layer as f32 * cell_w;
                    let cell = egui::Rect::from_min_size(
                        egui::pos2(x, y),
                        egui::vec2(cell_w - 1.0, cell_h - 1.0),
                    );
                    let val = verdicts[i].as_ref().and_then(|v| value(v, *stat));
                    let fill = val.map_or(Color32::from_gray(30), |x| colour(x, *stat));
                    painter.rect_filled(cell, 0.0, fill);
                    if selected == Some(i) {
                        painter.rect_stroke(
                            cell,
                            0.0,
                            Stroke::new(1.5, Color32::WHITE),
                            egui::StrokeKind::Inside,
                        );
                    }
                    // Each cell is a widget of its own: clickable, with its
                    // tensor in the hover text and for assistive technology.
                    let name = &b.tensors[i].name;
                    let shown = val.map_or("no peers to compare".into(), |x| format!("{x:.2}"));
                    let what = stat.map_or("score", Feature::key);
                    let resp = ui.interact(
                        cell,
                        ui.scope_id().with(("peer-heat-cell", i)),
                        Sense::click(),
                    );
                    resp.widget_info(|| {
                        egui::WidgetInfo::labeled(
                            egui::Role::Button,
                            true,
                            format!("heat map cell {name}: {what} {shown}"),
                        )
                    });
                    if resp.clicked() {
                        tx.send(Command::Select(Some(i)));
                    }
                    let reason = verdicts[i].as_ref().map_or("", |v| v.reason.as_str());
                    resp.on_hover_text(format!("{name}\n{what}: {shown}\n{reason}"));
                }
            }
        });
}
