//! Dequantisation to f32: packed codes with their F16 scales, and dense
//! BF16/F16/F32/F64/F8/integer/BOOL values (F8 exactly, F64 and the wide
//! integers rounded to nearest). Pure functions over borrowed bytes
//! writing into a caller's buffer, parallel over rows, no allocation per
//! element.
//!
//! The value of packed element `(r, j)` is `scale[r][j/64] * (code[r][j] - z)`,
//! computed in f32. Every such product is exact (an 11-bit scale mantissa
//! times a level of at most 4 bits), so this equals MLX's affine
//! `scale * q + bias` bit for bit, whichever way MLX rounds.

use rayon::prelude::*;

use super::{f8_to_f32, f64s_to_f32, halves_to_f32, ints_to_f32};
use crate::format::{DenseDtype, PackedKind};

/// Codes per scale group in every audio8 packed tensor.
pub const GROUP: usize = 64;

/// Dense values converted per parallel task: large enough that the task
/// overhead is noise, small enough to split a modest tensor over the cores.
const DENSE_TASK: usize = 16 * 1024;

/// Why a dequantisation could not run. Sizes are in bytes or elements, as
/// named, so a message says what was expected and what was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DequantError {
    /// `cols` is zero or not a multiple of the group size.
    #[error("{cols} columns is not a positive multiple of {GROUP}")]
    Columns {
        /// The column count given.
        cols: usize,
    },
    /// The output buffer is not a whole number of rows.
    #[error("output of {len} values is not a whole number of {cols}-column rows")]
    OutputRows {
        /// Length of the output buffer.
        len: usize,
        /// Columns per row.
        cols: usize,
    },
    /// The code bytes do not cover the rows asked for.
    #[error("codes: {need} bytes needed for {rows} rows, {have} present")]
    ShortCodes {
        /// Rows to decode.
        rows: usize,
        /// Bytes those rows need.
        need: usize,
        /// Bytes given.
        have: usize,
    },
    /// The scale bytes do not cover the rows asked for.
    #[error("scales: {need} bytes needed for {rows} rows, {have} present")]
    ShortScales {
        /// Rows to decode.
        rows: usize,
        /// Bytes those rows need.
        need: usize,
        /// Bytes given.
        have: usize,
    },
    /// A whole packed tensor's bytes are shorter than its codes and scales.
    #[error("packed tensor: {need} bytes needed, {have} present")]
    ShortTensor {
        /// Codes plus scales.
        need: usize,
        /// Bytes given.
        have: usize,
    },
    /// Dense input and output lengths disagree.
    #[error("dense {dtype}: {need} bytes needed for {values} values, {have} present")]
    ShortDense {
        /// Element type.
        dtype: &'static str,
        /// Values asked for (the output's length).
        values: usize,
        /// Bytes those values need.
        need: usize,
        /// Bytes given.
        have: usize,
    },
    /// A size does not fit in memory arithmetic.
    #[error("tensor of {rows}×{cols} is too large to address")]
    Overflow {
        /// Rows.
        rows: usize,
        /// Columns.
        cols: usize,
    },
}

/// Bytes of one packed row of `cols` codes.
pub fn row_bytes(kind: PackedKind, cols: usize) -> usize {
    cols / 8 * kind.bits() as usize
}

/// Bytes of one row's F16 scales.
pub fn row_scale_bytes(cols: usize) -> usize {
    cols / GROUP * 2
}

/// Dequantises `out.len() / cols` rows: `codes` holds their packed codes
/// (row-major) and `scales` their little-endian F16 scales. Extra input
/// bytes beyond those rows are ignored.
pub fn dequantize_rows(
    kind: PackedKind,
    cols: usize,
    codes: &[u8],
    scales: &[u8],
    out: &mut [f32],
) -> Result<(), DequantError> {
    if cols == 0 || !cols.is_multiple_of(GROUP) {
        return Err(DequantError::Columns { cols });
    }
    if !out.len().is_multiple_of(cols) {
        return Err(DequantError::OutputRows {
            len: out.len(),
            cols,
        });
    }
    let rows = out.len() / cols;
    let (rb, sb) = (row_bytes(kind, cols), row_scale_bytes(cols));
    let overflow = DequantError::Overflow { rows, cols };
    let need_codes = rows.checked_mul(rb).ok_or(overflow)?;
    let need_scales = rows.checked_mul(sb).ok_or(overflow)?;
    let codes = codes.get(..need_codes).ok_or(DequantError::ShortCodes {
        rows,
        need: need_codes,
        have: codes.len(),
    })?;
    let scales = scales.get(..need_scales).ok_or(DequantError::ShortScales {
        rows,
        need: need_scales,
        have: scales.len(),
    })?;
    out.par_chunks_mut(cols)
        .zip(codes.par_chunks(rb))
        .zip(scales.par_chunks(sb))
        .for_each(|((o, c), s)| dequantize_row(kind, c, s, o));
    Ok(())
}

