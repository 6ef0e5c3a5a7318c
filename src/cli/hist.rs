//! `bundlescope hist DIR (--tensor NAME | --all) [--json]`: code, scale and
//! value distributions read straight from the payload. The bytes go through
//! the audit's own [`Scanner`], so `hist` and `audit` always agree.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::PathBuf;

use anyhow::{Context, Result, anyhow, bail};
use bundlescope::audit::scan::{ScanOutcome, Scanner};
use bundlescope::decode::stats::{Bin, CodeCounts, Quality, TensorStats};
use bundlescope::format::{self, Bundle, Layout, PackedKind, TensorInfo};
use bundlescope::report::Tool;
use memmap2::Mmap;
use rayon::prelude::*;
use serde_json::{Value, json};

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
    let bundle = match format::open(&a.dir) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("bundlescope: {e}");
            return Ok(super::EXIT_ERROR);
        }
    };
    match &a.tensor {
        Some(name) => {
            let index = resolve(&bundle, name)?;
            if matches!(tensor(&bundle, index)?.layout, Some(Layout::Fp4 { .. })) {
                return super::nvfp4::hist(&bundle, index, a.expert, a.json);
            }
            if a.expert.is_some() {
                bail!("--expert applies to stacked NVFP4 expert weights only");
            }
            one(&bundle, name, a.json)
        }
        None => all(&bundle, &a),
    }
}

fn one(bundle: &Bundle, name: &str, json_out: bool) -> Result<i32> {
    let index = resolve(bundle, name)?;
    let t = tensor(bundle, index)?;
    layout_of(t)?;
    let map = map_file(bundle, t.file)?;
    let out = scan(index, t, tensor_bytes(bundle, &map, t)?)?;
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

// ---------------------------------------------------------------------------
// Shared with `export`: finding a tensor and its bytes.

/// Index of the tensor `name` means, following aliases to their target.
/// An unknown name is an error that lists the closest names.
pub(super) fn resolve(bundle: &Bundle, name: &str) -> Result<usize> {
    let Some(mut index) = bundle.find(name) else {
        bail!("{}", unknown_name(bundle, name));
    };
    // Bounded, so an alias cycle cannot loop forever.
    for _ in 0..bundle.tensors.len() {
        let t = tensor(bundle, index)?;
        let Some(target) = &t.alias_of else {
            return Ok(index);
        };
        index = bundle.find(target).ok_or_else(|| {
            anyhow!(
                "alias {} points at {target:?}, which does not exist",
                t.name
            )
        })?;
    }
    bail!("alias {name} does not lead to a tensor (the aliases form a cycle)")
}

/// The tensor at `index`.
pub(super) fn tensor(bundle: &Bundle, index: usize) -> Result<&TensorInfo> {
    bundle
        .tensors
        .get(index)
        .ok_or_else(|| anyhow!("tensor index {index} is outside the index"))
}

/// The validated layout, or an error naming the tensor and what is wrong.
pub(super) fn layout_of(t: &TensorInfo) -> Result<Layout> {
    t.layout.ok_or_else(|| {
        anyhow!(
            "tensor {} has broken metadata (precision {:?}), so its bytes cannot be read; \
             `bundlescope audit` lists what is wrong",
            t.name,
            t.precision.as_str()
        )
    })
}

/// The payload file `file` of the bundle, mapped read-only.
pub(super) fn map_file(bundle: &Bundle, file: usize) -> Result<Mmap> {
    let info = bundle
        .files
        .get(file)
        .ok_or_else(|| anyhow!("payload file {file} is not in the bundle"))?;
    let path = &info.path;
    // Checked before opening: opening a FIFO would block until a writer came.
    let meta = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    if !meta.is_file() {
        bail!("{} is not a regular file", path.display());
    }
    let f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let len = f.metadata()?.len();
    if len == 0 {
        bail!("{} is empty", path.display());
    }
    // SAFETY: the map is read-only and lives no longer than this command.
    // Another process truncating the payload while we read it would fault
    // (SIGBUS); bundlescope never writes to a bundle, and `audit` (which
    // reads with plain reads) is the tool for a payload that may change.
    let map = unsafe { Mmap::map(&f) }.with_context(|| format!("mapping {}", path.display()))?;
    Ok(map)
}

/// The tensor's bytes in a mapped payload, checked against the file's length.
pub(super) fn tensor_bytes<'m>(bundle: &Bundle, map: &'m Mmap, t: &TensorInfo) -> Result<&'m [u8]> {
    let file = bundle
        .files
        .get(t.file)
        .map_or("payload", |f| f.name.as_str());
    let (start, end) = t
        .range()
        .ok_or_else(|| anyhow!("tensor {} has no byte range", t.name))?;
    let bytes = usize::try_from(start)
        .ok()
        .zip(usize::try_from(end).ok())
        .and_then(|(s, e)| map.get(s..e));
    bytes.ok_or_else(|| {
        anyhow!(
            "{file} is {} bytes long; tensor {} needs bytes {start}..{end}",
            map.len(),
            t.name
        )
    })
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
            "bundlescope: {}: {tensor}: {}",
            f.severity.as_str(),
            f.message
        );
    }
}

