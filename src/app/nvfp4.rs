//! The NVFP4 expert panel: for any tensor of an mlx-nvfp4 expert set (its
//! `weight`, `scales` or `global_scale`), an expert picker, the per-expert
//! global scales, the E2M1 code and E4M3 scale histograms, a per-expert table
//! and a layer × expert map of the whole bundle. Scale statistics come from
//! the audit; code counts (and one expert's scale bytes) are counted on
//! demand on a named worker, cached per (tensor, expert), never in the frame.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, sync_channel};
use std::sync::{Arc, Mutex};

use egui::{Color32, Key, Modifiers, Pos2, Rect, RichText, Sense, Stroke, Vec2};
use egui_extras::{Column, TableBuilder};
use egui_plot::{Bar, BarChart, Plot};

use super::{Command, Commands, RowStatus, Session};
use crate::decode::nvfp4::{E2M1_LABELS, e4m3, e4m3_is_nan};
use crate::decode::stats::{E4m3Stats, TensorStats};
use crate::format::{Bundle, Layout, nvfp4};

const BAR: Color32 = Color32::from_rgb(0x3b, 0x82, 0xc4);
const PICKED: Color32 = Color32::from_rgb(0xf5, 0x9e, 0x0b);
/// Bytes read per step of a count; the worker checks for cancellation between steps.
const CHUNK: u64 = 4 << 20;
/// Counts kept before the cache starts over (each is at most 2 KiB).
const MAX_CACHED: usize = 4096;

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

type Hist = Result<Vec<u64>, String>;

struct Job {
    key: (usize, Option<usize>),
    rx: Receiver<Hist>,
    cancel: Arc<AtomicBool>,
}

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
    hists: HashMap<(usize, Option<usize>), Hist>,
    jobs: Vec<Job>,
    heat: Option<Heat>,
    heat_geom: Option<(Rect, Vec2)>,
    /// How the global-scale chart last mapped values to the screen.
    globals_geom: Option<egui_plot::PlotTransform>,
    /// Held by the running count: one reads the disk at a time.
    disk: Arc<Mutex<()>>,
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
            hists: HashMap::new(),
            jobs: Vec::new(),
            heat: None,
            heat_geom: None,
            globals_geom: None,
            disk: Arc::new(Mutex::new(())),
        }
    }
}

impl Nvfp4View {
    /// The finished histogram of tensor `i` (16 E2M1 code counts for a
    /// weight, 256 byte counts for scales) over `expert` or all experts.
    pub fn hist(&self, i: usize, expert: Option<usize>) -> Option<&[u64]> {
        self.hists
            .get(&(i, expert))?
            .as_ref()
            .ok()
            .map(Vec::as_slice)
    }

    /// Whether a count is still running.
    pub fn counting(&self) -> bool {
        !self.jobs.is_empty()
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
        for j in self.jobs.drain(..) {
            j.cancel.store(true, Ordering::Relaxed);
        }
        self.hists.clear();
        self.heat = None;
        self.heat_geom = None;
        self.globals_geom = None;
        self.sets = index(b);
        self.bundle = Some(b.clone());
    }

