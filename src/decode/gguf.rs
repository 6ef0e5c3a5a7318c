//! GGUF blocks → codes, sub-block scales and values. The arithmetic follows
//! gguf-py's `gguf.quants` operation by operation in f32 (no fused
//! multiply-adds), so dequantised values are bit-identical to its
//! `dequantize`; the layouts are those of llama.cpp's `ggml-common.h`.

use super::{bf16_to_f32, f16_to_f32};
use crate::format::gguf::GgmlType;

/// Largest block (elements) of a decoded type.
pub const MAX_BLOCK: usize = 256;

/// E2M1 values doubled, as ggml's `kvalues_mxfp4`.
const KVALUES: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// How a type's codes are read: bits per code and the zero point (level =
/// code − zero; 0 for affine types and the FP4 types, whose nibbles are
/// E2M1 codes).
pub fn code_format(ty: GgmlType) -> Option<(u32, i32)> {
    use GgmlType as T;
    Some(match ty {
        T::Q4_0 => (4, 8),
        T::Q4_1 | T::Q4_K | T::MXFP4 | T::NVFP4 => (4, 0),
        T::Q5_0 => (5, 16),
        T::Q5_1 | T::Q5_K => (5, 0),
        T::Q8_0 | T::Q8_K => (8, 128),
        T::Q2_K => (2, 0),
        T::Q3_K => (3, 4),
        T::Q6_K => (6, 32),
        _ => return None,
    })
}

/// The sub-block scales a type stores: bits per scale, zero point, and
/// whether it also stores sub-block mins of the same width.
pub fn sub_scale_format(ty: GgmlType) -> Option<(u32, i32, bool)> {
    use GgmlType as T;
    Some(match ty {
        T::Q2_K => (4, 0, true),
        T::Q3_K => (6, 32, false),
        T::Q4_K | T::Q5_K => (6, 0, true),
        T::Q6_K => (8, 128, false),
        // The block scale bytes themselves: E8M0 and UE4M3.
        T::MXFP4 | T::NVFP4 => (8, 0, false),
        _ => return None,
    })
}

/// Byte offsets in a block of the F16 super-scale `d` and of `m`/`dmin`.
pub fn f16_fields(ty: GgmlType) -> (Option<usize>, Option<usize>) {
    use GgmlType as T;
    match ty {
        T::Q4_0 | T::Q5_0 | T::Q8_0 => (Some(0), None),
        T::Q4_1 | T::Q5_1 | T::Q4_K | T::Q5_K => (Some(0), Some(2)),
        T::Q2_K => (Some(80), Some(82)),
        T::Q3_K => (Some(108), None),
        T::Q6_K => (Some(208), None),
        _ => (None, None),
    }
}