/// "no tensor named X; close names: ..." for a name that is not in the index.
fn unknown_name(bundle: &Bundle, name: &str) -> String {
    let mut scored: Vec<(usize, &str)> = bundle
        .tensors
        .iter()
        .map(|t| {
            let d = edit_distance(name, &t.name);
            // A name containing the query (or contained in it) is close whatever its length.
            let d = if t.name.contains(name) || name.contains(t.name.as_str()) {
                d.min(1)
            } else {
                d
            };
            (d, t.name.as_str())
        })
        .collect();
    scored.sort();
    let limit = (name.chars().count() / 3).max(3);
    let close: Vec<&str> = scored
        .iter()
        .filter(|(d, _)| *d <= limit)
        .take(5)
        .map(|(_, n)| *n)
        .collect();
    if close.is_empty() {
        format!("no tensor named {name:?}; `bundlescope list` shows every name")
    } else {
        format!(
            "no tensor named {name:?}; close names: {}",
            close.join(", ")
        )
    }
}

/// Levenshtein distance over chars, two rows of memory.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

// ---------------------------------------------------------------------------
// JSON.

/// The JSON of one tensor: codes, scales and quality for a packed one, the
/// value summary for a dense one.
fn tensor_json(t: &TensorInfo, stats: &TensorStats) -> Value {
    let mut o = json!({"tensor": t.name, "precision": t.precision.as_str()});
    if let (Some(c), Some(s), Some(q)) = (&stats.codes, &stats.scales, &stats.quality) {
        o["codes"] = json!({"bits": c.bits, "zero": c.zero, "counts": c.counts});
        o["scales"] = json!({"dtype": s.dtype, "count": s.count, "min": s.min, "max": s.max,
            "median": s.median, "p01": s.p01, "p99": s.p99, "bins": s.bins});
        o["stats"] = json!(q);
    } else if let Some(v) = &stats.values {
        o["source_dtype"] = json!(t.source_dtype);
        o["values"] = json!(v);
    }
    o
}

