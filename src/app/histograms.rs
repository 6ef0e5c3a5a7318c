//! Charts of the selected tensor's codes, scales and values (egui_plot).
//! The numbers come from the audit's single pass; nothing is computed here.

use egui::{Color32, RichText};
use egui_plot::{Bar, BarChart, Plot};

use super::Commands;
use super::chart_export::chart_ui as exportable;
use crate::decode::stats::{CodeCounts, ScaleSummary, TensorStats, ValueSummary};

pub(super) const BAR: Color32 = Color32::from_rgb(0x3b, 0x82, 0xc4);

/// Draws every chart the tensor's statistics allow (each with its PNG menu).
pub fn stats_ui(ui: &mut egui::Ui, id: &str, stats: &TensorStats, tx: &mut Commands) {
    if let Some(c) = &stats.codes {
        codes_ui(ui, id, c, tx);
    }
    if let Some(g) = &stats.gguf {
        // GGUF K-quants' sub-block scales and mins, FP4 types' scale bytes.
        for (what, h) in [
            ("Sub-block scales", &g.sub_scales),
            ("Sub-block mins", &g.sub_mins),
        ] {
            if let Some(h) = h {
                code_chart_ui(ui, &format!("{id}-{what}"), what, h, tx);
            }
        }
    }
    if let Some(s) = &stats.scales {
        scales_ui(ui, id, s, tx);
    }
    if let Some(m) = stats.gguf.as_ref().and_then(|g| g.mins.as_ref()) {
        // Q4_1/Q5_1's m and the K-quants' dmin: F16 like d, beside its chart.
        mins_ui(ui, id, m, tx);
    }
    if let Some(v) = &stats.values {
        values_ui(ui, id, v, tx);
    }
    if let Some(q) = &stats.quality {
        egui::Grid::new(format!("{id}-quality"))
            .num_columns(2)
            .striped(true)
            .show(ui, |ui| {
                let mut row = |k: &str, v: String| {
                    ui.label(k);
                    ui.label(RichText::new(v).monospace());
                    ui.end_row();
                };
                row("entropy (effective bits)", format!("{:.3}", q.entropy_bits));
                row(
                    "clipped (extreme levels)",
                    format!("{:.2}%", q.clipping_share * 100.0),
                );
                row(
                    "unused levels",
                    if q.unused_levels.is_empty() {
                        "none".into()
                    } else {
                        format!("{:?}", q.unused_levels)
                    },
                );
                row(
                    "all-zero groups",
                    format!("{} of {}", q.zero_groups, q.groups),
                );
                row(
                    "scale range (max/min)",
                    format!("{:.1}", q.scale_dynamic_range),
                );
                row(
                    "outlier rows (> 8× median scale)",
                    q.outlier_rows.to_string(),
                );
                row("reserved codes", q.reserved_codes.to_string());
                row("suspicion", format!("{:.2}", q.suspicion));
            });
    }
}

fn codes_ui(ui: &mut egui::Ui, id: &str, c: &CodeCounts, tx: &mut Commands) {
    code_chart_ui(ui, &format!("{id}-codes"), "Codes", c, tx);
}

/// A code histogram titled `title` (the codes, or a GGUF K-quant's
/// sub-block scales) with its PNG menu.
fn code_chart_ui(ui: &mut egui::Ui, plot_id: &str, title: &str, c: &CodeCounts, tx: &mut Commands) {
    let total = c.total().max(1) as f64;
    ui.label(RichText::new(title).strong())
        .on_hover_text("One bar per stored code; the axis shows its level (code − zero point)");
    let warn = ui.visuals().warn_fg_color;
    let bars = code_bars(c, 0.0, 0.8, BAR, warn);
    let chart = BarChart::new("codes", bars).element_formatter(Box::new(move |bar, _| {
        format!(
            "{}\n{} codes ({:.2}%)",
            bar.name,
            bar.value as u64,
            bar.value / total * 100.0
        )
    }));
    let plot = code_plot(plot_id, c.zero);
    let name = title.to_lowercase();
    exportable(ui, &name, tx, |ui, _| plot.show(ui, |p| p.bar_chart(chart)));
}

/// The bars of a code histogram: one per stored code at `code + shift`,
/// `width` wide, reserved codes in `warn`.
pub(super) fn code_bars(
    c: &CodeCounts,
    shift: f64,
    width: f64,
    fill: Color32,
    warn: Color32,
) -> Vec<Bar> {
    c.counts
        .iter()
        .enumerate()
        .map(|(code, &n)| {
            let level = code as i32 - c.zero;
            let reserved = code > usize::from(c.max_code);
            Bar::new(code as f64 + shift, n as f64)
                .width(width)
                .name(if reserved {
                    format!("code {code} (reserved)")
                } else {
                    format!("code {code}, level {level:+}")
                })
                .fill(if reserved { warn } else { fill })
        })
        .collect()
}

/// The fixed plot a code histogram is drawn in: integer ticks labelled
/// with the level `code − zero`.
pub(super) fn code_plot(id: &str, zero: i32) -> Plot<'static> {
    Plot::new(id)
        .height(150.0)
        .allow_zoom(false)
        .allow_drag(false)
        .allow_scroll(false)
        .show_y(false)
        .x_grid_spacer(egui_plot::uniform_grid_spacer(|_| [1.0, 2.0, 4.0]))
        .x_axis_formatter(move |mark, _| {
            let v = mark.value;
            if (v - v.round()).abs() < 1e-6 {
                format!("{:+}", v.round() as i32 - zero)
            } else {
                String::new()
            }
        })
}