fn h(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn f16_at(b: &[u8], at: usize) -> f32 {
    f16_to_f32(h(b, at))
}

/// Codes of one block, in element order, into `q` (`block_size` of them).
/// `block` must be exactly one block of `ty`; other types leave `q` alone.
pub fn block_codes(ty: GgmlType, block: &[u8], q: &mut [u8; MAX_BLOCK]) {
    use GgmlType as T;
    match ty {
        T::Q4_0 | T::Q4_1 | T::MXFP4 => {
            let off = match ty {
                T::Q4_0 => 2,
                T::Q4_1 => 4,
                _ => 1,
            };
            for i in 0..16 {
                let b = block[off + i];
                q[i] = b & 0xf;
                q[i + 16] = b >> 4;
            }
        }
        T::Q5_0 | T::Q5_1 => {
            let off = if ty == T::Q5_0 { 2 } else { 4 };
            let qh =
                u32::from_le_bytes([block[off], block[off + 1], block[off + 2], block[off + 3]]);
            for i in 0..16 {
                let b = block[off + 4 + i];
                q[i] = (b & 0xf) | ((((qh >> i) & 1) as u8) << 4);
                q[i + 16] = (b >> 4) | ((((qh >> (i + 16)) & 1) as u8) << 4);
            }
        }
        T::Q8_0 => {
            for i in 0..32 {
                q[i] = block[2 + i] ^ 0x80;
            }
        }
        T::Q8_K => {
            for i in 0..256 {
                q[i] = block[4 + i] ^ 0x80;
            }
        }
        T::Q2_K => {
            let qs = &block[16..80];
            for g in 0..2 {
                for s in 0..4 {
                    for i in 0..32 {
                        q[g * 128 + s * 32 + i] = (qs[g * 32 + i] >> (2 * s)) & 3;
                    }
                }
            }
        }
        T::Q3_K => {
            let (hmask, qs) = (&block[0..32], &block[32..96]);
            for g in 0..2 {
                for s in 0..4 {
                    for i in 0..32 {
                        let e = g * 128 + s * 32 + i;
                        let hbit = (hmask[i] >> (e / 32)) & 1;
                        q[e] = ((qs[g * 32 + i] >> (2 * s)) & 3) | (hbit << 2);
                    }
                }
            }
        }
        T::Q4_K | T::Q5_K => {
            let (qh, qs) = if ty == T::Q4_K {
                (None, &block[16..144])
            } else {
                (Some(&block[16..48]), &block[48..176])
            };
            for g in 0..4 {
                for s in 0..2 {
                    for i in 0..32 {
                        let e = g * 64 + s * 32 + i;
                        let hi = qh.map_or(0, |qh| (qh[i] >> (e / 32)) & 1);
                        q[e] = ((qs[g * 32 + i] >> (4 * s)) & 0xf) | (hi << 4);
                    }
                }
            }
        }
        T::Q6_K => {
            let (ql, qh) = (&block[0..128], &block[128..192]);
            for g in 0..2 {
                for s in 0..2 {
                    for i in 0..64 {
                        q[g * 128 + s * 64 + i] = (ql[g * 64 + i] >> (4 * s)) & 0xf;
                    }
                }
                for s in 0..4 {
                    for i in 0..32 {
                        q[g * 128 + s * 32 + i] |= ((qh[g * 32 + i] >> (2 * s)) & 3) << 4;
                    }
                }
            }
        }
        T::NVFP4 => {
            for s in 0..4 {
                for k in 0..8 {
                    let b = block[4 + s * 8 + k];
                    q[s * 16 + k] = b & 0xf;
                    q[s * 16 + 8 + k] = b >> 4;
                }
            }
        }
        _ => {}
    }
}

/// Sub-block scales (and mins) of one block as stored codes; returns how
/// many of each were written.
#[inline]
pub fn block_sub_scales(
    ty: GgmlType,
    block: &[u8],
    sc: &mut [u8; 16],
    mins: &mut [u8; 16],
) -> (usize, usize) {
    use GgmlType as T;
    match ty {
        T::Q2_K => {
            for j in 0..16 {
                sc[j] = block[j] & 0xf;
                mins[j] = block[j] >> 4;
            }
            (16, 16)
        }
        T::Q3_K => {
            let s = &block[96..108];
            for k in 0..16 {
                let lo = if k < 8 { s[k] & 0xf } else { s[k - 8] >> 4 };
                let hi = (s[8 + k % 4] >> (2 * (k / 4))) & 3;
                sc[k] = lo | (hi << 4);
            }
            (16, 0)
        }
        T::Q4_K | T::Q5_K => {
            let s = &block[4..16];
            for j in 0..4 {
                sc[j] = s[j] & 0x3f;
                mins[j] = s[4 + j] & 0x3f;
                sc[4 + j] = (s[8 + j] & 0xf) | ((s[j] >> 2) & 0x30);
                mins[4 + j] = (s[8 + j] >> 4) | ((s[4 + j] >> 2) & 0x30);
            }
            (8, 8)
        }
        T::Q6_K => {
            for j in 0..16 {
                sc[j] = block[192 + j] ^ 0x80;
            }
            (16, 0)
        }
        T::MXFP4 => {
            sc[0] = block[0];
            (1, 0)
        }
        T::NVFP4 => {
            sc[..4].copy_from_slice(&block[..4]);
            (4, 0)
        }
        _ => (0, 0),
    }
}

/// ggml's `ggml_e8m0_to_fp32_half`: 2^(e − 128), as gguf-py computes it.
pub fn e8m0_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        u32::from(e - 1) << 23
    };
    f32::from_bits(bits)
}

