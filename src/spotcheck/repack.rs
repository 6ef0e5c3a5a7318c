//! How the seed loader (`shared/seeds/weights.py`, `packed_record` and
//! `Packed`) feeds an audio8 packed tensor to MLX, replicated exactly.
//!
//! MLX's affine mode computes `scale * q + bias` with `q` the unsigned code
//! and packs `32 / bits` codes (3-bit: 32 codes in 3 words) LSB-first into
//! little-endian uint32 words, which is the payload's own row bit stream read
//! as `<u4`. The seed makes the stored codes fit that:
//!
//! | precision | stored code `c`, zero `z` | fed to MLX as `q` | `bias` |
//! |---|---|---|---|
//! | `q3` | 0..=6, z = 3 | `c + 1` (unpacked, shifted, re-packed) | `-4 * scale` |
//! | `q3_full8` | 0..=7, z = 4 | `c` (bytes unchanged) | `-4 * scale` |
//! | `q4` | 0..=14, z = 7 | `c + 1` (every byte `+= 0x11`, no carry as c <= 14) | `-8 * scale` |
//!
//! so `scale * q + bias = scale * (c - z)` in every case. Before any of that
//! the seed refuses a tensor with a code above the precision's maximum.
//!
//! The scales: the stored F16 scales cast to the input's dtype
//! (`self.scales.astype(inputs.dtype)`), and `bias = -offset * scale` in that
//! dtype. For float32 inputs the cast is exact; for bfloat16 it rounds to
//! nearest even, as MLX's `astype` does (and [`crate::decode::f32_to_bf16`]
//! does); `-offset * scale` is exact in both (a power of two). The seed's
//! `embedding` always casts to float32, dequantises, then casts the result
//! to the requested dtype.

use crate::decode::{bf16_to_f32, f16_to_f32, f32_to_bf16, pack_row, unpack_row};
use crate::format::PackedKind;

/// Which dtype the scales and biases are cast to (the input's dtype).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaDtype {
    /// float32 (exact).
    F32,
    /// bfloat16 (rounded to nearest even).
    Bf16,
}

/// The scales and biases as MLX receives them.
#[derive(Debug, Clone, PartialEq)]
pub enum Meta {
    /// float32 scales and biases.
    F32 {
        /// `[rows, groups]`.
        scales: Vec<f32>,
        /// `-offset * scale`.
        biases: Vec<f32>,
    },
    /// bfloat16 bit patterns.
    Bf16 {
        /// `[rows, groups]`.
        scales: Vec<u16>,
        /// `-offset * scale`.
        biases: Vec<u16>,
    },
}

/// A stored code above the precision's maximum: the seed refuses the tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "row {row} stores code {code} at column {col}, above the maximum {max}: the seed loader refuses this tensor"
)]
pub struct ReservedCode {
    /// Row (within the rows given).
    pub row: usize,
    /// Column.
    pub col: usize,
    /// The code.
    pub code: u8,
    /// The precision's maximum.
    pub max: u8,
}

/// MLX's power-of-two affine offset for `bits` (4 for 3-bit, 8 for 4-bit).
pub fn affine_offset(kind: PackedKind) -> i32 {
    if kind.bits() == 3 { 4 } else { 8 }
}

/// The packed codes of `rows` rows (the payload's bytes, `row_bytes` each)
/// as MLX's uint32 words, shifted as the seed shifts them.
pub fn words(kind: PackedKind, cols: usize, codes: &[u8]) -> Result<Vec<u32>, ReservedCode> {
    let bits = kind.bits();
    let row_bytes = cols * bits as usize / 8;
    let max = kind.max_code();
    let mut bytes = codes.to_vec();
    let mut unpacked = vec![0u8; cols];
    for (row, packed) in bytes.chunks_exact_mut(row_bytes.max(1)).enumerate() {
        // The row lengths are the caller's; a short row cannot occur here.
        let _ = unpack_row(packed, bits, &mut unpacked);
        if let Some((col, &code)) = unpacked.iter().enumerate().find(|(_, c)| **c > max) {
            return Err(ReservedCode {
                row,
                col,
                code,
                max,
            });
        }
        match kind {
            PackedKind::Q3 => {
                for c in unpacked.iter_mut() {
                    *c += 1;
                }
                pack_row(&unpacked, 3, packed);
            }
            PackedKind::Q4 => {
                for b in packed.iter_mut() {
                    *b += 0x11;
                }
            }
            PackedKind::Q3Full8 => {}
        }
    }
    Ok(bytes
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect())
}

