//! `hist` and `export` on mlx-nvfp4 expert weights: a stacked weight is
//! read with its `scales` and `global_scale` siblings (possibly in other
//! shards), counted over every expert or one (`--expert E`).

use std::io::Write;

use anyhow::{Result, anyhow, bail};
use bundlescope::decode::nvfp4::{E2M1_LABELS, Stacked};
use bundlescope::format::{Bundle, Layout, Payload};
use bundlescope::util::text::{SHOWN_CHARS, shown};
use serde_json::json;

/// The stacked view of weight `index` (its scales and global scales read
/// through `payload`, whichever shards they are in), checked for consistency.
pub fn stacked<'p>(payload: &'p Payload<&Bundle>, index: usize) -> Result<Stacked<'p>> {
    let bundle = payload.bundle();
    let t = bundle.tensor(index)?;
    let Some(Layout::Fp4 {
        experts,
        rows,
        cols,
    }) = t.layout
    else {
        bail!("{} is not a stacked NVFP4 weight", t.name);
    };
    let set = bundle.expert_siblings(index)?;
    let broken = |i: usize| bundle.tensor(i).map_or(true, |s| s.layout.is_none());
    if broken(set.scales) || broken(set.global_scale) {
        bail!(
            "the scales or global_scale of {} have broken metadata; `bundlescope audit` lists what is wrong",
            t.name
        );
    }
    let globals = payload
        .tensor_bytes(set.global_scale)?
        .chunks_exact(4)
        .map(|w| f32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect();
    let st = Stacked {
        words: payload.tensor_bytes(index)?,
        scales: payload.tensor_bytes(set.scales)?,
        globals,
        experts: usize::try_from(experts)?,
        rows: usize::try_from(rows)?,
        cols: usize::try_from(cols)?,
    };
    if !st.consistent() {
        bail!("{}: byte lengths disagree with its shape", t.name);
    }
    Ok(st)
}

fn check_expert(st: &Stacked<'_>, expert: Option<usize>) -> Result<()> {
    if let Some(e) = expert
        && e >= st.experts
    {
        bail!(
            "--expert {e} is out of range: the tensor stacks {} experts (0..{})",
            st.experts,
            st.experts - 1
        );
    }
    Ok(())
}

/// `hist --tensor W [--expert E]` on a stacked NVFP4 weight.
pub fn hist(bundle: &Bundle, index: usize, expert: Option<usize>, json_out: bool) -> Result<i32> {
    let payload = Payload::open(bundle);
    let st = stacked(&payload, index)?;
    check_expert(&st, expert)?;
    let counts = st.code_counts(expert);
    let name = &bundle.tensor(index)?.name;
    let globals: Vec<f32> = match expert {
        Some(e) => vec![st.globals[e]],
        None => st.globals.clone(),
    };
    if json_out {
        let v = json!({
            "tensor": name,
            "precision": "nvfp4",
            "experts": st.experts,
            "expert": expert,
            "codes": {"labels": E2M1_LABELS, "counts": counts},
            "global_scales": globals,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(super::EXIT_OK);
    }
    let total: u64 = counts.iter().sum::<u64>().max(1);
    let max = counts.iter().copied().max().unwrap_or(1).max(1);
    println!(
        "{}: {} experts × {}×{}; codes over {}",
        shown(name, SHOWN_CHARS),
        st.experts,
        st.rows,
        st.cols,
        expert.map_or("all experts".to_string(), |e| format!("expert {e}"))
    );
    let mut out = std::io::stdout().lock();
    for (label, &n) in E2M1_LABELS.iter().zip(&counts) {
        let width = (n as f64 / max as f64 * 40.0).round() as usize;
        writeln!(
            out,
            "  {label:>5} {n:>12} {:>7.3}% {}",
            n as f64 * 100.0 / total as f64,
            "█".repeat(width)
        )?;
    }
    let (lo, hi) = globals
        .iter()
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), &g| {
            (a.min(g), b.max(g))
        });
    writeln!(out, "  global scale: {lo} .. {hi}")?;
    Ok(super::EXIT_OK)
}

/// `export` of a stacked NVFP4 weight: `[E, out, in]` float32, or `[out, in]`
/// with `--expert`. Calls `emit(shape, writer_fn)`.
pub fn export(
    bundle: &Bundle,
    index: usize,
    expert: Option<usize>,
    write: impl FnOnce(&[u64], &mut dyn FnMut(&mut dyn Write) -> Result<()>) -> Result<()>,
) -> Result<Vec<u64>> {
    let payload = Payload::open(bundle);
    let st = stacked(&payload, index)?;
    check_expert(&st, expert)?;
    let (rows, cols) = (st.rows as u64, st.cols as u64);
    let shape = match expert {
        Some(_) => vec![rows, cols],
        None => vec![st.experts as u64, rows, cols],
    };
    let experts: Vec<usize> = match expert {
        Some(e) => vec![e],
        None => (0..st.experts).collect(),
    };
    let mut values = vec![0f32; st.rows * st.cols];
    let mut buf = Vec::with_capacity(values.len() * 4);
    write(&shape, &mut |w: &mut dyn Write| {
        for &e in &experts {
            st.dequantize(e, &mut values)
                .ok_or_else(|| anyhow!("expert {e} could not be decoded"))?;
            buf.clear();
            for v in &values {
                buf.extend_from_slice(&v.to_le_bytes());
            }
            w.write_all(&buf)?;
        }
        Ok(())
    })?;
    Ok(shape)
}