/// Totals of one precision over the bundle's packed tensors.
struct Aggregate {
    kind: PackedKind,
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
    fn new(kind: PackedKind) -> Self {
        Self {
            kind,
            tensors: 0,
            codes: CodeCounts {
                bits: kind.bits(),
                zero: kind.zero(),
                max_code: kind.max_code(),
                counts: vec![0; 1 << kind.bits()],
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
            "precision": self.kind.precision().as_str(),
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
    suspicion: f64,
}

fn all(bundle: &Bundle, a: &Args) -> Result<i32> {
    let packed: Vec<(usize, &TensorInfo)> = bundle
        .tensors
        .iter()
        .enumerate()
        .filter(|(_, t)| t.alias_of.is_none() && t.precision.packed().is_some())
        .collect();
    let (ok, broken): (Vec<_>, Vec<_>) = packed.into_iter().partition(|(_, t)| t.layout.is_some());
    let mut maps = BTreeMap::new();
    for (_, t) in &ok {
        if let std::collections::btree_map::Entry::Vacant(e) = maps.entry(t.file) {
            e.insert(map_file(bundle, t.file)?);
        }
    }
    let scanned: Result<Vec<Ranked>> = ok
        .par_iter()
        .map(|&(i, t)| {
            let map = maps
                .get(&t.file)
                .ok_or_else(|| anyhow!("payload of {} is not mapped", t.name))?;
            let out = scan(i, t, tensor_bytes(bundle, map, t)?)?;
            warn_findings(&out);
            let suspicion = out.stats.quality.as_ref().map_or(0.0, |q| q.suspicion);
            Ok(Ranked {
                t,
                stats: out.stats,
                suspicion,
            })
        })
        .collect();
    let mut ranked = scanned?;
    ranked.sort_by(|x, y| {
        y.suspicion
            .total_cmp(&x.suspicion)
            .then_with(|| x.t.name.cmp(&y.t.name))
    });
    let aggregates = aggregate(&ranked);
    for (_, t) in &broken {
        eprintln!(
            "bundlescope: skipped {}: its metadata is broken (`bundlescope audit` says why)",
            t.name
        );
    }
    if a.json {
        let out = json!({
            "tool": Tool::default(),
            "bundle": {"path": a.dir.display().to_string(), "format": bundle.format.name()},
            "tensors": ranked.iter().map(|r| tensor_json(r.t, &r.stats)).collect::<Vec<_>>(),
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
    let mut by_kind: Vec<Aggregate> = [PackedKind::Q3, PackedKind::Q3Full8, PackedKind::Q4]
        .into_iter()
        .map(Aggregate::new)
        .collect();
    for r in ranked {
        let (Some(kind), Some(c), Some(q)) =
            (r.t.precision.packed(), &r.stats.codes, &r.stats.quality)
        else {
            continue;
        };
        if let Some(agg) = by_kind.iter_mut().find(|g| g.kind == kind) {
            agg.add(c, q);
        }
    }
    by_kind.retain(|g| g.tensors > 0);
    by_kind
}

// ---------------------------------------------------------------------------
// Text.

const BAR_WIDTH: usize = 40;

/// A bar of `n` out of `max`, in eighths of a cell.
fn bar(n: u64, max: u64) -> String {
    const PARTS: [char; 8] = [' ', '▏', '▎', '▍', '▌', '▋', '▊', '▉'];
    if max == 0 {
        return String::new();
    }
    let eighths = (n as f64 / max as f64 * (BAR_WIDTH * 8) as f64).round() as usize;
    let (full, rest) = (eighths / 8, eighths % 8);
    let mut s = "█".repeat(full);
    if rest != 0 {
        s.push(PARTS[rest]);
    }
    if s.is_empty() && n > 0 {
        s.push('▏'); // a level that occurs at all must show
    }
    s
}

fn pct(x: f64) -> String {
    format!("{:.2}%", x * 100.0)
}

fn print_tensor(t: &TensorInfo, stats: &TensorStats) {
    println!("{}", t.name);
    if let (Some(c), Some(q)) = (&stats.codes, &stats.quality) {
        println!(
            "  {} · {} · {} codes of {} bits, level = code - {}",
            t.precision.as_str(),
            t.shape_text(),
            c.total(),
            c.bits,
            c.zero
        );
        print_codes(c);
        if let Some(s) = &stats.scales {
            println!(
                "\n  scales ({}, {}): min {:.4e}  p01 {:.4e}  median {:.4e}  p99 {:.4e}  max {:.4e}",
                s.dtype, s.count, s.min, s.p01, s.median, s.p99, s.max
            );
            print_bins(&s.bins, 1);
        }
        println!();
        print_quality(q, c.bits);
    } else if let Some(v) = &stats.values {
        println!(
            "  original · {} · {} · {} values",
            t.source_dtype.as_deref().unwrap_or("?"),
            t.shape_text(),
            v.count
        );
        println!(
            "  min {:.4e}  max {:.4e}  mean {:.4e}  std {:.4e}  non-finite {}",
            v.min, v.max, v.mean, v.std, v.nonfinite
        );
        // 64 linear bins read better as 16 on a terminal.
        print_bins(&v.bins, 4);
    }
}

fn print_codes(c: &CodeCounts) {
    let total = c.total().max(1);
    let max = c.counts.iter().copied().max().unwrap_or(0);
    println!(
        "\n  {:>4} {:>8} {:>12} {:>8}",
        "code", "level", "count", "share"
    );
    for (code, &n) in c.counts.iter().enumerate() {
        let level = if code > usize::from(c.max_code) {
            "reserved".to_string()
        } else {
            (code as i32 - c.zero).to_string()
        };
        println!(
            "  {code:>4} {level:>8} {n:>12} {:>8}  {}",
            pct(n as f64 / total as f64),
            bar(n, max)
        );
    }
}

/// Prints bins, merging every `merge` neighbours into one line.
fn print_bins(bins: &[Bin], merge: usize) {
    let merged: Vec<Bin> = bins
        .chunks(merge.max(1))
        .filter_map(|ch| {
            Some(Bin {
                lo: ch.first()?.lo,
                hi: ch.last()?.hi,
                count: ch.iter().map(|b| b.count).sum(),
            })
        })
        .collect();
    let max = merged.iter().map(|b| b.count).max().unwrap_or(0);
    for b in &merged {
        println!(
            "  [{:>11.4e}, {:>11.4e}) {:>10}  {}",
            b.lo,
            b.hi,
            b.count,
            bar(b.count, max)
        );
    }
}

fn print_quality(q: &Quality, bits: u32) {
    let unused = if q.unused_levels.is_empty() {
        "none".to_string()
    } else {
        q.unused_levels
            .iter()
            .map(i32::to_string)
            .collect::<Vec<_>>()
            .join(" ")
    };
    println!(
        "  entropy {:.3} of {bits} bits · clipping {} · unused levels {unused}",
        q.entropy_bits,
        pct(q.clipping_share)
    );
    println!(
        "  zero groups {} of {} · scale range {:.1}× · outlier rows {} · reserved codes {} · suspicion {:.2}",
        q.zero_groups,
        q.groups,
        q.scale_dynamic_range,
        q.outlier_rows,
        q.reserved_codes,
        q.suspicion
    );
}

fn print_ranking(ranked: &[Ranked]) {
    println!(
        "{:>4} {:>9} {:<9} {:>7} {:>8} {:>10} {:>7} {:>8}  name",
        "rank", "suspicion", "precision", "entropy", "clipping", "zero grps", "outlier", "reserved"
    );
    for (i, r) in ranked.iter().enumerate() {
        let Some(q) = &r.stats.quality else { continue };
        println!(
            "{:>4} {:>9.2} {:<9} {:>7.3} {:>8} {:>10} {:>7} {:>8}  {}",
            i + 1,
            q.suspicion,
            r.t.precision.as_str(),
            q.entropy_bits,
            pct(q.clipping_share),
            q.zero_groups,
            q.outlier_rows,
            q.reserved_codes,
            r.t.name
        );
    }
}

fn print_aggregates(aggs: &[Aggregate]) {
    for g in aggs {
        let c = &g.codes;
        println!(
            "\n{}: {} tensors, {} codes · entropy {:.3} bits (mean {:.3}) · clipping {} (mean {}) · zero groups {} of {} · outlier rows {} · reserved codes {} · suspicion mean {:.2}, max {:.2}",
            g.kind.precision().as_str(),
            g.tensors,
            c.total(),
            c.entropy_bits(),
            g.mean(g.entropy_sum),
            pct(c.clipping_share()),
            pct(g.mean(g.clipping_sum)),
            g.zero_groups,
            g.groups,
            g.outlier_rows,
            c.reserved(),
            g.mean(g.suspicion_sum),
            g.max_suspicion
        );
        print_codes(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_counts_single_edits() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("same", "same"), 0);
    }

    #[test]
    fn bars_scale_to_the_largest_count() {
        assert_eq!(bar(10, 10).chars().count(), BAR_WIDTH);
        assert_eq!(bar(0, 10), "");
        assert_eq!(bar(1, 1_000_000), "▏");
    }
}
