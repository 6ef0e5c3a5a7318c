//! `hist`'s text output: code tables with bars, scale and value bins,
//! quality lines, the `--all` ranking and per-precision aggregates.

use bundlescope::decode::stats::{Bin, CodeCounts, Quality, TensorStats};
use bundlescope::format::TensorInfo;
use bundlescope::util::text::{SHOWN_CHARS, shown};

use super::{Aggregate, Ranked};

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

/// One tensor: codes, scales and quality, or its value summary.
pub(super) fn print_tensor(t: &TensorInfo, stats: &TensorStats) {
    println!("{}", shown(&t.name, SHOWN_CHARS));
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
        if let Some(g) = &stats.gguf {
            for (what, h) in [
                ("sub-block scales", &g.sub_scales),
                ("sub-block mins", &g.sub_mins),
            ] {
                if let Some(h) = h {
                    println!("\n  {what} ({} bits, {} stored):", h.bits, h.total());
                    print_codes(h);
                }
            }
        }
        if let Some(s) = &stats.scales {
            println!(
                "\n  scales ({}, {}): min {:.4e}  p01 {:.4e}  median {:.4e}  p99 {:.4e}  max {:.4e}",
                s.dtype, s.count, s.min, s.p01, s.median, s.p99, s.max
            );
            print_bins(&s.bins, 1);
        }
        if let Some(m) = stats.gguf.as_ref().and_then(|g| g.mins.as_ref()) {
            println!(
                "\n  block mins |m|/|dmin| ({}, {}): min {:.4e}  p01 {:.4e}  median {:.4e}  p99 {:.4e}  max {:.4e}  zero or non-finite {}",
                m.dtype, m.count, m.min, m.p01, m.median, m.p99, m.max, m.invalid
            );
            print_bins(&m.bins, 1);
        }
        println!();
        print_quality(q, c.bits);
    } else if let Some(s) = &stats.scales {
        println!(
            "  {} · {} · scales ({}, {}): min {:.4e}  p01 {:.4e}  median {:.4e}  p99 {:.4e}  max {:.4e}  invalid {}",
            t.precision.as_str(),
            t.shape_text(),
            s.dtype,
            s.count,
            s.min,
            s.p01,
            s.median,
            s.p99,
            s.max,
            s.invalid
        );
        print_bins(&s.bins, 1);
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

/// `--all`'s table, worst first by the score against peers, each
/// tensor's reason under it.
pub(super) fn print_ranking(ranked: &[Ranked]) {
    println!(
        "{:>4} {:>6} {:<9} {:>7} {:>8} {:>10} {:>7} {:>8}  name",
        "rank", "score", "precision", "entropy", "clipping", "zero grps", "outlier", "reserved"
    );
    for (i, r) in ranked.iter().enumerate() {
        let Some(q) = &r.stats.quality else { continue };
        println!(
            "{:>4} {:>6.2} {:<9} {:>7.3} {:>8} {:>10} {:>7} {:>8}  {}",
            i + 1,
            r.verdict.score,
            r.t.precision.as_str(),
            q.entropy_bits,
            pct(q.clipping_share),
            q.zero_groups,
            q.outlier_rows,
            q.reserved_codes,
            shown(&r.t.name, SHOWN_CHARS)
        );
        if !r.verdict.reason.is_empty() {
            println!(
                "{:>11} {}",
                "why:",
                shown(&r.verdict.reason, 4 * SHOWN_CHARS)
            );
        }
    }
}

/// `--all`'s per-precision totals.
pub(super) fn print_aggregates(aggs: &[Aggregate]) {
    for g in aggs {
        let c = &g.codes;
        println!(
            "\n{}: {} tensors, {} codes · entropy {:.3} bits (mean {:.3}) · clipping {} (mean {}) · zero groups {} of {} · outlier rows {} · reserved codes {} · suspicion mean {:.2}, max {:.2}",
            g.label,
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
    fn bars_scale_to_the_largest_count() {
        assert_eq!(bar(10, 10).chars().count(), BAR_WIDTH);
        assert_eq!(bar(0, 10), "");
        assert_eq!(bar(1, 1_000_000), "▏");
    }
}