    /// Collects finished counts, cancels unwanted ones, starts missing ones.
    fn want(&mut self, ctx: &egui::Context, b: &Bundle, wanted: &[(usize, Option<usize>)]) {
        let mut keep = Vec::new();
        for j in self.jobs.drain(..) {
            match j.rx.try_recv() {
                Ok(h) => {
                    self.hists.insert(j.key, h);
                }
                Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                    self.hists
                        .insert(j.key, Err("the count stopped unexpectedly".into()));
                }
                Err(std::sync::mpsc::TryRecvError::Empty) if wanted.contains(&j.key) => {
                    keep.push(j)
                }
                Err(std::sync::mpsc::TryRecvError::Empty) => {
                    j.cancel.store(true, Ordering::Relaxed)
                }
            }
        }
        self.jobs = keep;
        if self.hists.len() > MAX_CACHED {
            self.hists.clear();
        }
        for &key in wanted {
            if self.hists.contains_key(&key) || self.jobs.iter().any(|j| j.key == key) {
                continue;
            }
            match request(b, key.0, key.1).and_then(|r| spawn(r, ctx.clone(), &self.disk)) {
                Ok((rx, cancel)) => self.jobs.push(Job { key, rx, cancel }),
                Err(e) => {
                    self.hists.insert(key, Err(e));
                }
            }
        }
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

/// What a count reads: one byte range of one file.
struct Request {
    path: PathBuf,
    start: u64,
    end: u64,
    nibbles: bool,
}

/// The bytes of tensor `i` (one expert's or all), from its validated layout.
fn request(b: &Bundle, i: usize, expert: Option<usize>) -> Result<Request, String> {
    let t = b.tensors.get(i).ok_or("no such tensor")?;
    let (experts, per, nibbles) = match t.layout {
        Some(Layout::Fp4 {
            experts,
            rows,
            cols,
        }) => (experts, rows.checked_mul(cols).map(|n| n / 2), true),
        Some(Layout::E4m3 {
            experts,
            rows,
            groups,
        }) => (experts, rows.checked_mul(groups), false),
        _ => return Err(format!("{} has no stacked NVFP4 layout", t.name)),
    };
    let (start, end) = t
        .range()
        .ok_or_else(|| format!("{} has no byte range", t.name))?;
    let per = per.filter(|&p| experts.checked_mul(p) == Some(end - start));
    let Some(per) = per else {
        return Err(format!(
            "{}: its {} bytes disagree with its shape",
            t.name,
            end - start
        ));
    };
    let (start, end) = match expert {
        None => (start, end),
        Some(e) if (e as u64) < experts => (start + e as u64 * per, start + (e as u64 + 1) * per),
        Some(e) => return Err(format!("{} has no expert {e}", t.name)),
    };
    let file = b
        .files
        .get(t.file)
        .ok_or("the tensor's file is not in the bundle")?;
    Ok(Request {
        path: file.path.clone(),
        start,
        end,
        nibbles,
    })
}

fn spawn(
    r: Request,
    ctx: egui::Context,
    one_at_a_time: &Arc<Mutex<()>>,
) -> Result<(Receiver<Hist>, Arc<AtomicBool>), String> {
    let (tx, rx) = sync_channel(1);
    let cancel = Arc::new(AtomicBool::new(false));
    let (c, lock) = (cancel.clone(), one_at_a_time.clone());
    std::thread::Builder::new()
        .name("bundlescope-nvfp4-count".into())
        .spawn(move || {
            // One count reads the disk at a time; a cancelled one that waited gives up.
            let _turn = lock.lock();
            let h = count(&r, &c);
            if !c.load(Ordering::Relaxed) {
                let _ = tx.send(h);
                ctx.request_repaint();
            }
        })
        .map_err(|e| format!("could not start the count: {e}"))?;
    Ok((rx, cancel))
}

/// Reads the range with a fixed-size buffer and counts bytes, or the two
/// E2M1 nibbles of each byte.
fn count(r: &Request, cancel: &AtomicBool) -> Hist {
    let shown = r.path.display();
    // Checked before opening: opening a FIFO would block until a writer came.
    let meta = std::fs::metadata(&r.path).map_err(|e| format!("cannot read {shown}: {e}"))?;
    if !meta.is_file() || meta.len() < r.end {
        return Err(format!(
            "{shown} is {} bytes long; the tensor needs bytes {}..{}",
            meta.len(),
            r.start,
            r.end
        ));
    }
    let mut f = File::open(&r.path).map_err(|e| format!("cannot open {shown}: {e}"))?;
    f.seek(SeekFrom::Start(r.start))
        .map_err(|e| format!("cannot seek in {shown}: {e}"))?;
    let mut hist = [[0u64; 256]; 4];
    let mut left = r.end - r.start;
    let mut buf = vec![0u8; CHUNK.min(left) as usize];
    while left > 0 {
        if cancel.load(Ordering::Relaxed) {
            return Err("cancelled".into());
        }
        let n = CHUNK.min(left) as usize;
        let chunk = &mut buf[..n];
        f.read_exact(chunk)
            .map_err(|e| format!("reading {shown}: {e}"))?;
        let mut quads = chunk.chunks_exact(4);
        for q in &mut quads {
            for (h, &b) in hist.iter_mut().zip(q) {
                h[usize::from(b)] += 1;
            }
        }
        for &b in quads.remainder() {
            hist[0][usize::from(b)] += 1;
        }
        left -= n as u64;
    }
    let bytes: Vec<u64> = (0..256).map(|b| hist.iter().map(|h| h[b]).sum()).collect();
    if !r.nibbles {
        return Ok(bytes);
    }
    let mut codes = vec![0u64; 16];
    for (b, &n) in bytes.iter().enumerate() {
        codes[b & 15] += n;
        codes[b >> 4] += n;
    }
    Ok(codes)
}

/// Draws the panel for tensor `i` of the session's bundle.
pub fn panel_ui(
    ui: &mut egui::Ui,
    view: &mut Nvfp4View,
    s: &Session,
    i: usize,
    commands: &mut Commands,
) {
    let Some(b) = s.model.bundle.clone() else {
        return;
    };
    view.sync(&b);
    ui.add_space(6.0);
    let Some(set) = view.sets.iter().find(|x| x.holds(i)).cloned() else {
        ui.label(RichText::new("NVFP4 experts").strong());
        ui.label(
            RichText::new("This expert set lacks its weight; see the findings.")
                .color(ui.visuals().warn_fg_color),
        );
        return;
    };
    ui.label(
        RichText::new(format!(
            "NVFP4 experts · layer {} · {}",
            set.layer, set.proj
        ))
        .strong(),
    );
    ui.horizontal_wrapped(|ui| {
        for (label, part) in [
            ("weight", Some(set.weight)),
            ("scales", set.scales),
            ("global_scale", set.global),
        ] {
            let Some(j) = part else {
                ui.label(RichText::new(format!("no {label}")).color(ui.visuals().warn_fg_color));
                continue;
            };
            if ui
                .selectable_label(j == i, label)
                .on_hover_text(&b.tensors[j].name)
                .clicked()
                && j != i
            {
                commands.send(Command::Select(Some(j)));
            }
        }
    });
    let broken = set.experts == 0
        || [set.scales, set.global]
            .iter()
            .any(|p| p.is_none_or(|j| b.tensors[j].layout.is_none()));
    if broken {
        ui.label(
            RichText::new(
                "The metadata of this expert set is broken; the findings say what is wrong.",
            )
            .color(ui.visuals().warn_fg_color),
        );
        return;
    }
    picker_ui(ui, view, set.experts);
    let stats = |j: Option<usize>| {
        j.and_then(|j| s.model.stats.get(j))
            .and_then(Option::as_ref)
    };
    let globals = stats(set.global).and_then(|t: &TensorStats| t.global_scales.as_deref());
    let e4 = stats(set.scales).and_then(|t| t.e4m3.as_ref());
    let healthy = |j: usize| s.status(j) != RowStatus::Error;
    let mut wanted = Vec::new();
    if healthy(set.weight) {
        wanted.push((set.weight, view.expert));
    }
    if let (Some(sc), Some(_)) = (set.scales, view.expert)
        && healthy(sc)
    {
        wanted.push((sc, view.expert));
    }
    view.want(ui.ctx(), &b, &wanted);
    let id = format!("nv{}", set.weight);

    egui::CollapsingHeader::new("Global scales")
        .id_salt("nv-globals")
        .default_open(true)
        .show(ui, |ui| match globals {
            Some(g) => globals_ui(ui, view, &id, g),
            None => waiting_ui(ui, s, "global scales"),
        });
    egui::CollapsingHeader::new("E2M1 codes")
        .id_salt("nv-codes")
        .default_open(true)
        .show(ui, |ui| {
            if !healthy(set.weight) {
                ui.label(
                    RichText::new("The weight has errors; its codes are not counted.")
                        .color(ui.visuals().warn_fg_color),
                );
            } else {
                match view.hists.get(&(set.weight, view.expert)) {
                    Some(Ok(h)) => codes_ui(ui, &id, h, view.expert),
                    Some(Err(e)) => {
                        ui.label(RichText::new(e).color(ui.visuals().error_fg_color));
                    }
                    None => counting_ui(ui, "counting codes…"),
                }
            }
        });
    egui::CollapsingHeader::new("E4M3 scales")
        .id_salt("nv-e4m3")
        .default_open(true)
        .show(ui, |ui| match (view.expert, set.scales) {
            (None, _) => match e4 {
                Some(e4) => e4m3_ui(ui, &id, &e4.hist, None),
                None => waiting_ui(ui, s, "E4M3 statistics"),
            },
            (Some(e), Some(sc)) if healthy(sc) => match view.hists.get(&(sc, Some(e))) {
                Some(Ok(h)) => e4m3_ui(ui, &id, h, Some(e)),
                Some(Err(err)) => {
                    ui.label(RichText::new(err).color(ui.visuals().error_fg_color));
                }
                None => counting_ui(ui, "counting scales…"),
            },
            _ => {
                ui.label(
                    RichText::new("The scales have errors; they are not counted.")
                        .color(ui.visuals().warn_fg_color),
                );
            }
        });
    egui::CollapsingHeader::new("Experts")
        .id_salt("nv-table")
        .default_open(true)
        .show(ui, |ui| table_ui(ui, view, &id, set.experts, globals, e4));
    egui::CollapsingHeader::new("Layer × expert map")
        .id_salt("nv-heat")
        .default_open(true)
        .show(ui, |ui| heat_ui(ui, view, s, &b, i, commands));
}

fn waiting_ui(ui: &mut egui::Ui, s: &Session, what: &str) {
    if s.running() {
        counting_ui(ui, &format!("waiting for the audit's {what}…"));
    } else {
        ui.label(RichText::new(format!("no {what}: see the findings")).weak());
    }
}

fn counting_ui(ui: &mut egui::Ui, text: &str) {
    ui.horizontal(|ui| {
        ui.add(egui::Spinner::new());
        ui.label(RichText::new(text).weak());
    });
}

fn picker_ui(ui: &mut egui::Ui, view: &mut Nvfp4View, experts: usize) {
    if view.expert.is_some_and(|e| e >= experts) {
        view.expert = Some(experts - 1);
    }
    // Positions: 0 is "all", k + 1 is expert k.
    let pos = view.expert.map_or(0, |e| e + 1);
    let mut next = pos;
    if !ui.ctx().egui_wants_keyboard_input() {
        ui.input_mut(|i| {
            if i.consume_key(Modifiers::NONE, Key::OpenBracket) {
                next = next.saturating_sub(1);
            }
            if i.consume_key(Modifiers::NONE, Key::CloseBracket) {
                next = (next + 1).min(experts);
            }
        });
    }
    let text = |p: usize| match p {
        0 => "all experts".to_string(),
        p => format!("expert {}", p - 1),
    };
    ui.horizontal(|ui| {
        ui.label("Expert");
        if ui
            .small_button("◀")
            .on_hover_text("Previous expert ( [ )")
            .clicked()
        {
            next = next.saturating_sub(1);
        }
        egui::ComboBox::from_id_salt("nv-expert")
            .selected_text(text(pos))
            .width(110.0)
            .show_ui(ui, |ui| {
                for p in 0..=experts {
                    ui.selectable_value(&mut next, p, text(p));
                }
            })
            .response
            .on_hover_text("[ and ] step through the experts");
        if ui
            .small_button("▶")
            .on_hover_text("Next expert ( ] )")
            .clicked()
        {
            next = (next + 1).min(experts);
        }
        ui.label(RichText::new("[ / ] step").weak().small());
    });
    view.expert = next.checked_sub(1);
}

/// A fixed (no zoom or drag) plot whose x axis labels the integers that
/// are multiples of `step` with `label`, in a small font so that many fit.
fn fixed_plot(
    id: String,
    height: f32,
    step: f64,
    label: impl Fn(usize) -> String + 'static,
) -> Plot<'static> {
    let axis = egui_plot::AxisHints::new_x()
        .formatter(move |m, _| {
            let v = m.value.round();
            if (m.value - v).abs() < 1e-6 && v >= 0.0 {
                label(v as usize)
            } else {
                String::new()
            }
        })
        .label_spacing(12.0..=18.0)
        .tick_label_font(egui::FontId::proportional(10.0));
    Plot::new(id)
        .height(height)
        .allow_zoom(false)
        .allow_drag(false)
        .allow_scroll(false)
        .allow_boxed_zoom(false)
        .show_y(false)
        .x_grid_spacer(egui_plot::uniform_grid_spacer(move |_| {
            [step, step * 2.0, step * 4.0]
        }))
        .custom_x_axes(vec![axis])
}

