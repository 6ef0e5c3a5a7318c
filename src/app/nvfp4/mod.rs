//! The NVFP4 expert panel: for any tensor of an mlx-nvfp4 expert set (its
//! `weight`, `scales` or `global_scale`), an expert picker, the per-expert
//! global scales, the E2M1 code and E4M3 scale histograms, a per-expert table
//! and a layer × expert map of the whole bundle. Scale statistics come from
//! the audit; code counts (and one expert's scale bytes) are counted on
//! demand on a named worker, cached per (tensor, expert), never in the frame.

mod counts;
mod heatmap;
mod panel;
mod table;

use std::sync::Arc;

use egui::{Color32, Pos2, Rect, Vec2};

use crate::format::{Bundle, Layout, nvfp4};

pub use panel::panel_ui;

const BAR: Color32 = Color32::from_rgb(0x3b, 0x82, 0xc4);
const PICKED: Color32 = Color32::from_rgb(0xf5, 0x9e, 0x0b);

/// The statistic the layer × expert map shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HeatStat {
    /// The expert's global scale.
    Global,
    /// Mean of its E4M3 scales.
    MeanScale,
    /// Largest E4M3 scale.
    MaxScale,
    /// Share of zero E4M3 scales.
    ZeroShare,
}

impl HeatStat {
    const ALL: [HeatStat; 4] = [
        Self::Global,
        Self::MeanScale,
        Self::MaxScale,
        Self::ZeroShare,
    ];

    fn label(self) -> &'static str {
        match self {
            Self::Global => "global scale",
            Self::MeanScale => "mean E4M3 scale",
            Self::MaxScale => "max E4M3 scale",
            Self::ZeroShare => "zero-scale share",
        }
    }

    /// Scales span octaves: coloured on a log axis; a share is linear.
    fn log(self) -> bool {
        self != Self::ZeroShare
    }
}

/// Columns of the per-expert table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpertSort {
    /// Expert number.
    Expert,
    /// Global scale.
    Global,
    /// Mean E4M3 scale.
    Mean,
    /// Max E4M3 scale.
    Max,
    /// Zero-scale share.
    Zero,
    /// NaN scale bytes.
    Nan,
}

/// One MoE projection's three tensors (indices into the bundle's tensors).
#[derive(Debug, Clone)]
pub struct ExpertSet {
    /// The layer, as its name spells it (`3` of `…layers.3`).
    pub layer: String,
    /// `gate_up_proj` or `down_proj`.
    pub proj: &'static str,
    /// The stacked weight.
    pub weight: usize,
    /// Its E4M3 scales, when present.
    pub scales: Option<usize>,
    /// Its global scales, when present.
    pub global: Option<usize>,
    /// Experts, from the validated layout; 0 when the metadata is broken.
    pub experts: usize,
}

/// The layer × expert map as last built, with its texture.
struct Heat {
    key: (HeatStat, usize),
    rows: Vec<usize>,
    cols: usize,
    values: Vec<Option<f64>>,
    range: (f64, f64),
    extreme: Option<(usize, usize)>,
    texture: Option<egui::TextureHandle>,
}

/// State of the NVFP4 panel, kept across frames and tensors.
pub struct Nvfp4View {
    /// The picked expert; `None` shows all of them.
    pub expert: Option<usize>,
    /// What the layer × expert map colours.
    pub heat_stat: HeatStat,
    /// Per-expert table sort column.
    pub sort: ExpertSort,
    /// Per-expert table order.
    pub ascending: bool,
    bundle: Option<Arc<Bundle>>,
    sets: Vec<ExpertSet>,
    counts: counts::Counts,
    heat: Option<Heat>,
    heat_geom: Option<(Rect, Vec2)>,
    /// How the global-scale chart last mapped values to the screen.
    globals_geom: Option<egui_plot::PlotTransform>,
}

impl Default for Nvfp4View {
    fn default() -> Self {
        Self {
            expert: None,
            heat_stat: HeatStat::Global,
            sort: ExpertSort::Expert,
            ascending: true,
            bundle: None,
            sets: Vec::new(),
            counts: counts::Counts::default(),
            heat: None,
            heat_geom: None,
            globals_geom: None,
        }
    }
}

impl Nvfp4View {
    /// The finished histogram of tensor `i` (16 E2M1 code counts for a
    /// weight, 256 byte counts for scales) over `expert` or all experts.
    pub fn hist(&self, i: usize, expert: Option<usize>) -> Option<&[u64]> {
        self.counts
            .get(&(i, expert))?
            .as_ref()
            .ok()
            .map(Vec::as_slice)
    }

    /// Whether a count is still running.
    pub fn counting(&self) -> bool {
        self.counts.counting()
    }

    /// The MoE expert sets of the open bundle, layer by layer.
    pub fn sets(&self) -> &[ExpertSet] {
        &self.sets
    }