/// Dequantises a whole packed tensor of `rows × cols` whose `bytes` are its
/// codes followed by its scales, as the payload stores them.
pub fn dequantize_packed(
    kind: PackedKind,
    rows: usize,
    cols: usize,
    bytes: &[u8],
    out: &mut [f32],
) -> Result<(), DequantError> {
    if cols == 0 || !cols.is_multiple_of(GROUP) {
        return Err(DequantError::Columns { cols });
    }
    let overflow = DequantError::Overflow { rows, cols };
    let codes_len = rows.checked_mul(row_bytes(kind, cols)).ok_or(overflow)?;
    let scales_len = rows.checked_mul(row_scale_bytes(cols)).ok_or(overflow)?;
    let need = codes_len.checked_add(scales_len).ok_or(overflow)?;
    if bytes.len() < need {
        return Err(DequantError::ShortTensor {
            need,
            have: bytes.len(),
        });
    }
    let values = rows.checked_mul(cols).ok_or(overflow)?;
    if out.len() != values {
        return Err(DequantError::OutputRows {
            len: out.len(),
            cols,
        });
    }
    let (codes, scales) = bytes.split_at(codes_len);
    dequantize_rows(kind, cols, codes, scales, out)
}

/// One row; the caller has sized every slice (whole groups throughout).
/// The scales are converted a block at a time through `half`'s slice
/// conversion (F16C where the CPU has it): one call per group would pay
/// its feature check 64 codes at a time.
fn dequantize_row(kind: PackedKind, codes: &[u8], scales: &[u8], out: &mut [f32]) {
    const BLOCK: usize = 256;
    let group_bytes = GROUP / 8 * kind.bits() as usize;
    let mut converted = [0f32; BLOCK];
    for ((o, c), s) in out
        .chunks_mut(GROUP * BLOCK)
        .zip(codes.chunks(group_bytes * BLOCK))
        .zip(scales.chunks(2 * BLOCK))
    {
        let f = &mut converted[..s.len() / 2];
        halves_to_f32(false, s, f);
        for ((o, c), &scale) in o
            .chunks_exact_mut(GROUP)
            .zip(c.chunks_exact(group_bytes))
            .zip(f.iter())
        {
            let lut = levels(kind, scale);
            match kind.bits() {
                4 => group4(c, &lut, o),
                _ => group3(c, &lut, o),
            }
        }
    }
}

/// The f32 value of every code `0..16` for one scale. A table per group is
/// both faster than a multiply per element and the same arithmetic.
#[inline]
fn levels(kind: PackedKind, scale: f32) -> [f32; 16] {
    let z = kind.zero();
    let mut lut = [0f32; 16];
    for (c, v) in (0i32..).zip(lut.iter_mut()) {
        *v = scale * (c - z) as f32;
    }
    lut
}

#[inline]
fn group4(codes: &[u8], lut: &[f32; 16], out: &mut [f32]) {
    for (pair, &b) in out.chunks_exact_mut(2).zip(codes) {
        pair[0] = lut[usize::from(b & 15)];
        pair[1] = lut[usize::from(b >> 4)];
    }
}

#[inline]
fn group3(codes: &[u8], lut: &[f32; 16], out: &mut [f32]) {
    // Eight 3-bit codes fill exactly three bytes, so whole units never straddle.
    for (eight, t) in out.chunks_exact_mut(8).zip(codes.chunks_exact(3)) {
        let w = u32::from(t[0]) | u32::from(t[1]) << 8 | u32::from(t[2]) << 16;
        for (k, v) in eight.iter_mut().enumerate() {
            *v = lut[((w >> (3 * k)) & 7) as usize];
        }
    }
}

/// Converts dense little-endian values to f32; `bytes` must hold exactly
/// `out.len()` values of `dtype`.
pub fn dense_to_f32(dtype: DenseDtype, bytes: &[u8], out: &mut [f32]) -> Result<(), DequantError> {
    let size = dtype.size() as usize;
    let need = out.len().checked_mul(size).ok_or(DequantError::Overflow {
        rows: out.len(),
        cols: 1,
    })?;
    if bytes.len() != need {
        return Err(DequantError::ShortDense {
            dtype: dtype.as_str(),
            values: out.len(),
            need,
            have: bytes.len(),
        });
    }
    out.par_chunks_mut(DENSE_TASK)
        .zip(bytes.par_chunks(DENSE_TASK * size))
        .for_each(|(o, b)| dense_chunk(dtype, b, o));
    Ok(())
}

