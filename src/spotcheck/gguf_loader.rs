//! The GGUF loader check: bundlescope's reading of each Q4_0, Q4_1 and
//! Q8_0 tensor must equal what MLX's own GGUF loader (`mlx::core::load_gguf`,
//! the C++ function behind `mx.load("x.gguf")`) returns for it: the same
//! uint32 words (4 or 8 bits, groups of 32), the same float16 scales `d`,
//! and the same float16 biases (`−8d`, `m`, `−128d`, which MLX computes in
//! float16).
//!
//! MLX's loader is not a hardened parser: it reads the file through
//! gguflib, which opens it read-write, maps it writable, checks no length
//! or bound, reads `general.alignment` under a misspelt key (so only the
//! default 32 is right), dereferences a null pointer for a type number past
//! its table, and throws for the types it cannot convert; and it copies
//! every tensor of the file (quantized ones as words, scales and biases,
//! F32/F16 as they are, the rest dequantized to float16 through a float32
//! buffer). So it runs only on a file that
//! - opened without error findings (bundlescope's strict parser agrees it
//!   is well formed),
//! - has the default alignment of 32,
//! - holds only types MLX reads ([`MLX_READS`]),
//! - and whose private copy plus MLX's arrays stay under [`MAX_BYTES`],
//!
//! and on a private copy of its bytes (in the temporary folder, removed
//! afterwards), never on the bundle's file. Otherwise the check is skipped,
//! saying which rule stopped it. The file is loaded once per run.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use super::gguf::{affine, to_affine};
use super::{CHECK_GGUF_LOADER, Kind, SpotError, SpotResult, XDtype, reference};
use crate::decode::f16_to_f32;
use crate::finding::{Finding, Severity};
use crate::format::gguf::GgmlType;
use crate::format::{Bundle, Layout, Payload};
use crate::mlx::{self, GgufAffine};

/// The types MLX's GGUF loader reads: F32 and F16 as they are; Q4_0, Q4_1,
/// Q4_K and Q8_0 as affine words; Q2_K and Q6_K dequantized to float16.
/// Any other type makes it throw, or (past gguflib's table) crash.
pub const MLX_READS: [GgmlType; 8] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q8_0,
    GgmlType::Q2_K,
    GgmlType::Q4_K,
    GgmlType::Q6_K,
];

/// The most memory the loader check may take for one file: the private
/// copy of the file, every array MLX's loader makes from it, and the
/// checked tensors' arrays copied back.
pub const MAX_BYTES: u64 = 1 << 30;

/// Does tensor `t` get the loader check? Q4_0, Q4_1 and Q8_0: the types
/// whose affine form bundlescope also feeds `quantized_matmul`.
pub(super) fn checkable(layout: Option<Layout>) -> bool {
    matches!(
        layout,
        Some(Layout::Gguf {
            ty: GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q8_0,
            ..
        })
    )
}

/// MLX's loader's arrays of each file, or why it was not run; filled on
/// first use and kept for the rest of a run.
#[derive(Default)]
pub(super) struct Loaded {
    files: HashMap<usize, Result<HashMap<String, GgufAffine>, Refused>>,
}

/// Why a file has no loader arrays.
enum Refused {
    /// A bound of this module kept MLX's loader from running: a note.
    Bound(String),
    /// It ran and failed (MLX threw, or the private copy could not be
    /// written): the checks are skipped.
    Failed(String),
}

/// The bytes MLX's loader allocates for a tensor of `ty` with `n` elements
/// (`stored` bytes in the file), and for Q4_0/Q4_1/Q8_0 the copy the
/// bridge hands back beside them.
fn mlx_bytes(ty: GgmlType, n: u64, stored: u64) -> u64 {
    match ty {
        GgmlType::F32 | GgmlType::F16 => stored,
        GgmlType::Q4_K => n / 2 + n / 32 * 4,
        GgmlType::Q4_0 | GgmlType::Q4_1 => 2 * (n / 2 + n / 32 * 4),
        GgmlType::Q8_0 => 2 * (n + n / 32 * 4),
        // gguf_tensor_to_f16: a float32 buffer, a float16 one, then MLX's copy.
        _ => n.saturating_mul(8),
    }
}

