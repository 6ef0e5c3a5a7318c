//! GGUF tensors against their Hugging Face source: llama-family names
//! mapped (`blk.N.attn_q` ↔ `model.layers.N.self_attn.q_proj`, …), and for
//! the `llama` architecture the row permutation llama.cpp's converter
//! applies to the Q and K projections undone (per head, the two halves of
//! the rotary dimension interleaved: GGUF row `h·D + 2i + j` is source row
//! `h·D + j·D/2 + i`). Unmapped architectures compare identical names.

use super::reference::{Checkpoint, Quality, Thresholds, quality};
use crate::format::PackedKind;
use crate::format::gguf::{GgmlType, Metadata, Value};

/// Architectures whose tensor names follow llama.cpp's llama-family table.
const MAPPED: &[&str] = &["llama", "mistral", "qwen2", "qwen3", "granite"];

/// Which rows of the source a GGUF tensor's rows are.
pub(super) enum Rows {
    /// Row for row.
    Same,
    /// Q or K of a llama model: `heads` heads of `rows / heads` rows,
    /// permuted by the converter.
    Permuted {
        /// Heads (`head_count` for Q, `head_count_kv` for K).
        heads: u64,
    },
}

/// The source name of GGUF tensor `name`, how its rows map, and whether
/// the architecture's names were mapped (false: compared by identical
/// name).
pub(super) fn source(meta: Option<&Metadata>, name: &str) -> (String, Rows, bool) {
    let arch = meta
        .and_then(|m| m.get("general.architecture"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if !MAPPED.contains(&arch) {
        return (name.to_string(), Rows::Same, false);
    }
    let count = |key: &str| {
        meta.and_then(|m| m.get(&format!("{arch}.attention.{key}")))
            .and_then(Value::as_u64)
    };
    let permute = |heads: Option<u64>| match (arch, heads) {
        ("llama", Some(h)) if h > 0 => Rows::Permuted { heads: h },
        _ => Rows::Same,
    };
    let top = match name {
        "token_embd.weight" => Some("model.embed_tokens.weight"),
        "output.weight" => Some("lm_head.weight"),
        "output_norm.weight" => Some("model.norm.weight"),
        _ => None,
    };
    if let Some(t) = top {
        return (t.to_string(), Rows::Same, true);
    }
    let Some(rest) = name.strip_prefix("blk.") else {
        return (name.to_string(), Rows::Same, true);
    };
    let Some((layer, part)) = rest.split_once('.') else {
        return (name.to_string(), Rows::Same, true);
    };
    let (hf, rows) = match part {
        "attn_q.weight" => ("self_attn.q_proj.weight", permute(count("head_count"))),
        "attn_k.weight" => (
            "self_attn.k_proj.weight",
            permute(count("head_count_kv").or(count("head_count"))),
        ),
        "attn_v.weight" => ("self_attn.v_proj.weight", Rows::Same),
        "attn_output.weight" => ("self_attn.o_proj.weight", Rows::Same),
        "attn_q.bias" => ("self_attn.q_proj.bias", Rows::Same),
        "attn_k.bias" => ("self_attn.k_proj.bias", Rows::Same),
        "attn_v.bias" => ("self_attn.v_proj.bias", Rows::Same),
        "attn_q_norm.weight" => ("self_attn.q_norm.weight", Rows::Same),
        "attn_k_norm.weight" => ("self_attn.k_norm.weight", Rows::Same),
        "attn_norm.weight" => ("input_layernorm.weight", Rows::Same),
        "ffn_norm.weight" => ("post_attention_layernorm.weight", Rows::Same),
        "ffn_gate.weight" => ("mlp.gate_proj.weight", Rows::Same),
        "ffn_up.weight" => ("mlp.up_proj.weight", Rows::Same),
        "ffn_down.weight" => ("mlp.down_proj.weight", Rows::Same),
        _ => return (name.to_string(), Rows::Same, true),
    };
    (format!("model.layers.{layer}.{hf}"), rows, true)
}

/// The source row of GGUF row `r` of a `rows`-row tensor.
pub(super) fn source_row(map: &Rows, rows: u64, r: u64) -> u64 {
    match *map {
        Rows::Same => r,
        Rows::Permuted { heads } => {
            let d = rows / heads;
            if d < 2 || !rows.is_multiple_of(heads) || !d.is_multiple_of(2) {
                return r;
            }
            let (h, k) = (r / d, r % d);
            let (i, j) = (k / 2, k % 2);
            h * d + j * (d / 2) + i
        }
    }
}

/// Bounds on the output and worst-group errors for a GGUF type, by the
/// width of its codes (the audio8 bounds at 3 and 4 bits, tightened by
/// about half per extra bit).
pub(super) fn thresholds(ty: GgmlType) -> Thresholds {
    let bits = crate::decode::gguf::code_format(ty).map_or(4, |(b, _)| b);
    let (output_rel_err, group_rel_err) = match bits {
        2 => (0.60, 1.0),
        3 => (0.45, 0.85),
        4 => (0.22, 0.55),
        5 => (0.12, 0.35),
        6 => (0.06, 0.20),
        _ => (0.02, 0.06),
    };
    Thresholds {
        output_rel_err,
        group_rel_err,
    }
}

/// The quality of the rows checked against their source rows `w`.
pub(super) fn judge(
    ty: GgmlType,
    wq: &[f32],
    w: &[f64],
    x: &[f64],
    batch: usize,
    cols: usize,
    ids: &[u64],
) -> Quality {
    // The measures do not depend on the kind passed; the bounds are set below.
    let mut q = quality(PackedKind::Q4, wq, w, x, batch, cols, ids);
    q.thresholds = thresholds(ty);
    q.pass = q.thresholds.pass(q.output_rel_err, q.worst_group_rel_err);
    q
}

/// Source rows of a GGUF tensor, as f64, or why not.
pub(super) fn rows(
    ckpt: &Checkpoint,
    source: &str,
    map: &Rows,
    shape: [u64; 2],
    ids: &[u64],
) -> Result<Vec<f64>, String> {
    let Some(src) = ckpt.tensor(source) else {
        return Err(format!("has no tensor {source}"));
    };
    if src.shape != shape {
        return Err(format!(
            "'s {source} in {} has shape {:?}; the GGUF tensor's is {shape:?}",
            src.file, src.shape
        ));
    }
    let mapped: Vec<u64> = ids.iter().map(|&r| source_row(map, shape[0], r)).collect();
    src.rows_f64(&mapped, shape[1] as usize)
        .map_err(|e| format!("'s {source} in {}: {e}", src.file))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// llama.cpp's permutation written as the converter does it: view the
    /// rows as [heads, 2, D/2] and swap the last two axes.
    fn permute(rows: u64, heads: u64) -> Vec<u64> {
        let d = rows / heads;
        let mut out = Vec::new();
        for h in 0..heads {
            for i in 0..d / 2 {
                for j in 0..2 {
                    out.push(h * d + j * (d / 2) + i);
                }
            }
        }
        out
    }

    #[test]
    fn the_permutation_is_undone_row_for_row() {
        for (rows, heads) in [(64, 4), (128, 8), (96, 3), (16, 1)] {
            let want = permute(rows, heads);
            let got: Vec<u64> = (0..rows)
                .map(|r| source_row(&Rows::Permuted { heads }, rows, r))
                .collect();
            assert_eq!(got, want, "{rows} rows, {heads} heads");
        }
    }
}