/// The value of one dense element of `dtype` (its `dtype.size()`
/// little-endian bytes; NaN when `unit` is shorter), as [`dense_to_f32`]
/// converts it: for the odd value, where a slice's conversion would cost
/// more than it saves.
pub fn dense_value(dtype: DenseDtype, unit: &[u8]) -> f32 {
    let mut v = [f32::NAN];
    if let Some(unit) = unit.get(..dtype.size() as usize) {
        dense_chunk(dtype, unit, &mut v);
    }
    v[0]
}

fn dense_chunk(dtype: DenseDtype, bytes: &[u8], out: &mut [f32]) {
    match dtype {
        DenseDtype::Bf16 => halves_to_f32(true, bytes, out),
        DenseDtype::F16 => halves_to_f32(false, bytes, out),
        DenseDtype::F32 => {
            for (v, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
        DenseDtype::F64 => f64s_to_f32(bytes, out),
        DenseDtype::F8E4m3 => f8_to_f32(true, bytes, out),
        DenseDtype::F8E5m2 => f8_to_f32(false, bytes, out),
        DenseDtype::Int(t) => ints_to_f32(t, bytes, out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::{f16_to_f32, f32_to_bf16, f32_to_f16, pack_row};

    const KINDS: [PackedKind; 3] = [PackedKind::Q3, PackedKind::Q3Full8, PackedKind::Q4];

    /// Codes of a `rows × cols` tensor that use every valid level.
    fn codes_of(kind: PackedKind, rows: usize, cols: usize) -> Vec<u8> {
        let levels = usize::from(kind.max_code()) + 1;
        (0..rows * cols)
            .map(|i| ((i * 5 + i / 7) % levels) as u8)
            .collect()
    }

    /// Packs codes and scales the way the payload stores them.
    fn tensor(kind: PackedKind, cols: usize, codes: &[u8], scales: &[u16]) -> Vec<u8> {
        let rb = row_bytes(kind, cols);
        let mut out = vec![0u8; codes.len() / cols * rb];
        for (row, packed) in codes.chunks(cols).zip(out.chunks_mut(rb)) {
            pack_row(row, kind.bits(), packed);
        }
        for s in scales {
            out.extend_from_slice(&s.to_le_bytes());
        }
        out
    }

    #[test]
    fn packed_values_follow_the_formula() {
        let (rows, cols) = (3, 192);
        for kind in KINDS {
            let codes = codes_of(kind, rows, cols);
            let scales: Vec<u16> = (0..rows * cols / GROUP)
                .map(|g| f32_to_f16(0.01 * (g + 1) as f32))
                .collect();
            let bytes = tensor(kind, cols, &codes, &scales);
            let mut out = vec![f32::NAN; rows * cols];
            dequantize_packed(kind, rows, cols, &bytes, &mut out).unwrap();
            for (i, (&v, &c)) in out.iter().zip(&codes).enumerate() {
                let scale = f16_to_f32(scales[i / GROUP]);
                let want = scale * (i32::from(c) - kind.zero()) as f32;
                assert_eq!(v.to_bits(), want.to_bits(), "{kind:?} element {i}");
            }
        }
    }

    #[test]
    fn a_row_range_decodes_like_the_whole() {
        let (rows, cols) = (5, 128);
        let kind = PackedKind::Q3;
        let codes = codes_of(kind, rows, cols);
        let scales = vec![0x3c00u16; rows * cols / GROUP];
        let bytes = tensor(kind, cols, &codes, &scales);
        let mut whole = vec![0f32; rows * cols];
        dequantize_packed(kind, rows, cols, &bytes, &mut whole).unwrap();
        let (codes_part, scales_part) = bytes.split_at(rows * row_bytes(kind, cols));
        let mut part = vec![0f32; 2 * cols];
        dequantize_rows(
            kind,
            cols,
            &codes_part[2 * row_bytes(kind, cols)..],
            &scales_part[2 * row_scale_bytes(cols)..],
            &mut part,
        )
        .unwrap();
        assert_eq!(part, whole[2 * cols..4 * cols]);
    }

    #[test]
    fn short_inputs_are_errors_not_panics() {
        let kind = PackedKind::Q4;
        let mut out = vec![0f32; 2 * 64];
        let full = vec![0u8; 2 * 32 + 2 * 2];
        assert!(dequantize_packed(kind, 2, 64, &full, &mut out).is_ok());
        assert_eq!(
            dequantize_packed(kind, 2, 64, &full[..full.len() - 1], &mut out),
            Err(DequantError::ShortTensor { need: 68, have: 67 })
        );
        assert_eq!(
            dequantize_rows(kind, 64, &full[..63], &full[64..], &mut out),
            Err(DequantError::ShortCodes {
                rows: 2,
                need: 64,
                have: 63
            })
        );
        assert!(matches!(
            dequantize_rows(kind, 64, &full, &[0u8; 3], &mut out),
            Err(DequantError::ShortScales { .. })
        ));
        assert!(matches!(
            dequantize_rows(kind, 100, &full, &full, &mut out),
            Err(DequantError::Columns { cols: 100 })
        ));
        assert!(matches!(
            dequantize_rows(kind, 64, &full, &full, &mut out[..65]),
            Err(DequantError::OutputRows { .. })
        ));
        assert!(matches!(
            dense_to_f32(DenseDtype::F32, &[0u8; 7], &mut [0f32; 2]),
            Err(DequantError::ShortDense { need: 8, .. })
        ));
    }

    #[test]
    fn dense_values_convert_exactly() {
        let src = [1.0f32, -2.5, 0.0078125, 65504.0, -0.0];
        let mut out = [0f32; 5];
        let f32_bytes: Vec<u8> = src.iter().flat_map(|v| v.to_le_bytes()).collect();
        dense_to_f32(DenseDtype::F32, &f32_bytes, &mut out).unwrap();
        assert_eq!(out.map(f32::to_bits), src.map(f32::to_bits));
        let f16_bytes: Vec<u8> = src
            .iter()
            .flat_map(|&v| f32_to_f16(v).to_le_bytes())
            .collect();
        dense_to_f32(DenseDtype::F16, &f16_bytes, &mut out).unwrap();
        assert_eq!(out.map(f32::to_bits), src.map(f32::to_bits));
        let bf16_bytes: Vec<u8> = src
            .iter()
            .flat_map(|&v| f32_to_bf16(v).to_le_bytes())
            .collect();
        dense_to_f32(DenseDtype::Bf16, &bf16_bytes, &mut out).unwrap();
        assert_eq!(out[..3], src[..3]);
        let f64_bytes: Vec<u8> = src
            .iter()
            .flat_map(|&v| f64::from(v).to_le_bytes())
            .collect();
        dense_to_f32(DenseDtype::F64, &f64_bytes, &mut out).unwrap();
        assert_eq!(out.map(f32::to_bits), src.map(f32::to_bits));
        // 1, -2.5, 2^-7, 448 (E4M3's largest), -0; E5M2: 1, -2.5, 2^-7, 57344, -0.
        dense_to_f32(
            DenseDtype::F8E4m3,
            &[0x38, 0xc2, 0x04, 0x7e, 0x80],
            &mut out,
        )
        .unwrap();
        assert_eq!(
            out.map(f32::to_bits),
            [1.0f32, -2.5, 0.0078125, 448.0, -0.0].map(f32::to_bits)
        );
        dense_to_f32(
            DenseDtype::F8E5m2,
            &[0x3c, 0xc1, 0x20, 0x7b, 0x80],
            &mut out,
        )
        .unwrap();
        assert_eq!(
            out.map(f32::to_bits),
            [1.0f32, -2.5, 0.0078125, 57344.0, -0.0].map(f32::to_bits)
        );
        // A tensor larger than one parallel task keeps its order.
        let bytes: Vec<u8> = (0..3 * DENSE_TASK).map(|i| (i % 0x7e) as u8).collect();
        let mut many = vec![0f32; bytes.len()];
        dense_to_f32(DenseDtype::F8E4m3, &bytes, &mut many).unwrap();
        for (i, v) in many.iter().enumerate() {
            assert_eq!(*v, crate::decode::nvfp4::e4m3((i % 0x7e) as u8), "{i}");
        }
        // Integers and BOOL, over several parallel tasks: each value where
        // it was, BOOL's nonzero bytes 1.
        use crate::format::IntDtype;
        let ints: Vec<i16> = (0..3 * DENSE_TASK as i32)
            .map(|i| (i * 37 - 40_000) as i16)
            .collect();
        let bytes: Vec<u8> = ints.iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut many = vec![0f32; ints.len()];
        dense_to_f32(DenseDtype::Int(IntDtype::I16), &bytes, &mut many).unwrap();
        assert!(ints.iter().zip(&many).all(|(&i, &v)| f32::from(i) == v));
        dense_to_f32(
            DenseDtype::Int(IntDtype::Bool),
            &[0, 1, 2, 0xff, 0],
            &mut out,
        )
        .unwrap();
        assert_eq!(out, [0.0, 1.0, 1.0, 1.0, 0.0]);
    }
}
