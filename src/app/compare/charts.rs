//! The selected row of the diff table: what differs, A's and B's code,
//! scale and value histograms overlaid (the detail panel's bars, side by
//! side in two colours), and the histogram of code deltas B − A.

use egui::{Color32, RichText};
use egui_plot::{Bar, BarChart, Legend, Plot};

use super::super::histograms::{self, code_bars, code_plot, scale_bars, value_bars};
use super::CompareView;
use crate::diff::TensorDiff;
use crate::diff::markdown::status_text;

const A_FILL: Color32 = histograms::BAR;
const B_FILL: Color32 = Color32::from_rgb(0xe0, 0x8a, 0x2c);

/// The detail of row `k`.
pub(super) fn detail_ui(ui: &mut egui::Ui, view: &CompareView, k: usize) {
    let Some(r) = &view.result else { return };
    let Some(t) = r.report.tensors.get(k) else {
        return;
    };
    ui.horizontal(|ui| {
        ui.label(RichText::new(&t.name).monospace().strong());
        if let Some(e) = t.expert {
            ui.label(format!("expert {e}"));
        }
        ui.label(RichText::new(status_text(t.status)).weak());
    });
    // Facts and deltas on the left, the A/B overlays on the right.
    ui.columns(2, |cols| {
        let [left, right] = cols else { return };
        facts_ui(left, t);
        if let Some(c) = &t.codes {
            deltas_ui(left, k, c);
        }
        overlays_ui(right, view, k, t);
    });
}

/// A's and B's histograms of the selected tensor, overlaid.
fn overlays_ui(ui: &mut egui::Ui, view: &CompareView, k: usize, t: &TensorDiff) {
    if t.expert.is_some() {
        ui.label(
            RichText::new(
                "One expert of a stacked NVFP4 tensor: its code counts are in the NVFP4 panel of each bundle.",
            )
            .weak(),
        );
        return;
    }
    let Some(pair) = view.pair_stats() else {
        if view.stats_job.is_some() {
            ui.horizontal(|ui| {
                ui.spinner();
                ui.label("Reading both tensors…");
            });
        }
        return;
    };
    let (Some(a), Some(b)) = (&pair.a, &pair.b) else {
        ui.label(RichText::new("No statistics on one side (the tensor could not be read).").weak());
        return;
    };
    let warn = ui.visuals().warn_fg_color;
    if let (Some(ca), Some(cb)) = (&a.codes, &b.codes) {
        ui.label(RichText::new("Codes: A vs B").strong())
            .on_hover_text(
                "Stored codes of A (left bar) and B (right bar); the axis shows the level",
            );
        let ba = BarChart::new("A", code_bars(ca, -0.2, 0.4, A_FILL, warn)).color(A_FILL);
        let bb = BarChart::new("B", code_bars(cb, 0.2, 0.4, B_FILL, warn)).color(B_FILL);
        code_plot(&format!("diff-{k}-codes"), ca.zero)
            .height(120.0)
            .legend(Legend::default())
            .show(ui, |p| {
                p.bar_chart(ba);
                p.bar_chart(bb);
            });
    }
    if let (Some(sa), Some(sb)) = (&a.scales, &b.scales) {
        ui.label(RichText::new("Scales: A vs B").strong())
            .on_hover_text("Half-octave bins, log2 axis; A left, B right in each bin");
        ui.label(
            RichText::new(format!(
                "median A {:.3e} · B {:.3e}; max A {:.3e} · B {:.3e}",
                sa.median, sb.median, sa.max, sb.max
            ))
            .small(),
        );
        let ba = BarChart::new("A", scale_bars(sa, -0.225, 0.45, A_FILL)).color(A_FILL);
        let bb = BarChart::new("B", scale_bars(sb, 0.225, 0.45, B_FILL)).color(B_FILL);
        fixed_plot(&format!("diff-{k}-scales"))
            .x_axis_formatter(histograms::log_axis)
            .show(ui, |p| {
                p.bar_chart(ba);
                p.bar_chart(bb);
            });
    }
    if let (Some(va), Some(vb)) = (&a.values, &b.values) {
        ui.label(RichText::new("Values: A vs B").strong());
        let ba = BarChart::new("A", value_bars(va, -0.225, 0.45, A_FILL)).color(A_FILL);
        let bb = BarChart::new("B", value_bars(vb, 0.225, 0.45, B_FILL)).color(B_FILL);
        fixed_plot(&format!("diff-{k}-values")).show(ui, |p| {
            p.bar_chart(ba);
            p.bar_chart(bb);
        });
    }
}

