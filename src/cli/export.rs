//! `bundlescope export DIR --tensor NAME --out FILE.npy`: one tensor as a
//! float32 `.npy` (format 1.0, little-endian, C order), packed tensors
//! dequantised, dense ones converted. It never writes inside the bundle.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use bundlescope::decode::dequant::{self, row_bytes, row_scale_bytes};
use bundlescope::format::{Layout, Payload};
use bundlescope::util::text::{SHOWN_CHARS, shown};

use super::common::{layout_of, open_bundle, refuse_inside_bundle, resolve};

/// Values converted per block: bounds the memory of exporting a tensor of
/// any size (4 MiB of f32) while keeping each parallel block worth splitting.
const BLOCK_VALUES: usize = 1 << 20;

/// Arguments of `export`.
#[derive(clap::Args)]
pub struct Args {
    /// Bundle folder (or its manifest.json).
    pub dir: PathBuf,
    /// The tensor (or alias) to export.
    #[arg(long)]
    pub tensor: String,
    /// The `.npy` file to write (outside the bundle folder).
    #[arg(long)]
    pub out: PathBuf,
    /// For a stacked NVFP4 weight: export one expert as `[out, in]`.
    #[arg(long)]
    pub expert: Option<usize>,
}

pub fn run(a: Args) -> Result<i32> {
    let bundle = open_bundle(&a.dir)?;
    let index = resolve(&bundle, &a.tensor)?;
    let t = bundle.tensor(index)?;
    let layout = layout_of(&bundle, t)?;
    refuse_inside_bundle(&a.dir, &a.out)?;
    if let Layout::Fp4 { .. } = layout {
        let shape = super::nvfp4::export(&bundle, index, a.expert, |shape, body| {
            write_atomically(&a.out, |w| {
                w.write_all(&npy_header(shape))?;
                body(w)
            })
        })?;
        println!(
            "wrote {}: {} as float32 {shape:?}",
            a.out.display(),
            shown(&t.name, SHOWN_CHARS)
        );
        return Ok(super::EXIT_OK);
    }
    if let Layout::MlxCodes { .. } = layout {
        let shape = super::mlxlm::export(&bundle, index, |shape, body| {
            write_atomically(&a.out, |w| {
                w.write_all(&npy_header(shape))?;
                body(w)
            })
        })?;
        println!(
            "wrote {}: {} as float32 {shape:?}",
            a.out.display(),
            shown(&t.name, SHOWN_CHARS)
        );
        return Ok(super::EXIT_OK);
    }
    if a.expert.is_some() {
        bail!("--expert applies to stacked NVFP4 expert weights only");
    }
    if let Layout::MlxScales { .. } = layout {
        bail!(
            "{} holds MLX group scales; export its module's .weight to get dequantised values",
            t.name
        );
    }
    if matches!(layout, Layout::E4m3 { .. } | Layout::GlobalScale { .. }) {
        bail!(
            "{} holds NVFP4 scales; export its .weight to get dequantised values",
            t.name
        );
    }
    let payload = Payload::open(&bundle);
    let bytes = payload.tensor_bytes(index)?;
    let shape = match layout {
        Layout::Packed { rows, cols, .. } => vec![rows, cols],
        // PyTorch order (ne reversed), as gguf-py's reader shapes it.
        Layout::Gguf { ty, .. } if !ty.decoded() => bail!(
            "{} is {}: listed and size-checked, not decoded by bundlescope",
            t.name,
            ty.name()
        ),
        Layout::Gguf { rows, cols, .. } => t.shape.clone().unwrap_or(vec![rows, cols]),
        // The metadata checks tie the shape to the count; fall back to flat if not.
        Layout::Dense { count, .. } | Layout::MlxParams { count, .. } => match &t.shape {
            Some(shape) if t.parameters() == Some(count) => shape.clone(),
            _ => vec![count],
        },
        _ => bail!("{} cannot be exported", t.name),
    };
    write_atomically(&a.out, |w| {
        w.write_all(&npy_header(&shape))?;
        write_values(layout, bytes, w)
    })?;
    println!(
        "wrote {}: {} as float32 [{}]",
        a.out.display(),
        shown(&t.name, SHOWN_CHARS),
        shape
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(super::EXIT_OK)
}

/// The NPY 1.0 header of a C-order little-endian float32 array, padded with
/// spaces to a multiple of 64 bytes as numpy writes it.
fn npy_header(shape: &[u64]) -> Vec<u8> {
    let dims = match shape {
        [one] => format!("({one},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut dict = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {dims}, }}");
    // magic (6) + version (2) + length (2) + dict + '\n' is a multiple of 64.
    let unpadded = 10 + dict.len() + 1;
    dict.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
    dict.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    // Shapes are at most a few dims of 20 digits: the header fits a u16.
    let len = u16::try_from(dict.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out
}

/// Writes the tensor's f32 values in blocks, so memory stays bounded.
fn write_values(layout: Layout, bytes: &[u8], w: &mut impl Write) -> Result<()> {
    let mut values = vec![0f32; BLOCK_VALUES];
    let mut out = Vec::with_capacity(BLOCK_VALUES * 4);
    match layout {
        Layout::Packed { kind, rows, cols } => {
            let (rows, cols) = (to_usize(rows)?, to_usize(cols)?);
            let (rb, sb) = (row_bytes(kind, cols), row_scale_bytes(cols));
            let codes_len = rows
                .checked_mul(rb)
                .ok_or_else(|| anyhow!("tensor too large"))?;
            let (codes, scales) = bytes
                .split_at_checked(codes_len)
                .ok_or_else(|| anyhow!("tensor bytes shorter than its codes"))?;
            let block_rows = (BLOCK_VALUES / cols).max(1);
            values.resize(block_rows * cols, 0.0);
            for r0 in (0..rows).step_by(block_rows) {
                let n = block_rows.min(rows - r0);
                let block = &mut values[..n * cols];
                let c = codes.get(r0 * rb..).unwrap_or_default();
                let s = scales.get(r0 * sb..).unwrap_or_default();
                dequant::dequantize_rows(kind, cols, c, s, block)?;
                put_f32(block, &mut out, w)?;
            }
        }
        Layout::Dense { dtype, count } | Layout::MlxParams { dtype, count } => {
            let size = dtype.size() as usize;
            let count = to_usize(count)?;
            for i0 in (0..count).step_by(BLOCK_VALUES) {
                let n = BLOCK_VALUES.min(count - i0);
                let src = bytes
                    .get(i0 * size..(i0 + n) * size)
                    .ok_or_else(|| anyhow!("tensor bytes shorter than its values"))?;
                let block = &mut values[..n];
                dequant::dense_to_f32(dtype, src, block)?;
                put_f32(block, &mut out, w)?;
            }
        }
        Layout::Gguf { ty, rows, cols } => {
            let (rows, cols) = (to_usize(rows)?, to_usize(cols)?);
            let row_bytes = cols / ty.block_size() as usize * ty.type_size() as usize;
            let block_rows = (BLOCK_VALUES / cols.max(1)).max(1);
            values.resize(block_rows * cols, 0.0);
            for r0 in (0..rows).step_by(block_rows) {
                let n = block_rows.min(rows - r0);
                let block = &mut values[..n * cols];
                let src = bytes
                    .get(r0 * row_bytes..(r0 + n) * row_bytes)
                    .ok_or_else(|| anyhow!("tensor bytes shorter than its rows"))?;
                bundlescope::decode::gguf::dequantize(ty, src, block)?;
                put_f32(block, &mut out, w)?;
            }
        }
        _ => bail!("not an exportable layout"),
    }
    Ok(())
}

fn to_usize(n: u64) -> Result<usize> {
    usize::try_from(n).map_err(|_| anyhow!("{n} does not fit this machine's address space"))
}

fn put_f32(values: &[f32], buf: &mut Vec<u8>, w: &mut impl Write) -> Result<()> {
    buf.clear();
    for v in values {
        buf.extend_from_slice(&v.to_le_bytes());
    }
    w.write_all(buf)?;
    Ok(())
}

/// Writes beside `path` under a temporary name and renames at the end, so
/// a failed export leaves no half-written file under the asked-for name.
fn write_atomically(path: &Path, f: impl FnOnce(&mut BufWriter<File>) -> Result<()>) -> Result<()> {
    let name = path
        .file_name()
        .ok_or_else(|| anyhow!("{} does not name a file", path.display()))?;
    let tmp = path.with_file_name(format!(
        ".{}.tmp-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let result = (|| {
        let file = File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        let mut w = BufWriter::with_capacity(1 << 20, file);
        f(&mut w)?;
        w.into_inner()
            .map_err(|e| anyhow!("writing {}: {}", tmp.display(), e.error()))?
            .sync_all()?;
        fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npy_headers_are_64_byte_aligned_and_numpy_shaped() {
        for shape in [vec![7u64], vec![256, 256], vec![256, 80, 3]] {
            let h = npy_header(&shape);
            assert_eq!(h.len() % 64, 0);
            assert_eq!(&h[..8], b"\x93NUMPY\x01\x00");
            assert_eq!(usize::from(u16::from_le_bytes([h[8], h[9]])), h.len() - 10);
            assert_eq!(h.last(), Some(&b'\n'));
        }
        let h = String::from_utf8_lossy(&npy_header(&[7])).into_owned();
        assert!(h.contains("'shape': (7,), }"));
    }
}