/// Why MLX's loader may not run on file `file` of `bundle`, or `None`.
pub(super) fn refusal(bundle: &Bundle, file: usize) -> Option<String> {
    refusal_within(bundle, file, MAX_BYTES)
}

/// [`refusal`] with a memory bound of `max_bytes`.
fn refusal_within(bundle: &Bundle, file: usize, max_bytes: u64) -> Option<String> {
    if bundle
        .findings
        .iter()
        .any(|f| f.severity == Severity::Error)
    {
        return Some(
            "the file has error findings, and MLX's loader (gguflib) reads without bounds checks"
                .into(),
        );
    }
    let alignment = bundle.provenance.gguf.as_ref().map_or(32, |m| m.alignment);
    if alignment != 32 {
        return Some(format!(
            "general.alignment is {alignment}; MLX's loader (gguflib) reads only the default 32 right"
        ));
    }
    let name = bundle.files.get(file).map(|f| f.name.as_str())?;
    let size = std::fs::metadata(&bundle.files[file].path).map_or(0, |m| m.len());
    let mut total = size;
    for t in bundle.tensors.iter().filter(|t| t.file == file) {
        let Some(Layout::Gguf { ty, rows, cols }) = t.layout else {
            return Some(format!(
                "tensor {} has no validated layout, and MLX's loader would read it all the same",
                t.name
            ));
        };
        if !MLX_READS.contains(&ty) {
            return Some(format!(
                "{name} holds {} tensors ({}); MLX's loader reads only F32, F16, Q4_0, Q4_1, Q8_0, Q2_K, Q4_K and Q6_K, and throws or crashes on the rest",
                ty.name(),
                t.name
            ));
        }
        let n = rows.saturating_mul(cols);
        total = total.saturating_add(mlx_bytes(ty, n, t.bytes.unwrap_or(0)));
    }
    (total > max_bytes).then(|| {
        format!(
            "MLX's loader copies every tensor of {name}: about {} MiB with this check's private copy of the file, over the {} MiB it may take",
            total.div_ceil(1 << 20),
            max_bytes >> 20
        )
    })
}

/// A private copy of a payload file, removed when dropped.
struct PrivateCopy(PathBuf);