/// gguf-py's `NVFP4.ue4m3_to_fp32` (the sign bit is ignored; 0x7F is 0),
/// halved for the doubled E2M1 values.
pub fn ue4m3_half(x: u8) -> f32 {
    if x == 0 || x == 0x7f {
        return 0.0;
    }
    let exp = i32::from((x >> 3) & 0xf);
    let man = f32::from(x & 7);
    let raw = if exp == 0 {
        man * f32::from_bits(0x3b00_0000) // 2^-9
    } else {
        (1.0 + man / 8.0) * 2f32.powi(exp - 7)
    };
    raw * 0.5
}

/// Where a type's codes are whole bytes, nibbles or 2-bit fields of a
/// contiguous run in each block, with no other bits joined to them:
/// `(offset, length)` of that run. Their counts then follow from a byte
/// histogram ([`expand_byte_counts`]), the audit's fast path.
pub fn byte_codes(ty: GgmlType) -> Option<(usize, usize)> {
    use GgmlType as T;
    Some(match ty {
        T::Q4_0 => (2, 16),
        T::Q4_1 => (4, 16),
        T::MXFP4 => (1, 16),
        T::NVFP4 => (4, 32),
        T::Q4_K => (16, 128),
        T::Q8_0 => (2, 32),
        T::Q8_K => (4, 256),
        T::Q2_K => (16, 64),
        _ => return None,
    })
}

/// Adds the code counts implied by `table` (counts of each byte value of
/// the [`byte_codes`] run) to `codes`.
pub fn expand_byte_counts(ty: GgmlType, table: &[u64; 256], codes: &mut [u64; 256]) {
    use GgmlType as T;
    for (b, &n) in table.iter().enumerate() {
        if n == 0 {
            continue;
        }
        match ty {
            T::Q8_0 | T::Q8_K => codes[b ^ 0x80] += n,
            T::Q2_K => {
                for s in 0..4 {
                    codes[(b >> (2 * s)) & 3] += n;
                }
            }
            _ => {
                codes[b & 0xf] += n;
                codes[b >> 4] += n;
            }
        }
    }
}

/// Entries of a [`joint_indices`] table: a byte of low code bits joined with
/// up to four high bits taken from another byte.
pub const JOINT_TABLE: usize = 4096;

/// Whether `ty`'s codes are counted through [`joint_indices`]: the types whose
/// codes join a byte of low bits (two nibbles or four 2-bit fields) with
/// high bits stored elsewhere in the block.
pub fn has_joint_codes(ty: GgmlType) -> bool {
    use GgmlType as T;
    matches!(ty, T::Q5_0 | T::Q5_1 | T::Q5_K | T::Q3_K | T::Q6_K)
}

/// Bit k of a byte moved to the low bit of byte k of a u64.
const SPREAD_BITS: [u64; 256] = {
    let mut t = [0u64; 256];
    let mut b = 0;
    while b < 256 {
        let mut k = 0;
        while k < 8 {
            if (b >> k) & 1 == 1 {
                t[b] |= 1 << (8 * k);
            }
            k += 1;
        }
        b += 1;
    }
    t
};

/// Most joint indices of one block ([`joint_indices`]).
pub const MAX_JOINT: usize = 128;