    /// Where the map last drew the cell of `expert` in the set holding
    /// tensor `i`.
    pub fn heat_cell_pos(&self, i: usize, expert: usize) -> Option<Pos2> {
        let heat = self.heat.as_ref()?;
        let (rect, cell) = self.heat_geom?;
        let row = heat.rows.iter().position(|&r| self.sets[r].holds(i))?;
        (expert < heat.cols).then(|| {
            rect.min + Vec2::new((expert as f32 + 0.5) * cell.x, (row as f32 + 0.5) * cell.y)
        })
    }

    /// Where the global-scale chart last drew the middle of `expert`'s bar
    /// (half its height, so on the bar for any positive scale).
    pub fn global_bar_pos(&self, expert: usize, value: f64) -> Option<Pos2> {
        let t = self.globals_geom.as_ref()?;
        Some(t.position_from_point(&egui_plot::PlotPoint::new(expert as f64, value / 2.0)))
    }

    /// The map's most extreme cell (farthest from the median, or invalid):
    /// the set's weight index and the expert.
    pub fn heat_extreme(&self) -> Option<(usize, usize)> {
        let heat = self.heat.as_ref()?;
        let (row, e) = heat.extreme?;
        Some((self.sets[*heat.rows.get(row)?].weight, e))
    }

    /// Resets everything learned from another bundle.
    fn sync(&mut self, b: &Arc<Bundle>) {
        if self.bundle.as_ref().is_some_and(|o| Arc::ptr_eq(o, b)) {
            return;
        }
        self.counts.clear();
        self.heat = None;
        self.heat_geom = None;
        self.globals_geom = None;
        self.sets = index(b);
        self.bundle = Some(b.clone());
    }

    /// Asks the counts worker for these counts (see [`counts::Counts::want`]).
    fn want(&mut self, ctx: &egui::Context, b: &Arc<Bundle>, wanted: &[counts::Key]) {
        self.counts.want(ctx, b, wanted);
    }
}

impl ExpertSet {
    fn holds(&self, i: usize) -> bool {
        self.weight == i || self.scales == Some(i) || self.global == Some(i)
    }

    fn short(&self) -> String {
        let p = if self.proj == "down_proj" {
            "down"
        } else {
            "up"
        };
        format!("L{} {p}", self.layer)
    }
}

/// Is tensor `i` part of an NVFP4 expert set (so the panel applies)?
pub fn is_member(b: &Bundle, i: usize) -> bool {
    b.tensors
        .get(i)
        .is_some_and(|t| nvfp4::is_expert(&t.name).is_some())
}

fn index(b: &Bundle) -> Vec<ExpertSet> {
    let mut sets: Vec<(u64, ExpertSet)> = Vec::new();
    for (w, t) in b.tensors.iter().enumerate() {
        let Some((prefix, proj, "weight")) = nvfp4::is_expert(&t.name) else {
            continue;
        };
        let layer = prefix.rsplit('.').next().unwrap_or(prefix).to_string();
        let base = t.name.trim_end_matches(".weight");
        let experts = match t.layout {
            Some(Layout::Fp4 { experts, .. }) => usize::try_from(experts).unwrap_or(0),
            _ => 0,
        };
        let order =
            layer.parse::<u64>().unwrap_or(u64::MAX / 2) * 2 + u64::from(proj != "gate_up_proj");
        sets.push((
            order,
            ExpertSet {
                layer,
                proj: if proj == "down_proj" {
                    "down_proj"
                } else {
                    "gate_up_proj"
                },
                weight: w,
                scales: b.find(&format!("{base}.scales")),
                global: b.find(&format!("{base}.global_scale")),
                experts,
            },
        ));
    }
    sets.sort_by_key(|(o, _)| *o);
    sets.into_iter().map(|(_, s)| s).collect()
}

/// Four significant digits, in scientific notation outside 0.001..10000;
/// `trim` drops trailing zeros (axis labels; table columns keep them).
fn short_number(v: f64, trim: bool) -> String {
    let a = v.abs();
    if a == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    if !(1e-3..1e4).contains(&a) {
        return format!("{v:.3e}");
    }
    let decimals = (3 - a.log10().floor() as i32).max(0) as usize;
    let text = format!("{v:.decimals$}");
    if trim && text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

fn finite_range(v: impl Iterator<Item = f64>) -> (f64, f64) {
    v.filter(|x| x.is_finite())
        .fold((f64::NAN, f64::NAN), |(a, b), x| (a.min(x), b.max(x)))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Index of the value farthest from the median (log ratio for scales);
/// an invalid one (not finite, or ≤ 0 on a log axis) comes first. `None`
/// is no data.
fn most_extreme(v: &[Option<f64>], log: bool) -> Option<usize> {
    let t = |x: f64| if log { x.ln() } else { x };
    let valid = |x: f64| x.is_finite() && (!log || x > 0.0);
    if let Some(bad) = v.iter().position(|x| x.is_some_and(|x| !valid(x))) {
        return Some(bad);
    }
    let ok = || v.iter().enumerate().filter_map(|(i, x)| Some((i, (*x)?)));
    let m = median(ok().map(|(_, x)| t(x)).collect());
    ok().map(|(i, x)| (i, (t(x) - m).abs()))
        .filter(|(_, d)| *d > 0.0)
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(i, _)| i)
}
