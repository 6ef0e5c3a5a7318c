//! `bundlescope hist DIR (--tensor NAME | --all) [--json]`: code, scale and
//! value distributions read straight from the payload. The bytes go through
//! the audit's own [`Scanner`], so `hist` and `audit` always agree.

mod text;

use std::path::PathBuf;

use anyhow::{Result, anyhow, bail};
use bundlescope::audit::scan::{ScanOutcome, Scanner};
use bundlescope::decode::peers::PeerVerdict;
use bundlescope::decode::stats::{CodeCounts, Quality, TensorStats};
use bundlescope::format::{Bundle, Layout, PackedKind, Payload, TensorInfo};
use bundlescope::report::Tool;
use bundlescope::util::text::{SHOWN_CHARS, shown};
use rayon::prelude::*;
use serde_json::{Value, json};

use super::common::{layout_of, open_bundle, resolve};
use text::{print_aggregates, print_ranking, print_tensor};

/// Arguments of `hist`.
#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["tensor", "all"])))]
pub struct Args {
    /// Bundle folder (or its manifest.json).
    pub dir: PathBuf,
    /// The tensor (or alias) to show.
    #[arg(long)]
    pub tensor: Option<String>,
    /// Every packed tensor, worst first, with per-precision totals.
    #[arg(long)]
    pub all: bool,
    /// Print JSON instead of tables and bars.
    #[arg(long)]
    pub json: bool,
    /// For a stacked NVFP4 weight: count one expert instead of all.
    #[arg(long)]
    pub expert: Option<usize>,
}

pub fn run(a: Args) -> Result<i32> {
    let bundle = open_bundle(&a.dir)?;
    match &a.tensor {
        Some(name) => {
            let index = resolve(&bundle, name)?;
            if matches!(bundle.tensor(index)?.layout, Some(Layout::Fp4 { .. })) {
                return super::nvfp4::hist(&bundle, index, a.expert, a.json);
            }
            if a.expert.is_some() {
                bail!("--expert applies to stacked NVFP4 expert weights only");
            }
            one(&bundle, index, a.json)
        }
        None => all(&bundle, &a),
    }
}

/// `--tensor NAME` on a tensor that is not a stacked NVFP4 weight.
fn one(bundle: &Bundle, index: usize, json_out: bool) -> Result<i32> {
    let t = bundle.tensor(index)?;
    layout_of(bundle, t)?;
    if let Some(Layout::Gguf { ty, .. }) = t.layout
        && !ty.decoded()
    {
        // Listed and size-checked by the audit; no codes or scales to count.
        let note = format!(
            "{} tensors are listed and size-checked, not decoded by bundlescope",
            ty.name()
        );
        if json_out {
            let o = json!({"tensor": t.name, "precision": ty.name(), "shape": t.shape,
                "ne": t.record["ne"], "decoded": false, "note": note});
            println!("{}", serde_json::to_string_pretty(&o)?);
        } else {
            println!(
                "{}\n  {} · {} · not decoded: {note}",
                t.name,
                ty.name(),
                t.shape_text()
            );
        }
        return Ok(super::EXIT_OK);
    }
    let payload = Payload::open(bundle);
    let out = scan(index, t, payload.tensor_bytes(index)?)?;
    warn_findings(&out);
    if json_out {
        println!(
            "{}",
            serde_json::to_string_pretty(&tensor_json(t, &out.stats))?
        );
    } else {
        print_tensor(t, &out.stats);
    }
    Ok(super::EXIT_OK)
}

/// Runs the audit's scanner over one tensor's bytes.
fn scan(index: usize, t: &TensorInfo, bytes: &[u8]) -> Result<ScanOutcome> {
    let mut s = Scanner::for_tensor(index, t)
        .ok_or_else(|| anyhow!("tensor {} cannot be scanned", t.name))?;
    s.feed(bytes);
    Ok(s.finish())
}

fn warn_findings(out: &ScanOutcome) {
    for f in &out.findings {
        let tensor = f.tensor.as_deref().unwrap_or("?");
        eprintln!(
            "bundlescope: {}: {}: {}",
            f.severity.as_str(),
            shown(tensor, SHOWN_CHARS),
            shown(&f.message, 4 * SHOWN_CHARS)
        );
    }
}

// ---------------------------------------------------------------------------
// JSON.