/// The stored F16 scales (little-endian bytes) cast to `dtype`, with
/// `bias = -offset * scale`.
pub fn meta(kind: PackedKind, scales_f16: &[u8], dtype: MetaDtype) -> Meta {
    let offset = affine_offset(kind) as f32;
    let halves = scales_f16
        .chunks_exact(2)
        .map(|b| f16_to_f32(u16::from_le_bytes([b[0], b[1]])));
    match dtype {
        MetaDtype::F32 => {
            let scales: Vec<f32> = halves.collect();
            let biases = scales.iter().map(|s| -offset * s).collect();
            Meta::F32 { scales, biases }
        }
        MetaDtype::Bf16 => {
            let scales: Vec<u16> = halves.map(f32_to_bf16).collect();
            let biases = scales
                .iter()
                .map(|&s| f32_to_bf16(-offset * bf16_to_f32(s)))
                .collect();
            Meta::Bf16 { scales, biases }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::f32_to_f16;

    /// What MLX computes from the words: `scale * q + bias` with `q` read
    /// LSB-first out of the little-endian words.
    fn mlx_value(words: &[u32], bits: u32, j: usize, scale: f32, bias: f32) -> f32 {
        let bit = j * bits as usize;
        let lo = u64::from(words[bit / 32]);
        let hi = words.get(bit / 32 + 1).map_or(0, |&w| u64::from(w));
        let q = ((lo | hi << 32) >> (bit % 32)) & ((1 << bits) - 1);
        scale * q as f32 + bias
    }

    #[test]
    fn fed_values_equal_scale_times_code_minus_zero() {
        let cols = 128;
        for kind in [PackedKind::Q3, PackedKind::Q3Full8, PackedKind::Q4] {
            let codes: Vec<u8> = (0..cols)
                .map(|j| (j * 5 % (usize::from(kind.max_code()) + 1)) as u8)
                .collect();
            let mut packed = vec![0u8; cols * kind.bits() as usize / 8];
            pack_row(&codes, kind.bits(), &mut packed);
            let w = words(kind, cols, &packed).unwrap();
            let scales: Vec<u8> = [0.5f32, 0.013]
                .iter()
                .flat_map(|&s| f32_to_f16(s).to_le_bytes())
                .collect();
            let Meta::F32 { scales: s, biases } = meta(kind, &scales, MetaDtype::F32) else {
                unreachable!()
            };
            for (j, &c) in codes.iter().enumerate() {
                let got = mlx_value(&w, kind.bits(), j, s[j / 64], biases[j / 64]);
                let want = s[j / 64] * (i32::from(c) - kind.zero()) as f32;
                assert_eq!(got, want, "{kind:?} column {j}");
            }
        }
    }

    #[test]
    fn reserved_codes_are_refused_like_the_seed() {
        let mut packed = vec![0u8; 32];
        packed[3] = 0xf0; // code 7 at column 7: q4's reserved 15
        let e = words(PackedKind::Q4, 64, &packed).unwrap_err();
        assert_eq!((e.row, e.col, e.code), (0, 7, 15));
        let mut packed = vec![0u8; 24];
        pack_row(&[7; 64], 3, &mut packed);
        assert!(words(PackedKind::Q3, 64, &packed).is_err());
        assert!(words(PackedKind::Q3Full8, 64, &packed).is_ok());
    }

    #[test]
    fn bf16_meta_rounds_the_scale_and_keeps_bias_exact() {
        let h = f32_to_f16(0.0123);
        let Meta::Bf16 { scales, biases } = meta(PackedKind::Q4, &h.to_le_bytes(), MetaDtype::Bf16)
        else {
            unreachable!()
        };
        assert_eq!(scales[0], f32_to_bf16(f16_to_f32(h)));
        assert_eq!(bf16_to_f32(biases[0]), -8.0 * bf16_to_f32(scales[0]));
    }
}
