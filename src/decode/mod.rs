//! Pure functions from bytes to codes, scales and values. No I/O.

pub mod dequant;
pub mod nvfp4;
pub mod stats;

/// IEEE half (little-endian bits) to f32, exactly.
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h >> 15) << 31;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x3ff);
    let bits = match exp {
        0 if man == 0 => sign,
        0 => {
            // Subnormal: value = man * 2^-24; f32 represents it exactly.
            let v = man as f32 * f32::from_bits(0x3380_0000); // 2^-24
            return if sign != 0 { -v } else { v };
        }
        0x1f => sign | 0x7f80_0000 | (man << 13),
        e => sign | ((e + 127 - 15) << 23) | (man << 13),
    };
    f32::from_bits(bits)
}

/// f32 to IEEE half bits, rounding to nearest even (overflow to infinity).
pub fn f32_to_f16(v: f32) -> u16 {
    let x = v.to_bits();
    let sign = ((x >> 16) & 0x8000) as u16;
    let exp = ((x >> 23) & 0xff) as i32;
    let man = x & 0x7f_ffff;
    if exp == 0xff {
        return sign | 0x7c00 | if man != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        if e < -10 {
            return sign;
        }
        let m = man | 0x80_0000;
        let shift = (14 - e) as u32;
        let half = 1u32 << (shift - 1);
        let rest = m & ((1 << shift) - 1);
        let mut out = m >> shift;
        if rest > half || (rest == half && out & 1 == 1) {
            out += 1;
        }
        return sign | out as u16;
    }
    let mut out = ((e as u32) << 10) | (man >> 13);
    let rest = man & 0x1fff;
    if rest > 0x1000 || (rest == 0x1000 && out & 1 == 1) {
        out += 1; // may carry into the exponent, which is the right rounding
    }
    sign | out as u16
}

/// bfloat16 bits to f32, exactly.
pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

/// f32 to bfloat16 bits, rounding to nearest even.
pub fn f32_to_bf16(v: f32) -> u16 {
    let x = v.to_bits();
    if v.is_nan() {
        return ((x >> 16) | 0x40) as u16;
    }
    let round = 0x7fff + ((x >> 16) & 1);
    (x.wrapping_add(round) >> 16) as u16
}

/// Is this F16 scale finite and greater than zero?
#[inline]
pub fn f16_is_positive_finite(h: u16) -> bool {
    // 0x0001..=0x7bff are exactly the positive finite halves.
    h.wrapping_sub(1) < 0x7bff
}

/// Code `j` of an LSB-first bit stream of `bits`-bit codes.
#[inline]
pub fn code_at(row: &[u8], bits: u32, j: usize) -> Option<u8> {
    let bit = j * bits as usize;
    let byte = bit / 8;
    let shift = bit % 8;
    let lo = u16::from(*row.get(byte)?);
    let hi = u16::from(row.get(byte + 1).copied().unwrap_or(0));
    Some((((lo | (hi << 8)) >> shift) & ((1 << bits) - 1)) as u8)
}

/// Unpacks a whole row of `out.len()` codes from an LSB-first bit stream.
/// Rows shorter than the codes need are an error, never a panic.
pub fn unpack_row(row: &[u8], bits: u32, out: &mut [u8]) -> Result<(), ShortRow> {
    let need = (out.len() * bits as usize).div_ceil(8);
    if row.len() < need {
        return Err(ShortRow {
            need,
            have: row.len(),
        });
    }
    match bits {
        4 => {
            for (pair, &b) in out.chunks_mut(2).zip(row) {
                pair[0] = b & 0xf;
                if let Some(second) = pair.get_mut(1) {
                    *second = b >> 4;
                }
            }
        }
        3 => {
            for (eight, three) in out.chunks_mut(8).zip(row.chunks(3)) {
                let mut w = 0u32;
                for (k, &b) in three.iter().enumerate() {
                    w |= u32::from(b) << (8 * k);
                }
                for (k, c) in eight.iter_mut().enumerate() {
                    *c = ((w >> (3 * k)) & 7) as u8;
                }
            }
        }
        _ => {
            for (j, c) in out.iter_mut().enumerate() {
                *c = code_at(row, bits, j).unwrap_or(0);
            }
        }
    }
    Ok(())
}