/// How a distribution of magnitudes is labelled: the scales, or a GGUF
/// type's block minima.
struct Magnitudes {
    title: &'static str,
    hover: &'static str,
    /// What one counted item is called (`scales`, `mins`).
    noun: &'static str,
    /// What the invalid ones are said to be.
    invalid: &'static str,
    /// The chart's name in its export menu and its id suffix.
    export: &'static str,
    key: &'static str,
}

const SCALES: Magnitudes = Magnitudes {
    title: "Scales",
    hover: "Half-octave bins, log2 axis",
    noun: "scales",
    invalid: "invalid",
    export: "scales",
    key: "scales",
};

/// A GGUF type's F16 block minima (`|m|` of Q4_1/Q5_1, `|dmin|` of the
/// K-quants), binned as the scales are.
const MINS: Magnitudes = Magnitudes {
    title: "Block mins (|m|, |dmin|)",
    hover: "The F16 minimum of each block (Q4_1/Q5_1: m; K-quants: dmin), as magnitudes; half-octave bins, log2 axis",
    noun: "mins",
    invalid: "zero or non-finite",
    export: "block mins",
    key: "mins",
};

fn scales_ui(ui: &mut egui::Ui, id: &str, s: &ScaleSummary, tx: &mut Commands) {
    magnitudes_ui(ui, id, s, tx, &SCALES);
}

fn mins_ui(ui: &mut egui::Ui, id: &str, s: &ScaleSummary, tx: &mut Commands) {
    magnitudes_ui(ui, id, s, tx, &MINS);
}

/// A magnitude distribution: its quantiles line and its log2-axis chart.
fn magnitudes_ui(ui: &mut egui::Ui, id: &str, s: &ScaleSummary, tx: &mut Commands, m: &Magnitudes) {
    ui.label(RichText::new(m.title).strong())
        .on_hover_text(m.hover);
    ui.label(
        RichText::new(format!(
            "{} {} · min {:.3e} · p01 {:.3e} · median {:.3e} · p99 {:.3e} · max {:.3e}{}",
            s.count,
            m.noun,
            s.min,
            s.p01,
            s.median,
            s.p99,
            s.max,
            if s.invalid > 0 {
                format!(" · {} {}", s.invalid, m.invalid)
            } else {
                String::new()
            }
        ))
        .small(),
    );
    let total = s.count.max(1) as f64;
    let bars = scale_bars(s, 0.0, 0.9, BAR);
    exportable(ui, m.export, tx, |ui, _| {
        chart_ui(
            ui,
            &format!("{id}-{}", m.key),
            m.key,
            bars,
            total,
            Some(Box::new(log_axis)),
        )
    });
}

/// The bars of a scale histogram on a log2 axis: each bin's bar covers
/// `width` of the bin, its centre moved by `shift` bin widths.
pub(super) fn scale_bars(s: &ScaleSummary, shift: f64, width: f64, fill: Color32) -> Vec<Bar> {
    s.bins
        .iter()
        .map(|b| {
            let (lo, hi) = (b.lo.log2(), b.hi.log2());
            Bar::new((lo + hi) / 2.0 + shift * (hi - lo), b.count as f64)
                .width((hi - lo) * width)
                .name(format!("{:.3e} – {:.3e}", b.lo, b.hi))
                .fill(fill)
        })
        .collect()
}

/// Labels a log2 axis mark as a power of two.
pub(super) fn log_axis(mark: egui_plot::GridMark, _: &std::ops::RangeInclusive<f64>) -> String {
    format!("2^{:.1}", mark.value)
}

fn values_ui(ui: &mut egui::Ui, id: &str, v: &ValueSummary, tx: &mut Commands) {
    ui.label(RichText::new("Values").strong());
    ui.label(
        RichText::new(format!(
            "{} values · min {:.4} · max {:.4} · mean {:.4} · std {:.4}{}",
            v.count,
            v.min,
            v.max,
            v.mean,
            v.std,
            if v.nonfinite > 0 {
                format!(" · {} non-finite", v.nonfinite)
            } else {
                String::new()
            }
        ))
        .small(),
    );
    let total = v.count.max(1) as f64;
    let bars = value_bars(v, 0.0, 0.95, BAR);
    exportable(ui, "values", tx, |ui, _| {
        chart_ui(ui, &format!("{id}-values"), "values", bars, total, None)
    });
}

/// The bars of a value histogram, each covering `width` of its bin, moved
/// by `shift` bin widths.
pub(super) fn value_bars(v: &ValueSummary, shift: f64, width: f64, fill: Color32) -> Vec<Bar> {
    v.bins
        .iter()
        .map(|b| {
            let w = (b.hi - b.lo).max(1e-12);
            Bar::new((b.lo + b.hi) / 2.0 + shift * w, b.count as f64)
                .width(w * width)
                .name(format!("{:.4} – {:.4}", b.lo, b.hi))
                .fill(fill)
        })
        .collect()
}

type AxisFormatter = Box<dyn Fn(egui_plot::GridMark, &std::ops::RangeInclusive<f64>) -> String>;

/// A fixed (no zoom or drag) bar chart whose hover text gives each bar's
/// count and its share of `total` `what`.
fn chart_ui(
    ui: &mut egui::Ui,
    id: &str,
    what: &'static str,
    bars: Vec<Bar>,
    total: f64,
    x_axis: Option<AxisFormatter>,
) {
    let chart = BarChart::new(what, bars).element_formatter(Box::new(move |bar, _| {
        format!(
            "{}\n{} {what} ({:.2}%)",
            bar.name,
            bar.value as u64,
            bar.value / total * 100.0
        )
    }));
    let mut plot = Plot::new(id)
        .height(130.0)
        .allow_zoom(false)
        .allow_drag(false)
        .allow_scroll(false)
        .show_y(false);
    if let Some(f) = x_axis {
        plot = plot.x_axis_formatter(f);
    }
    plot.show(ui, |p| p.bar_chart(chart));
}