/// A 1-2-5 step giving about ten labels over `span`.
fn nice_step(span: f64) -> f64 {
    let raw = (span / 10.0).max(1.0);
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|&s| s >= raw)
        .unwrap_or(10.0 * p)
}

fn globals_ui(ui: &mut egui::Ui, view: &mut Nvfp4View, id: &str, g: &[f64]) {
    let bad = g.iter().filter(|v| !(v.is_finite() && **v > 0.0)).count();
    let (lo, hi) = finite_range(g.iter().copied());
    ui.label(
        RichText::new(format!(
            "{} experts · min {} · max {}{}",
            g.len(),
            short_number(lo, false),
            short_number(hi, false),
            if bad > 0 {
                format!(" · {bad} not finite and > 0")
            } else {
                String::new()
            }
        ))
        .small(),
    );
    let err = ui.visuals().error_fg_color;
    let bars: Vec<Bar> = g
        .iter()
        .enumerate()
        .map(|(e, &v)| {
            let ok = v.is_finite() && v > 0.0;
            Bar::new(e as f64, if v.is_finite() { v } else { 0.0 })
                .width(0.8)
                .name(format!("expert {e}: {v:.6e}"))
                .fill(if !ok {
                    err
                } else if view.expert == Some(e) {
                    PICKED
                } else {
                    BAR
                })
        })
        .collect();
    let chart = BarChart::new("global scales", bars)
        .element_formatter(Box::new(|bar, _| format!("{}\n(click to pick)", bar.name)));
    let resp = fixed_plot(
        format!("{id}-globals"),
        110.0,
        nice_step(g.len() as f64),
        |e| e.to_string(),
    )
    .show(ui, |p| p.bar_chart(chart));
    view.globals_geom = Some(resp.transform);
    if resp.response.clicked()
        && let Some(pos) = resp.response.interact_pointer_pos()
    {
        let x = resp.transform.value_from_position(pos).x.round();
        if x >= 0.0 && (x as usize) < g.len() {
            view.expert = Some(x as usize);
        }
    }
}