/// Writes the joint indices of one block of a [`has_joint_codes`] type to
/// `out` and returns how many: each a low-bits byte with the high bits of
/// the codes it holds (one index stands for two or four codes;
/// [`expand_joint_counts`] turns a table of their counts into code counts).
/// Half the work of unpacking every code, and each type's loop is plain
/// lane-wise arithmetic the compiler vectorises; the caller's table
/// increments are then the only serial step.
#[inline(always)]
pub fn joint_indices(ty: GgmlType, block: &[u8], out: &mut [u16; MAX_JOINT]) -> usize {
    use GgmlType as T;
    match ty {
        T::Q5_0 | T::Q5_1 => {
            let off = if ty == T::Q5_0 { 2 } else { 4 };
            let q = &block[off..off + 4];
            // Byte i of `hb`: bit i of qh (code i's high bit) and, above
            // it, bit i + 16 (code i + 16's). qh's bytes 0 and 2 hold
            // those of i < 8, bytes 1 and 3 those of 8 <= i < 16; each is
            // spread a bit a byte by table, not shifted out bit by bit.
            let spread = |b: u8| SPREAD_BITS[usize::from(b)];
            let lo = spread(q[0]) | spread(q[2]) << 1;
            let hi = spread(q[1]) | spread(q[3]) << 1;
            let mut hb = [0u8; 16];
            hb[..8].copy_from_slice(&lo.to_le_bytes());
            hb[8..].copy_from_slice(&hi.to_le_bytes());
            let qs: &[u8; 16] = block[off + 4..off + 20].try_into().unwrap_or(&[0; 16]);
            for ((o, &b), &h) in out[..16].iter_mut().zip(qs).zip(&hb) {
                *o = u16::from(b) | u16::from(h) << 8;
            }
            16
        }
        T::Q5_K => {
            let qh: &[u8; 32] = block[16..48].try_into().unwrap_or(&[0; 32]);
            let qs = &block[48..176];
            for g in 0..4 {
                let o = &mut out[g * 32..g * 32 + 32];
                for ((o, &b), &h) in o.iter_mut().zip(&qs[g * 32..g * 32 + 32]).zip(qh) {
                    *o = u16::from(b) | u16::from((h >> (2 * g)) & 3) << 8;
                }
            }
            128
        }
        T::Q3_K => {
            let hmask: &[u8; 32] = block[0..32].try_into().unwrap_or(&[0; 32]);
            let qs = &block[32..96];
            for g in 0..2 {
                let o = &mut out[g * 32..g * 32 + 32];
                for ((o, &b), &h) in o.iter_mut().zip(&qs[g * 32..g * 32 + 32]).zip(hmask) {
                    *o = u16::from(b) | u16::from((h >> (4 * g)) & 0xf) << 8;
                }
            }
            64
        }
        T::Q6_K => {
            let (ql, qh) = (&block[0..128], &block[128..192]);
            for g in 0..2 {
                let ql = &ql[g * 64..g * 64 + 64];
                let qh = &qh[g * 32..g * 32 + 32];
                let (lo, hi) = out[g * 64..g * 64 + 64].split_at_mut(32);
                for ((o, &b), &h) in lo.iter_mut().zip(&ql[..32]).zip(qh) {
                    *o = u16::from(b) | u16::from(h & 3) << 8 | u16::from((h >> 4) & 3) << 10;
                }
                for ((o, &b), &h) in hi.iter_mut().zip(&ql[32..]).zip(qh) {
                    *o =
                        u16::from(b) | u16::from((h >> 2) & 3) << 8 | u16::from((h >> 6) & 3) << 10;
                }
            }
            128
        }
        _ => 0,
    }
}

