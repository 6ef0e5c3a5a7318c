//! `export` on MLX-LM quantized weights: the module's codes, scales and
//! biases (found by name, in whichever shards) dequantised exactly as
//! `mx.dequantize` rounds them, all experts of a stacked module at once.

use std::io::Write;

use anyhow::{Result, anyhow};
use bundlescope::decode::mlxlm::module_of;
use bundlescope::format::{Bundle, Payload};

/// Rows dequantised per block (bounds memory for any tensor).
const BLOCK_VALUES: usize = 1 << 20;

/// Writes weight `index` as float32 in its logical shape `[..., out, in]`
/// through `write(shape, body)`; returns the shape.
pub fn export(
    bundle: &Bundle,
    index: usize,
    write: impl FnOnce(&[u64], &mut dyn FnMut(&mut dyn Write) -> Result<()>) -> Result<()>,
) -> Result<Vec<u64>> {
    let payload = Payload::open(bundle);
    let m = module_of(&payload, index).map_err(|e| anyhow!(e))?;
    let t = bundle.tensor(index)?;
    let shape = t
        .shape
        .clone()
        .unwrap_or_else(|| vec![m.experts as u64, m.rows as u64, m.cols as u64]);
    let block_rows = (BLOCK_VALUES / m.cols.max(1)).clamp(1, m.rows.max(1));
    let mut values = vec![0f32; block_rows * m.cols];
    let mut buf = Vec::with_capacity(values.len() * 4);
    let mut body = |w: &mut dyn Write| -> Result<()> {
        for e in 0..m.experts {
            for r0 in (0..m.rows).step_by(block_rows) {
                let n = block_rows.min(m.rows - r0);
                let block = &mut values[..n * m.cols];
                m.dequantize(e, r0..r0 + n, block)?;
                buf.clear();
                for v in block.iter() {
                    buf.extend_from_slice(&v.to_le_bytes());
                }
                w.write_all(&buf)?;
            }
        }
        Ok(())
    };
    write(&shape, &mut body)?;
    Ok(shape)
}