fn fixed_plot(id: &str) -> Plot<'static> {
    Plot::new(id)
        .height(110.0)
        .allow_zoom(false)
        .allow_drag(false)
        .allow_scroll(false)
        .show_y(false)
        .legend(Legend::default())
}

/// What differs and the figures of the comparison, as a grid.
fn facts_ui(ui: &mut egui::Ui, t: &TensorDiff) {
    egui::Grid::new("diff-facts")
        .num_columns(3)
        .striped(true)
        .show(ui, |ui| {
            ui.label("");
            ui.label(RichText::new("A").strong());
            ui.label(RichText::new("B").strong());
            ui.end_row();
            let fa = t.a.as_ref().map(side_facts);
            let fb = t.b.as_ref().map(side_facts);
            for (i, k) in ["precision", "shape", "dtype", "range SHA-256"]
                .into_iter()
                .enumerate()
            {
                let cell = |f: &Option<[String; 4]>| {
                    f.as_ref().map_or("—".to_string(), |f| f[i].clone())
                };
                ui.label(k);
                ui.label(RichText::new(cell(&fa)).monospace());
                ui.label(RichText::new(cell(&fb)).monospace());
                ui.end_row();
            }
        });
    let mut lines = Vec::new();
    if !t.differs.is_empty() {
        lines.push(format!("differs: {}", t.differs.join(", ")));
    }
    if let Some(c) = &t.codes {
        lines.push(format!("codes changed: {:.4}%", c.changed_share * 100.0));
    }
    if let Some(s) = &t.scales {
        let f = |v: Option<f64>| v.map_or("—".into(), |x| format!("{x:.4}"));
        lines.push(format!(
            "scale ratio B/A: min {} · median {} · max {} · {:.2}% equal",
            f(s.min_ratio),
            f(s.median_ratio),
            f(s.max_ratio),
            s.equal_share * 100.0
        ));
    }
    if let Some(e) = t.weight_rel_err {
        lines.push(format!("weight error |W_B − W_A| / |W_A|: {e:.3e}"));
    }
    if let Some(w) = &t.worst_row {
        lines.push(format!(
            "worst row: {} ({})",
            w.row,
            w.rel_err.map_or("inf".into(), |e| format!("{e:.3e}"))
        ));
    }
    for l in lines {
        ui.label(l);
    }
}

/// A side's precision, shape, dtype and (shortened) range hash.
fn side_facts(s: &crate::diff::TensorSide) -> [String; 4] {
    [
        s.precision.clone(),
        s.shape.as_ref().map_or("—".into(), |v| format!("{v:?}")),
        s.dtype.clone().unwrap_or_else(|| "—".into()),
        s.sha256
            .as_deref()
            .map_or("—".into(), |h| h.get(..16).unwrap_or(h).to_string() + "…"),
    ]
}

/// The code-delta histogram: non-zero deltas B − A (zero is every
/// unchanged code and would flatten the rest; its count is in the title).
fn deltas_ui(ui: &mut egui::Ui, k: usize, c: &crate::diff::CodeDiff) {
    let unchanged = c.delta_counts.get(&0).copied().unwrap_or(0);
    let total: u64 = c.delta_counts.values().sum();
    ui.label(RichText::new("Code deltas (B − A)").strong())
        .on_hover_text(format!(
            "Changed codes by how far they moved; {unchanged} of {total} codes unchanged"
        ));
    let bars: Vec<Bar> = c
        .delta_counts
        .iter()
        .filter(|(d, n)| **d != 0 && **n > 0)
        .map(|(&d, &n)| {
            Bar::new(f64::from(d), n as f64)
                .width(0.8)
                .name(format!("delta {d:+}"))
                .fill(B_FILL)
        })
        .collect();
    if bars.is_empty() {
        ui.label(RichText::new("no code changed").weak());
        return;
    }
    let changed = (total - unchanged).max(1) as f64;
    let chart = BarChart::new("deltas", bars).element_formatter(Box::new(move |bar, _| {
        format!(
            "{}\n{} codes ({:.2}% of changed)",
            bar.name,
            bar.value as u64,
            bar.value / changed * 100.0
        )
    }));
    Plot::new(format!("diff-{k}-deltas"))
        .height(110.0)
        .allow_zoom(false)
        .allow_drag(false)
        .allow_scroll(false)
        .show_y(false)
        .x_grid_spacer(egui_plot::uniform_grid_spacer(|_| [1.0, 2.0, 4.0]))
        .show(ui, |p| p.bar_chart(chart));
}