/// Packs codes into an LSB-first bit stream (the inverse of [`unpack_row`]).
pub fn pack_row(codes: &[u8], bits: u32, out: &mut [u8]) {
    out.fill(0);
    for (j, &c) in codes.iter().enumerate() {
        let bit = j * bits as usize;
        let (byte, shift) = (bit / 8, bit % 8);
        let v = u16::from(c & ((1 << bits) - 1) as u8) << shift;
        if let Some(b) = out.get_mut(byte) {
            *b |= v as u8;
        }
        if v > 0xff
            && let Some(b) = out.get_mut(byte + 1)
        {
            *b |= (v >> 8) as u8;
        }
    }
}

/// A packed row had fewer bytes than its codes need.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("packed row too short: {need} bytes needed, {have} present")]
pub struct ShortRow {
    /// Bytes the codes need.
    pub need: usize,
    /// Bytes present.
    pub have: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_round_trips_every_finite_half() {
        for h in 0..=u16::MAX {
            let v = f16_to_f32(h);
            if v.is_nan() {
                assert!(f16_to_f32(f32_to_f16(v)).is_nan());
            } else {
                assert_eq!(f32_to_f16(v), h, "{h:#06x} -> {v}");
            }
        }
    }

    #[test]
    fn f16_known_values() {
        assert_eq!(f16_to_f32(0x3c00), 1.0);
        assert_eq!(f16_to_f32(0xc000), -2.0);
        assert_eq!(f16_to_f32(0x7bff), 65504.0);
        assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
        assert_eq!(f32_to_f16(1.0 + 2f32.powi(-11)), 0x3c00); // tie to even
        assert_eq!(f32_to_f16(1e6), 0x7c00);
    }

    #[test]
    fn positive_finite_scales() {
        assert!(!f16_is_positive_finite(0x0000));
        assert!(!f16_is_positive_finite(0x8000));
        assert!(f16_is_positive_finite(0x0001));
        assert!(f16_is_positive_finite(0x7bff));
        assert!(!f16_is_positive_finite(0x7c00));
        assert!(!f16_is_positive_finite(0x7e00));
        assert!(!f16_is_positive_finite(0xbc00));
    }

    #[test]
    fn bf16_rounds_to_nearest_even() {
        assert_eq!(f32_to_bf16(1.0), 0x3f80);
        assert_eq!(bf16_to_f32(0x3f80), 1.0);
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f80_8000)), 0x3f80);
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f81_8000)), 0x3f82);
    }

    #[test]
    fn pack_unpack_round_trip_3_and_4_bits() {
        for bits in [3u32, 4] {
            let codes: Vec<u8> = (0..128).map(|j| (j * 7 % (1 << bits)) as u8).collect();
            let mut packed = vec![0u8; codes.len() * bits as usize / 8];
            pack_row(&codes, bits, &mut packed);
            let mut back = vec![0u8; codes.len()];
            unpack_row(&packed, bits, &mut back).unwrap();
            assert_eq!(back, codes);
            for (j, &c) in codes.iter().enumerate() {
                assert_eq!(code_at(&packed, bits, j), Some(c));
            }
        }
    }

    #[test]
    fn three_bit_codes_straddle_bytes() {
        // code 2 occupies bits 6..9: the top two bits of byte 0 and bit 0 of byte 1.
        let mut row = [0u8; 3];
        pack_row(&[0, 0, 0b101], 3, &mut row);
        assert_eq!(row, [0b0100_0000, 0b0000_0001, 0]);
    }

    #[test]
    fn short_rows_are_errors() {
        let mut out = [0u8; 64];
        assert!(unpack_row(&[0u8; 10], 3, &mut out).is_err());
    }
}