fn codes_ui(ui: &mut egui::Ui, id: &str, h: &[u64], expert: Option<usize>) {
    let total: u64 = h.iter().sum();
    ui.label(
        RichText::new(format!(
            "{total} codes over {}",
            expert.map_or("all experts".to_string(), |e| format!("expert {e}"))
        ))
        .small(),
    );
    let t = total.max(1) as f64;
    let bars: Vec<Bar> = h
        .iter()
        .zip(E2M1_LABELS)
        .enumerate()
        .map(|(c, (&n, label))| {
            Bar::new(c as f64, n as f64)
                .width(0.8)
                .name(format!("code {c} = {label}"))
                .fill(BAR)
        })
        .collect();
    let chart = BarChart::new("codes", bars).element_formatter(Box::new(move |bar, _| {
        format!(
            "{}\n{} codes ({:.2}%)",
            bar.name,
            bar.value as u64,
            bar.value / t * 100.0
        )
    }));
    fixed_plot(format!("{id}-codes"), 140.0, 1.0, |c| {
        E2M1_LABELS.get(c).map_or(String::new(), |l| l.to_string())
    })
    .show(ui, |p| p.bar_chart(chart))
    .response
    .widget_info(|| {
        // The bars, for screen readers (and tests): the plot paints its text.
        let bars: Vec<String> = E2M1_LABELS
            .iter()
            .zip(h)
            .map(|(l, n)| format!("{l} {n}"))
            .collect();
        egui::WidgetInfo::labeled(
            egui::Role::Image,
            true,
            format!("E2M1 code counts: {}", bars.join(" · ")),
        )
    });
}