/// The JSON of one tensor: codes, scales and quality for a packed one, the
/// value summary for a dense one.
fn tensor_json(t: &TensorInfo, stats: &TensorStats) -> Value {
    let mut o = json!({"tensor": t.name, "precision": t.precision.as_str()});
    if let Some(g) = &stats.gguf {
        // GGUF: the shape in PyTorch order above, ggml's ne order here.
        o["shape"] = json!(t.shape);
        o["ne"] = t.record["ne"].clone();
        o["gguf"] = json!(g);
    }
    // MLX-LM weights have codes without scales (those are their own
    // tensor), and their U8 scales a distribution without codes.
    if stats.codes.is_some() || stats.scales.is_some() {
        if let Some(c) = &stats.codes {
            o["codes"] = json!({"bits": c.bits, "zero": c.zero, "counts": c.counts});
        }
        if let Some(s) = &stats.scales {
            o["scales"] = json!({"dtype": s.dtype, "count": s.count, "min": s.min, "max": s.max,
                "median": s.median, "p01": s.p01, "p99": s.p99, "bins": s.bins});
        }
        if let Some(q) = &stats.quality {
            o["stats"] = json!(q);
        }
    } else if let Some(v) = &stats.values {
        o["source_dtype"] = json!(t.source_dtype);
        o["values"] = json!(v);
    }
    o
}

/// Totals of one precision over the bundle's packed tensors.
struct Aggregate {
    /// The precision aggregated (`q3`, `q4`, `affine4`, `mxfp4`…).
    label: String,
    tensors: u64,
    codes: CodeCounts,
    entropy_sum: f64,
    clipping_sum: f64,
    suspicion_sum: f64,
    max_suspicion: f64,
    zero_groups: u64,
    groups: u64,
    outlier_rows: u64,
}

impl Aggregate {
    /// An empty aggregate of `label`, its code grid that of `like`.
    fn new(label: &str, like: &CodeCounts) -> Self {
        Self {
            label: label.to_string(),
            tensors: 0,
            codes: CodeCounts {
                counts: vec![0; like.counts.len()],
                ..like.clone()
            },
            entropy_sum: 0.0,
            clipping_sum: 0.0,
            suspicion_sum: 0.0,
            max_suspicion: 0.0,
            zero_groups: 0,
            groups: 0,
            outlier_rows: 0,
        }
    }

    fn add(&mut self, codes: &CodeCounts, q: &Quality) {
        self.tensors += 1;
        for (sum, n) in self.codes.counts.iter_mut().zip(&codes.counts) {
            *sum += n;
        }
        self.entropy_sum += q.entropy_bits;
        self.clipping_sum += q.clipping_share;
        self.suspicion_sum += q.suspicion;
        self.max_suspicion = self.max_suspicion.max(q.suspicion);
        self.zero_groups += q.zero_groups;
        self.groups += q.groups;
        self.outlier_rows += q.outlier_rows;
    }

    fn mean(&self, sum: f64) -> f64 {
        if self.tensors == 0 {
            f64::NAN
        } else {
            sum / self.tensors as f64
        }
    }

    fn json(&self) -> Value {
        let c = &self.codes;
        json!({
            "precision": self.label,
            "tensors": self.tensors,
            "codes": {"bits": c.bits, "zero": c.zero, "counts": c.counts},
            "entropy_bits": c.entropy_bits(),
            "mean_entropy_bits": self.mean(self.entropy_sum),
            "clipping_share": c.clipping_share(),
            "mean_clipping_share": self.mean(self.clipping_sum),
            "unused_levels": c.unused_levels(),
            "reserved_codes": c.reserved(),
            "zero_groups": self.zero_groups,
            "groups": self.groups,
            "outlier_rows": self.outlier_rows,
            "mean_suspicion": self.mean(self.suspicion_sum),
            "max_suspicion": self.max_suspicion,
        })
    }
}

// ---------------------------------------------------------------------------
// --all.

/// A scanned packed tensor of `--all`.
struct Ranked<'b> {
    t: &'b TensorInfo,
    stats: TensorStats,
    /// Its standing among its peers (the ranking's score and reason).
    verdict: PeerVerdict,
}