/// Adds the code counts implied by `table` (counts of each [`joint_indices`]
/// index, [`JOINT_TABLE`] of them) to `codes`.
pub fn expand_joint_counts(ty: GgmlType, table: &[u64], codes: &mut [u64; 256]) {
    use GgmlType as T;
    for (x, &n) in table.iter().enumerate() {
        if n == 0 {
            continue;
        }
        let b = x & 0xff;
        match ty {
            T::Q5_0 | T::Q5_1 | T::Q5_K => {
                codes[(b & 0xf) | ((x >> 8) & 1) << 4] += n;
                codes[(b >> 4) | ((x >> 9) & 1) << 4] += n;
            }
            T::Q3_K => {
                for s in 0..4 {
                    codes[((b >> (2 * s)) & 3) | ((x >> (8 + s)) & 1) << 2] += n;
                }
            }
            T::Q6_K => {
                codes[(b & 0xf) | ((x >> 8) & 3) << 4] += n;
                codes[(b >> 4) | ((x >> 10) & 3) << 4] += n;
            }
            _ => {}
        }
    }
}

/// The byte run of a [`has_joint_codes`] type whose values make every code
/// its zero level, and the byte value they then all hold, with the run of
/// high bits and its value: a block is all-zero exactly when both runs hold
/// only their value. `None` for types whose zero level is code 0 (affine).
pub fn joint_zero_runs(ty: GgmlType) -> Option<[(usize, usize, u8); 2]> {
    use GgmlType as T;
    Some(match ty {
        // Code 16: low nibble 0, high bit 1.
        T::Q5_0 => [(6, 16, 0), (2, 4, 0xff)],
        // Code 4: low 2 bits 0, high bit 1.
        T::Q3_K => [(32, 64, 0), (0, 32, 0xff)],
        // Code 32: low nibble 0, high bits 0b10.
        T::Q6_K => [(0, 128, 0), (128, 64, 0xaa)],
        _ => return None,
    })
}

/// Dequantises one block of a decoded type into `out` (`block_size` values).
pub fn dequantize_block(ty: GgmlType, block: &[u8], out: &mut [f32]) {
    use GgmlType as T;
    match ty {
        T::F32 => out[0] = f32::from_le_bytes([block[0], block[1], block[2], block[3]]),
        T::F16 => out[0] = f16_at(block, 0),
        T::BF16 => out[0] = bf16_to_f32(h(block, 0)),
        _ => {
            let mut q = [0u8; MAX_BLOCK];
            block_codes(ty, block, &mut q);
            let (mut sc, mut mn) = ([0u8; 16], [0u8; 16]);
            block_sub_scales(ty, block, &mut sc, &mut mn);
            let n = ty.block_size() as usize;
            let (q, out) = (&q[..n], &mut out[..n]);
            match ty {
                T::Q4_0 | T::Q5_0 | T::Q8_0 => {
                    let d = f16_at(block, 0);
                    let zero = code_format(ty).map_or(0, |(_, z)| z);
                    for (o, &c) in out.iter_mut().zip(q) {
                        *o = d * (i32::from(c) - zero) as f32;
                    }
                }
                T::Q4_1 | T::Q5_1 => {
                    let (d, m) = (f16_at(block, 0), f16_at(block, 2));
                    for (o, &c) in out.iter_mut().zip(q) {
                        *o = d * f32::from(c) + m;
                    }
                }
                T::Q8_K => {
                    let d = f32::from_le_bytes([block[0], block[1], block[2], block[3]]);
                    for (o, &c) in out.iter_mut().zip(q) {
                        *o = d * (i32::from(c) - 128) as f32;
                    }
                }
                T::Q2_K => {
                    let (d, dmin) = (f16_at(block, 80), f16_at(block, 82));
                    for (e, (o, &c)) in out.iter_mut().zip(q).enumerate() {
                        let dl = d * f32::from(sc[e / 16]);
                        let ml = dmin * f32::from(mn[e / 16]);
                        *o = dl * f32::from(c) - ml;
                    }
                }
                T::Q3_K => {
                    let d = f16_at(block, 108);
                    for (e, (o, &c)) in out.iter_mut().zip(q).enumerate() {
                        let dl = d * (i32::from(sc[e / 16]) - 32) as f32;
                        *o = dl * (i32::from(c) - 4) as f32;
                    }
                }
                T::Q4_K | T::Q5_K => {
                    let (d, dmin) = (f16_at(block, 0), f16_at(block, 2));
                    for (e, (o, &c)) in out.iter_mut().zip(q).enumerate() {
                        let dl = d * f32::from(sc[e / 32]);
                        let ml = dmin * f32::from(mn[e / 32]);
                        *o = dl * f32::from(c) - ml;
                    }
                }
                T::Q6_K => {
                    let d = f16_at(block, 208);
                    for (e, (o, &c)) in out.iter_mut().zip(q).enumerate() {
                        let dl = d * (i32::from(sc[e / 16]) - 128) as f32;
                        *o = dl * (i32::from(c) - 32) as f32;
                    }
                }
                T::MXFP4 => {
                    let d = e8m0_half(block[0]);
                    for (o, &c) in out.iter_mut().zip(q) {
                        *o = d * f32::from(KVALUES[usize::from(c & 0xf)]);
                    }
                }
                T::NVFP4 => {
                    for (e, (o, &c)) in out.iter_mut().zip(q).enumerate() {
                        let d = ue4m3_half(block[e / 16]);
                        *o = d * f32::from(KVALUES[usize::from(c & 0xf)]);
                    }
                }
                _ => out.fill(f32::NAN),
            }
        }
    }
}