fn e4m3_ui(ui: &mut egui::Ui, id: &str, h: &[u64], expert: Option<usize>) {
    if h.len() != 256 {
        ui.label(
            RichText::new("the E4M3 histogram is malformed").color(ui.visuals().error_fg_color),
        );
        return;
    }
    let total: u64 = h.iter().sum();
    let nan = h[0x7f] + h[0xff];
    let warn = ui.visuals().warn_fg_color;
    ui.horizontal_wrapped(|ui| {
        ui.label(
            RichText::new(format!(
                "{total} scale bytes over {}",
                expert.map_or("all experts".to_string(), |e| format!("expert {e}"))
            ))
            .small(),
        );
        if nan > 0 {
            ui.label(
                RichText::new(format!("{nan} NaN (0x7F/0xFF)"))
                    .small()
                    .color(warn),
            );
        }
    });
    // Only the occupied bytes (and the NaN ones when present): real scales
    // fill a few dozen of the 256.
    let present = |b: &usize| h[*b] > 0;
    // One empty byte either side, without crossing into the other sign.
    let lo = (0..256).find(present).unwrap_or(0);
    let lo = if lo % 128 == 0 { lo } else { lo - 1 };
    let hi = (0..256).rev().find(present).unwrap_or(255);
    let hi = if hi % 128 == 127 { hi } else { hi + 1 };
    let t = total.max(1) as f64;
    let bars: Vec<Bar> = (lo..=hi)
        .map(|b| {
            let byte = b as u8;
            let nan = e4m3_is_nan(byte);
            Bar::new(b as f64, h[b] as f64)
                .width(0.9)
                .name(if nan {
                    format!("byte {b:#04x} = NaN")
                } else {
                    format!("byte {b:#04x} = {}", e4m3(byte))
                })
                .fill(if nan { warn } else { BAR })
        })
        .collect();
    let chart = BarChart::new("scales", bars).element_formatter(Box::new(move |bar, _| {
        format!(
            "{}\n{} scales ({:.2}%)",
            bar.name,
            bar.value as u64,
            bar.value / t * 100.0
        )
    }));
    fixed_plot(
        format!("{id}-e4m3"),
        120.0,
        nice_step((hi - lo) as f64),
        |b| match u8::try_from(b) {
            Ok(b) if e4m3_is_nan(b) => "NaN".into(),
            Ok(b) => short_number(f64::from(e4m3(b)), true),
            Err(_) => String::new(),
        },
    )
    .show(ui, |p| p.bar_chart(chart));
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

struct Row {
    expert: usize,
    cells: [Option<f64>; 5],
}

fn table_ui(
    ui: &mut egui::Ui,
    view: &mut Nvfp4View,
    id: &str,
    experts: usize,
    globals: Option<&[f64]>,
    e4: Option<&E4m3Stats>,
) {
    let rows: Vec<Row> = (0..experts)
        .map(|e| {
            let x = e4.and_then(|s| s.experts.get(e));
            Row {
                expert: e,
                cells: [
                    globals.and_then(|g| g.get(e)).copied(),
                    x.map(|x| x.mean),
                    x.map(|x| x.max),
                    x.map(|x| x.zero_share),
                    x.map(|x| x.nan as f64),
                ],
            }
        })
        .collect();
    // The worst of each column: global and mean farthest from their median,
    // max, zero share and NaN the largest (when above zero).
    let column = |c: usize| rows.iter().map(|r| r.cells[c]).collect::<Vec<_>>();
    // The largest, when it stands above the median (all equal: none).
    let largest = |c: usize| {
        let m = median(rows.iter().filter_map(|r| r.cells[c]).collect());
        rows.iter()
            .filter_map(|r| Some((r.expert, r.cells[c].filter(|v| *v > m.max(0.0))?)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(e, _)| e)
    };
    let worst = [
        most_extreme(&column(0), true),
        most_extreme(&column(1), true),
        largest(2),
        largest(3),
        largest(4),
    ];
    let sort = view.sort;
    let key = |r: &Row| {
        match sort {
            ExpertSort::Expert => Some(r.expert as f64),
            ExpertSort::Global => r.cells[0],
            ExpertSort::Mean => r.cells[1],
            ExpertSort::Max => r.cells[2],
            ExpertSort::Zero => r.cells[3],
            ExpertSort::Nan => r.cells[4],
        }
        .unwrap_or(f64::NAN)
    };
    let mut order: Vec<&Row> = rows.iter().collect();
    order.sort_by(|a, b| key(a).total_cmp(&key(b)));
    if !view.ascending {
        order.reverse();
    }
    let warn = ui.visuals().warn_fg_color;
    let row_h = ui.text_style_height(&egui::TextStyle::Body) + 4.0;
    let mut picked = None;
    let headers = [
        ("#", ExpertSort::Expert),
        ("global", ExpertSort::Global),
        ("mean", ExpertSort::Mean),
        ("max", ExpertSort::Max),
        ("zero", ExpertSort::Zero),
        ("NaN", ExpertSort::Nan),
    ];
    ui.push_id(format!("{id}-table"), |ui| {
        TableBuilder::new(ui)
            .striped(true)
            .sense(Sense::click())
            .max_scroll_height(200.0)
            .cell_layout(egui::Layout::left_to_right(egui::Align::Center))
            .column(Column::exact(36.0))
            .columns(Column::auto().at_least(48.0), 4)
            .column(Column::remainder().at_least(30.0))
            .header(row_h, |mut h| {
                for (label, col) in headers {
                    h.col(|ui| {
                        let arrow = match (view.sort == col, view.ascending) {
                            (false, _) => "",
                            (true, true) => " ⏶",
                            (true, false) => " ⏷",
                        };
                        if ui
                            .add(
                                egui::Button::new(
                                    RichText::new(format!("{label}{arrow}")).strong(),
                                )
                                .frame(false),
                            )
                            .on_hover_text(format!(
                                "Sort by {}",
                                if label == "#" { "expert" } else { label }
                            ))
                            .clicked()
                        {
                            if view.sort == col {
                                view.ascending = !view.ascending;
                            } else {
                                view.sort = col;
                                view.ascending = col == ExpertSort::Expert;
                            }
                        }
                    });
                }
            })
            .body(|body| {
                body.rows(row_h, order.len(), |mut row| {
                    let r = order[row.index()];
                    row.set_selected(view.expert == Some(r.expert));
                    row.col(|ui| {
                        ui.label(r.expert.to_string());
                    });
                    for (c, v) in r.cells.iter().enumerate() {
                        row.col(|ui| {
                            let text = match (c, v) {
                                (_, None) => "—".to_string(),
                                (3, Some(v)) => format!("{:.2}%", v * 100.0),
                                (4, Some(v)) => format!("{v}"),
                                (_, Some(v)) => short_number(*v, false),
                            };
                            let mut text = RichText::new(text).monospace();
                            if worst[c] == Some(r.expert) {
                                text = text.color(warn).strong();
                            }
                            ui.add(egui::Label::new(text).selectable(false))
                                .on_hover_text(if worst[c] == Some(r.expert) {
                                    "the most extreme of this column"
                                } else {
                                    "click to pick this expert"
                                });
                        });
                    }
                    if row.response().clicked() {
                        picked = Some(r.expert);
                    }
                });
            });
    });
    if let Some(e) = picked {
        view.expert = Some(e);
    }
}

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
            .and_then(Option::as_ref)
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

fn heat_ui(
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