fn all(bundle: &Bundle, a: &Args) -> Result<i32> {
    let packed: Vec<(usize, &TensorInfo)> = bundle
        .tensors
        .iter()
        .enumerate()
        .filter(|(_, t)| {
            t.alias_of.is_none()
                && (t.precision.packed().is_some()
                    || matches!(
                        t.precision,
                        bundlescope::format::Precision::Mlx(..)
                            | bundlescope::format::Precision::Nvfp4
                    )
                    // GGUF's block-quantised types: ranked against their
                    // peers like the rest.
                    || matches!(t.precision,
                        bundlescope::format::Precision::Gguf(ty) if ty.decoded() && !ty.is_dense()))
        })
        .collect();
    let (ok, broken): (Vec<_>, Vec<_>) = packed.into_iter().partition(|(_, t)| t.layout.is_some());
    // Shared by the workers: each file is mapped once, by whoever needs it first.
    let payload = Payload::open(bundle);
    let scanned: Result<Vec<(usize, TensorStats)>> = ok
        .par_iter()
        .map(|&(i, t)| {
            let out = scan(i, t, payload.tensor_bytes(i)?)?;
            warn_findings(&out);
            Ok((i, out.stats))
        })
        .collect();
    // Peers judge each other: every scanned tensor's statistics by index,
    // and the byte-identical pairs (three small samples per tensor unless
    // two agree), then one verdict per tensor.
    let mut by_index: Vec<Option<Box<TensorStats>>> = vec![None; bundle.tensors.len()];
    for (i, st) in scanned? {
        by_index[i] = Some(Box::new(st));
    }
    // What the weights' companions give them (an MLX-LM module's scales, an
    // NVFP4 weight's scales and global scales): scanned too, then merged
    // as the audit's report merges them.
    let companions: Vec<(usize, &TensorInfo)> = bundle
        .tensors
        .iter()
        .enumerate()
        .filter(|(_, t)| match t.layout {
            Some(Layout::E4m3 { .. } | Layout::GlobalScale { .. } | Layout::MlxScales { .. }) => {
                true
            }
            Some(Layout::MlxParams { .. }) => t.name.ends_with(".scales"),
            _ => false,
        })
        .collect();
    let found: Vec<(usize, TensorStats)> = companions
        .par_iter()
        .filter_map(|&(i, t)| {
            let out = scan(i, t, payload.tensor_bytes(i).ok()?).ok()?;
            Some((i, out.stats))
        })
        .collect();
    for (i, st) in found {
        by_index[i] = Some(Box::new(st));
    }
    bundlescope::report::merge_companions(bundle, &mut by_index);
    let twins = bundlescope::audit::duplicates::twins(bundle, &payload);
    let mut verdicts = bundlescope::report::peers::verdicts(bundle, &by_index, &twins);
    let mut ranked: Vec<Ranked> = ok
        .iter()
        .filter_map(|&(i, t)| {
            Some(Ranked {
                t,
                stats: *by_index[i].take()?,
                verdict: verdicts[i].take().unwrap_or_default(),
            })
        })
        .collect();
    ranked.sort_by(|x, y| {
        y.verdict
            .score
            .total_cmp(&x.verdict.score)
            .then_with(|| x.t.name.cmp(&y.t.name))
    });
    let aggregates = aggregate(&ranked);
    for (_, t) in &broken {
        eprintln!(
            "bundlescope: skipped {}: its metadata is broken (`bundlescope audit` says why)",
            shown(&t.name, SHOWN_CHARS)
        );
    }
    if a.json {
        let out = json!({
            "tool": Tool::default(),
            "bundle": {"path": a.dir.display().to_string(), "format": bundle.format.name()},
            "tensors": ranked.iter().map(|r| {
                let mut o = tensor_json(r.t, &r.stats);
                o["peer_group"] = json!(r.verdict.peer_group);
                o["peers"] = json!(r.verdict.peers);
                o["z"] = json!(r.verdict.z);
                o["score"] = json!(r.verdict.score);
                o["reason"] = json!(r.verdict.reason);
                if let Some(e) = r.verdict.expert {
                    // A stacked tensor: its most deviant expert against the others.
                    o["expert"] = json!(e);
                    o["expert_z"] = json!(r.verdict.expert_z);
                }
                o
            }).collect::<Vec<_>>(),
            "aggregates": aggregates.iter().map(Aggregate::json).collect::<Vec<_>>(),
            "skipped": broken.iter().map(|(_, t)| json!({"tensor": t.name,
                "reason": "broken metadata"})).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print_ranking(&ranked);
        print_aggregates(&aggregates);
    }
    Ok(super::EXIT_OK)
}

fn aggregate(ranked: &[Ranked]) -> Vec<Aggregate> {
    // audio8's q3, q3_full8, q4 first, in that order; then MLX-LM's
    // precisions by name (affine2 … affine8, mxfp4, mxfp8, nvfp4).
    let order = |r: &Ranked| match r.t.precision.packed() {
        Some(PackedKind::Q3) => 0,
        Some(PackedKind::Q3Full8) => 1,
        Some(PackedKind::Q4) => 2,
        None => 3,
    };
    let mut by_kind: std::collections::BTreeMap<(u8, String), Aggregate> = Default::default();
    for r in ranked {
        let (Some(c), Some(q)) = (&r.stats.codes, &r.stats.quality) else {
            continue;
        };
        let label = r.t.precision.as_str();
        by_kind
            .entry((order(r), label.to_string()))
            .or_insert_with(|| Aggregate::new(label, c))
            .add(c, q);
    }
    by_kind.into_values().collect()
}