/// Why a GGUF tensor's bytes could not be dequantised.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GgufDecodeError {
    /// The type is known, listed and size-checked, but not decoded.
    #[error("{0} tensors are not decoded by bundlescope (listed and size-checked only)")]
    NotDecoded(&'static str),
    /// The bytes are not a whole number of blocks for the values asked.
    #[error("{have} bytes do not hold {values} values of {ty} ({need} bytes needed)")]
    Short {
        /// Type name.
        ty: &'static str,
        /// Values asked for.
        values: usize,
        /// Bytes they need.
        need: usize,
        /// Bytes present.
        have: usize,
    },
}

/// Dequantises `out.len()` values (a multiple of the block size) from `bytes`.
pub fn dequantize(ty: GgmlType, bytes: &[u8], out: &mut [f32]) -> Result<(), GgufDecodeError> {
    if !ty.decoded() {
        return Err(GgufDecodeError::NotDecoded(ty.name()));
    }
    let (bs, ts) = (ty.block_size() as usize, ty.type_size() as usize);
    let need = out.len().div_ceil(bs) * ts;
    if !out.len().is_multiple_of(bs) || bytes.len() < need {
        return Err(GgufDecodeError::Short {
            ty: ty.name(),
            values: out.len(),
            need,
            have: bytes.len(),
        });
    }
    if let Some(it) = ty.int_dtype() {
        for (o, b) in out.iter_mut().zip(bytes.chunks_exact(it.size() as usize)) {
            *o = it.to_f32(b);
        }
        return Ok(());
    }
    if ty.is_float() {
        match ty {
            GgmlType::F32 => {
                for (o, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                    *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                }
            }
            // Rounded to the nearest f32, as numpy's astype(float32) does.
            GgmlType::F64 => {
                for (o, b) in out.iter_mut().zip(bytes.as_chunks::<8>().0) {
                    *o = f64::from_le_bytes(*b) as f32;
                }
            }
            _ => super::halves_to_f32(ty == GgmlType::BF16, bytes, out),
        }
        return Ok(());
    }
    for (o, b) in out.chunks_exact_mut(bs).zip(bytes.chunks_exact(ts)) {
        dequantize_block(ty, b, o);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e8m0_and_ue4m3_scales() {
        assert_eq!(e8m0_half(128), 1.0);
        assert_eq!(e8m0_half(127), 0.5);
        assert_eq!(e8m0_half(1), 2f32.powi(-127));
        assert_eq!(e8m0_half(0), 2f32.powi(-128));
        assert_eq!(ue4m3_half(0x38), 0.5); // 1.0 in E4M3, halved
        assert_eq!(ue4m3_half(0x7f), 0.0);
        assert_eq!(ue4m3_half(0x01), 2f32.powi(-10));
    }

    #[test]
    fn the_byte_path_counts_what_block_codes_unpacks() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for &ty in GgmlType::ALL {
            let Some((off, len)) = byte_codes(ty) else {
                continue;
            };
            let mut block = vec![0u8; ty.type_size() as usize];
            for b in &mut block {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
            let mut q = [0u8; MAX_BLOCK];
            block_codes(ty, &block, &mut q);
            let mut want = [0u64; 256];
            for &c in &q[..ty.block_size() as usize] {
                want[usize::from(c)] += 1;
            }
            let mut table = [0u64; 256];
            for &b in &block[off..off + len] {
                table[usize::from(b)] += 1;
            }
            let mut got = [0u64; 256];
            expand_byte_counts(ty, &table, &mut got);
            assert_eq!(got, want, "{}", ty.name());
        }
    }

    #[test]
    fn the_joint_path_counts_what_block_codes_unpacks() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut seen = 0;
        for &ty in GgmlType::ALL {
            if !has_joint_codes(ty) {
                continue;
            }
            seen += 1;
            for round in 0..64 {
                let mut block = vec![0u8; ty.type_size() as usize];
                for b in &mut block {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    *b = x as u8;
                }
                // Every few rounds an all-zero block, which the zero runs
                // must recognise, and a near miss, which they must not.
                let zero = code_format(ty).unwrap().1;
                if let Some(runs) = joint_zero_runs(ty)
                    && round % 4 < 2
                {
                    for (off, len, v) in runs {
                        block[off..off + len].fill(v);
                    }
                    if round % 4 == 1 {
                        let (off, len, v) = runs[(round / 4) % 2];
                        block[off + len - 1] = v ^ 0x10;
                    }
                }
                let mut q = [0u8; MAX_BLOCK];
                block_codes(ty, &block, &mut q);
                let n = ty.block_size() as usize;
                let mut want = [0u64; 256];
                for &c in &q[..n] {
                    want[usize::from(c)] += 1;
                }
                let mut table = vec![0u64; JOINT_TABLE];
                let mut idx = [0u16; MAX_JOINT];
                let k = joint_indices(ty, &block, &mut idx);
                for &i in &idx[..k] {
                    table[usize::from(i)] += 1;
                }
                let mut got = [0u64; 256];
                expand_joint_counts(ty, &table, &mut got);
                assert_eq!(got, want, "{}", ty.name());
                let all_zero = zero != 0 && q[..n].iter().all(|&c| i32::from(c) == zero);
                let by_runs = joint_zero_runs(ty).is_some_and(|runs| {
                    runs.iter()
                        .all(|&(off, len, v)| block[off..off + len].iter().all(|&b| b == v))
                });
                assert_eq!(by_runs, all_zero, "{} round {round}", ty.name());
            }
        }
        assert_eq!(seen, 5);
    }

    #[test]
    fn q4_0_block_by_hand() {
        let mut block = [0u8; 18];
        block[..2].copy_from_slice(&0x3c00u16.to_le_bytes()); // d = 1
        block[2] = 0x9f; // element 0: 15, element 16: 9
        let mut out = [0f32; 32];
        dequantize(GgmlType::Q4_0, &block, &mut out).unwrap();
        assert_eq!(out[0], 7.0);
        assert_eq!(out[16], 1.0);
        assert_eq!(out[1], -8.0);
        assert!(matches!(
            dequantize(GgmlType::IQ2_XS, &[0; 74], &mut [0f32; 256]),
            Err(GgufDecodeError::NotDecoded("IQ2_XS"))
        ));
        assert!(dequantize(GgmlType::Q4_0, &block[..17], &mut out).is_err());
    }
}