impl Drop for PrivateCopy {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn private_copy(bytes: &[u8]) -> std::io::Result<PrivateCopy> {
    static N: AtomicU64 = AtomicU64::new(0);
    let path = std::env::temp_dir().join(format!(
        "bundlescope-mlx-load-{}-{}.gguf",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut f = options.open(&path)?;
    let copy = PrivateCopy(path);
    f.write_all(bytes)?;
    f.sync_all()?;
    Ok(copy)
}

/// Runs MLX's loader on a private copy of file `file`, for every tensor of
/// it that gets the check.
fn load(payload: &Payload<&Bundle>, file: usize) -> Result<HashMap<String, GgufAffine>, Refused> {
    let bundle = payload.bundle();
    if let Some(why) = refusal(bundle, file) {
        return Err(Refused::Bound(why));
    }
    let names: Vec<String> = bundle
        .tensors
        .iter()
        .filter(|t| t.file == file && checkable(t.layout))
        .map(|t| t.name.clone())
        .collect();
    let bytes = payload
        .file_bytes(file, names.first().map_or("", String::as_str))
        .map_err(|e| Refused::Failed(e.to_string()))?;
    let copy = private_copy(bytes)
        .map_err(|e| Refused::Failed(format!("could not write a private copy for it: {e}")))?;
    let got = mlx::load_gguf_affine(&copy.0, &names).map_err(|e| Refused::Failed(e.to_string()))?;
    Ok(got.into_iter().map(|t| (t.name.clone(), t)).collect())
}

/// The first element where two readings differ: which array, its index,
/// bundlescope's value and MLX's, as text.
fn first_difference(
    ours: (&[u32], &[f32], &[f32]),
    theirs: &GgufAffine,
    words_per_row: usize,
    codes_per_word: usize,
) -> Option<(usize, String)> {
    let groups_per_row = (words_per_row * codes_per_word / 32).max(1);
    let mut count = 0usize;
    let mut first = None;
    for (i, (&a, &b)) in ours.0.iter().zip(&theirs.words).enumerate() {
        if a != b {
            count += 1;
            first.get_or_insert_with(|| {
                format!(
                    "weight row {} word {} (group {}): bundlescope {a:#010x}, MLX {b:#010x}",
                    i / words_per_row,
                    i % words_per_row,
                    i % words_per_row * codes_per_word / 32
                )
            });
        }
    }
    for (what, o, t) in [
        ("scales", ours.1, &theirs.scales),
        ("biases", ours.2, &theirs.biases),
    ] {
        for (i, (&a, &b)) in o.iter().zip(t).enumerate() {
            let b = f16_to_f32(b);
            if a.to_bits() != b.to_bits() {
                count += 1;
                first.get_or_insert_with(|| {
                    let hint = if what == "biases" && b.is_infinite() && a.is_finite() {
                        " (MLX's float16 bias overflows: it computes it in float16)"
                    } else {
                        ""
                    };
                    format!(
                        "{what} row {} group {}: bundlescope {a:e}, MLX {b:e}{hint}",
                        i / groups_per_row,
                        i % groups_per_row
                    )
                });
            }
        }
    }
    first.map(|f| (count, f))
}

/// The loader check of GGUF tensor `index`.
pub(super) fn check(
    payload: &Payload<&Bundle>,
    index: usize,
    loaded: &mut Loaded,
) -> Result<SpotResult, SpotError> {
    let t = payload.bundle().tensor(index)?;
    let not = |reason: String| SpotError::Tensor {
        tensor: t.name.clone(),
        reason,
    };
    let Some(Layout::Gguf { ty, rows, cols }) = t.layout.filter(|_| checkable(t.layout)) else {
        return Err(not("not a Q4_0, Q4_1 or Q8_0 GGUF tensor".into()));
    };
    let Some((bits, bias)) = affine(ty) else {
        return Err(not("not a Q4_0, Q4_1 or Q8_0 GGUF tensor".into()));
    };
    let started = Instant::now();
    let file = t.file;
    let got = match loaded
        .files
        .entry(file)
        .or_insert_with(|| load(payload, file))
    {
        Ok(got) => got,
        Err(Refused::Bound(why)) => {
            return Err(SpotError::LoaderNotRun {
                tensor: t.name.clone(),
                reason: why.clone(),
            });
        }
        Err(Refused::Failed(why)) => {
            return Err(not(format!("MLX's GGUF loader failed: {why}")));
        }
    };
    let time_s = started.elapsed().as_secs_f64();
    let theirs = got.get(&t.name).filter(|a| a.found).ok_or_else(|| {
        not("MLX's GGUF loader returned no weight, scales and biases for it".into())
    })?;
    let (rows, cols) = (rows as usize, cols as usize);
    let bytes = payload.tensor_bytes(index)?;
    let started = Instant::now();
    let (words, scales, biases) = to_affine(ty, bits, bias, bytes);
    let words_per_row = cols * bits as usize / 32;
    let mut findings = Vec::new();
    let lengths = (words.len(), scales.len(), biases.len());
    let theirs_lengths = (theirs.words.len(), theirs.scales.len(), theirs.biases.len());
    let difference = if lengths != theirs_lengths {
        Some((
            1,
            format!(
                "bundlescope reads {lengths:?} (words, scales, biases), MLX's loader returned {theirs_lengths:?} (shape {:?})",
                theirs.shape
            ),
        ))
    } else {
        first_difference(
            (&words, &scales, &biases),
            theirs,
            words_per_row,
            32 / bits as usize,
        )
    };
    // Both readings dequantized (scale · code + bias, in f64), for the
    // size of a difference; equal arrays are an error of exactly 0.
    let dequant = |w: &[u32], s: &dyn Fn(usize) -> f64, b: &dyn Fn(usize) -> f64| -> Vec<f64> {
        let per = 32 / bits as usize;
        let mask = (1u32 << bits) - 1;
        (0..w.len() * per)
            .map(|e| {
                let q = (w[e / per] >> (bits as usize * (e % per))) & mask;
                s(e / 32) * f64::from(q) + b(e / 32)
            })
            .collect()
    };
    let a = if lengths == theirs_lengths && difference.is_some() {
        let ours = dequant(&words, &|g| f64::from(scales[g]), &|g| f64::from(biases[g]));
        let mlx_w = dequant(
            &theirs.words,
            &|g| f64::from(f16_to_f32(theirs.scales[g])),
            &|g| f64::from(f16_to_f32(theirs.biases[g])),
        );
        let mlx_f32: Vec<f32> = mlx_w.iter().map(|&v| v as f32).collect();
        reference::agreement(&mlx_f32, &ours)
    } else if difference.is_some() {
        reference::agreement(&[], &[1.0])
    } else {
        reference::Agreement {
            rel_err: 0.0,
            max_abs_err: 0.0,
            cosine: 1.0,
        }
    };
    let ref_time_s = started.elapsed().as_secs_f64();
    let pass = difference.is_none();
    if let Some((count, first)) = &difference {
        findings.push(
            Finding::error(
                CHECK_GGUF_LOADER,
                format!(
                    "MLX's GGUF loader (load_gguf) reads {} differently from bundlescope: {count} element(s) of its words, scales and biases differ; the first: {first}",
                    t.name
                ),
            )
            .tensor(t.name.clone()),
        );
    }
    Ok(SpotResult {
        tensor: t.name.clone(),
        kind: Kind::Loader,
        expert: None,
        mlx_op: "load_gguf".into(),
        precision: ty.name().to_string(),
        device: "cpu".into(),
        dtype: XDtype::F32,
        batch: 0,
        shape: [rows as u64, cols as u64],
        rows_checked: rows,
        rel_err: a.rel_err,
        max_abs_err: a.max_abs_err,
        cosine: a.cosine,
        time_s,
        gflops: None,
        ref_time_s,
        ref_gflops: None,
        tolerance: 0.0,
        mlx_pass: pass,
        reference: None,
        pass,
        findings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::gguf as sg;

    fn one_file(tensors: &[sg::Tensor]) -> (tempfile::TempDir, Bundle) {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("m.gguf");
        std::fs::write(&file, sg::encode(&sg::sample_kvs(3), tensors, 32)).unwrap();
        let bundle = crate::format::open(&file).unwrap();
        (tmp, bundle)
    }

    fn tensor(name: &str, ty: GgmlType, rows: u64) -> sg::Tensor {
        let mut rng = crate::sample::Rng::new(1);
        let blocks = (rows * 256 / ty.block_size()) as usize;
        sg::Tensor {
            name: name.into(),
            ty,
            ne: vec![256, rows],
            data: sg::random_blocks(ty, blocks, &mut rng),
        }
    }

    #[test]
    fn the_memory_bound_counts_the_copy_and_mlx_arrays() {
        let (_tmp, b) = one_file(&[
            tensor("a.weight", GgmlType::Q8_0, 64),
            tensor("b.weight", GgmlType::Q6_K, 64),
        ]);
        let file_len = std::fs::metadata(&b.files[0].path).unwrap().len();
        let n = 64 * 256;
        // Q8_0: words and scales/biases in MLX and in the copy handed back;
        // Q6_K: dequantized to float16 through a float32 buffer.
        let need = file_len + 2 * (n + n / 32 * 4) + 8 * n;
        assert_eq!(refusal_within(&b, 0, need), None);
        let why = refusal_within(&b, 0, need - 1).expect("over the bound");
        assert!(why.contains("copies every tensor of m.gguf"), "{why}");
    }

    #[test]
    fn types_mlx_cannot_read_keep_its_loader_off() {
        let (_tmp, b) = one_file(&[
            tensor("a.weight", GgmlType::Q4_0, 4),
            tensor("b.weight", GgmlType::Q5_K, 4),
        ]);
        let why = refusal(&b, 0).expect("Q5_K");
        assert!(why.contains("holds Q5_K tensors (b.weight)"), "{why}");
        let (_tmp, b) = one_file(&[tensor("a.weight", GgmlType::Q4_0, 4)]);
        assert_eq!(refusal(&b, 0), None);
    }
}
