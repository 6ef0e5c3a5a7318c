//! Pure functions from bytes to codes, scales and values. No I/O.

pub mod dequant;
pub mod experts;
pub mod gguf;
pub mod mlxlm;
pub mod nvfp4;
pub mod peers;
pub mod stats;

// The conversions are the `half` crate's (hardware F16C where the CPU has
// it); these wrappers keep one bit-pattern-in, bit-pattern-out vocabulary for
// the file formats, which store raw little-endian `u16`s.

/// IEEE half (little-endian bits) to f32, exactly. NaNs stay NaN (quietened).
#[inline]
pub fn f16_to_f32(h: u16) -> f32 {
    half::f16::from_bits(h).to_f32()
}

/// f32 to IEEE half bits, rounding to nearest even (overflow to infinity,
/// NaN to a NaN half).
#[inline]
pub fn f32_to_f16(v: f32) -> u16 {
    half::f16::from_f32(v).to_bits()
}

/// bfloat16 bits to f32, exactly. NaNs stay NaN (quietened).
#[inline]
pub fn bf16_to_f32(h: u16) -> f32 {
    half::bf16::from_bits(h).to_f32()
}

/// f32 to bfloat16 bits, rounding to nearest even; a NaN keeps its sign and
/// top payload bits and is quietened (MLX's `astype` does the same).
#[inline]
pub fn f32_to_bf16(v: f32) -> u16 {
    half::bf16::from_f32(v).to_bits()
}

/// The IEEE half holding an F8_E4M3 ("fn": bias 7, no infinities) byte's
/// value exactly: every E4M3 value is a half (its normals `(1 + m/8) ·
/// 2^(e−7)`, its subnormals `m · 2^−9`), and the NaN bytes 0x7F/0xFF give a
/// quiet NaN half of their sign.
pub const fn f8_e4m3_to_f16(b: u8) -> u16 {
    let sign = ((b & 0x80) as u16) << 8;
    let (e, m) = (((b >> 3) & 15) as u16, (b & 7) as u16);
    if b & 0x7f == 0x7f {
        return sign | 0x7e00;
    }
    if e > 0 {
        // Rebias 7 → 15; the 3 mantissa bits are the half's top 3 of 10.
        return sign | (e + 8) << 10 | m << 7;
    }
    if m == 0 {
        return sign;
    }
    // Subnormal m · 2^−9: normalise at m's top bit p (0..=2).
    let p = 15 - m.leading_zeros() as u16;
    sign | (p + 6) << 10 | (m - (1 << p)) << (10 - p)
}

/// The IEEE half holding an F8_E5M2 byte's value: E5M2 is a half's top
/// byte (bias 15, ±inf 0x7C/0xFC, NaN above), so the value is exact.
#[inline]
pub const fn f8_e5m2_to_f16(b: u8) -> u16 {
    (b as u16) << 8
}

/// Every F8_E4M3 byte's value as half bits ([`f8_e4m3_to_f16`]).
pub const F8_E4M3_AS_F16: [u16; 256] = {
    let mut t = [0u16; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = f8_e4m3_to_f16(b as u8);
        b += 1;
    }
    t
};

/// Converts 8-bit floats (`bytes`, one per value; E4M3 "fn" when `e4m3`,
/// else E5M2) to f32 exactly, `out.len()` of them (or fewer when `bytes`
/// is shorter). NaNs stay NaN, E5M2's infinities infinite.
pub fn f8_to_f32(e4m3: bool, bytes: &[u8], out: &mut [f32]) {
    let mut table = [0f32; 256];
    for (b, v) in table.iter_mut().enumerate() {
        let h = if e4m3 {
            F8_E4M3_AS_F16[b]
        } else {
            f8_e5m2_to_f16(b as u8)
        };
        *v = f16_to_f32(h);
    }
    for (o, &b) in out.iter_mut().zip(bytes) {
        *o = table[usize::from(b)];
    }
}

/// Converts little-endian F64s (`bytes`, eight per value) to f32, rounding
/// to nearest even as numpy's `astype(float32)` does (beyond f32's range to
/// ±inf, NaN to NaN), `out.len()` of them (or fewer when `bytes` is shorter).
pub fn f64s_to_f32(bytes: &[u8], out: &mut [f32]) {
    for (o, b) in out.iter_mut().zip(bytes.as_chunks::<8>().0) {
        *o = f64::from_le_bytes(*b) as f32;
    }
}

/// Converts little-endian integers (or BOOL bytes) of `ty` to f32, each
/// rounded once to nearest even as numpy's `astype(float32)` does (the 8-
/// and 16-bit ones, and BOOL's 0 and 1, exactly), `out.len()` of them (or
/// fewer when `bytes` is shorter).
pub fn ints_to_f32(ty: crate::format::IntDtype, bytes: &[u8], out: &mut [f32]) {
    for (o, b) in out.iter_mut().zip(bytes.chunks_exact(ty.size() as usize)) {
        *o = ty.to_f32(b);
    }
}

/// Converts little-endian 16-bit floats (`bytes`, two per value) to f32,
/// `out.len()` of them, through `half`'s vectorised slice conversion.
/// Extra bytes are ignored; missing ones leave the tail of `out` untouched.
pub fn halves_to_f32(bf16: bool, bytes: &[u8], out: &mut [f32]) {
    use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
    // A stack buffer of native-endian bits: the file's bytes are neither
    // aligned nor necessarily in the host's byte order.
    const BLOCK: usize = 256;
    let mut bits = [0u16; BLOCK];
    for (o, b) in out.chunks_mut(BLOCK).zip(bytes.chunks(2 * BLOCK)) {
        let n = o.len().min(b.len() / 2);
        for (h, p) in bits.iter_mut().zip(b.chunks_exact(2)) {
            *h = u16::from_le_bytes([p[0], p[1]]);
        }
        let (o, bits) = (&mut o[..n], &bits[..n]);
        if bf16 {
            bits.reinterpret_cast::<half::bf16>()
                .convert_to_f32_slice(o);
        } else {
            bits.reinterpret_cast::<half::f16>().convert_to_f32_slice(o);
        }
    }
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

    /// The hand-written conversions `half` replaced, kept as the oracle for
    /// the rounding and NaN behaviour the checks and samples were built on.
    mod old {
        pub fn f16_to_f32(h: u16) -> f32 {
            let sign = u32::from(h >> 15) << 31;
            let exp = u32::from((h >> 10) & 0x1f);
            let man = u32::from(h & 0x3ff);
            let bits = match exp {
                0 if man == 0 => sign,
                0 => {
                    let v = man as f32 * f32::from_bits(0x3380_0000); // 2^-24
                    return if sign != 0 { -v } else { v };
                }
                0x1f => sign | 0x7f80_0000 | (man << 13),
                e => sign | ((e + 127 - 15) << 23) | (man << 13),
            };
            f32::from_bits(bits)
        }

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
                out += 1;
            }
            sign | out as u16
        }

        pub fn f32_to_bf16(v: f32) -> u16 {
            let x = v.to_bits();
            if v.is_nan() {
                return ((x >> 16) | 0x40) as u16;
            }
            let round = 0x7fff + ((x >> 16) & 1);
            (x.wrapping_add(round) >> 16) as u16
        }
    }

    /// Same value, or both NaN (NaN payloads are not something any check reads).
    fn same(a: f32, b: f32) -> bool {
        a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
    }

    /// An F8 byte's value from the format's definition (sign, `exp` bits
    /// of exponent with `bias`, the rest mantissa), in f64, independently
    /// of the half-based tables.
    fn f8_by_definition(b: u8, exp: u32, bias: i32, e4m3: bool) -> f64 {
        let man_bits = 7 - exp;
        let e = i32::from(b >> man_bits) & ((1 << exp) - 1);
        let m = f64::from(b & ((1 << man_bits) - 1));
        let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
        let top = (1 << exp) - 1;
        if e4m3 && b & 0x7f == 0x7f {
            return f64::NAN;
        }
        if !e4m3 && e == top {
            return if m == 0.0 {
                sign * f64::INFINITY
            } else {
                f64::NAN
            };
        }
        let scale = f64::from(1u32 << man_bits);
        if e == 0 {
            sign * m / scale * 2f64.powi(1 - bias)
        } else {
            sign * (1.0 + m / scale) * 2f64.powi(e - bias)
        }
    }

    #[test]
    fn every_f8_byte_converts_exactly() {
        let bytes: Vec<u8> = (0..=255).collect();
        for (e4m3, exp, bias) in [(true, 4, 7), (false, 5, 15)] {
            let mut out = [0f32; 256];
            f8_to_f32(e4m3, &bytes, &mut out);
            for b in 0..=255u8 {
                let want = f8_by_definition(b, exp, bias, e4m3);
                let got = out[usize::from(b)];
                if want.is_nan() {
                    assert!(got.is_nan(), "{b:#04x}");
                } else {
                    assert_eq!(f64::from(got), want, "{b:#04x} (e4m3 {e4m3})");
                    assert_eq!(got.is_sign_negative(), b & 0x80 != 0, "{b:#04x}");
                }
            }
        }
        // The E4M3 table agrees with the NVFP4 scale decoder, and only
        // 0x7F/0xFF are NaN; E5M2 has infinities at 0x7C/0xFC.
        for b in 0..=255u8 {
            let h = f16_to_f32(F8_E4M3_AS_F16[usize::from(b)]);
            assert!(same(h, nvfp4::e4m3(b)), "{b:#04x}");
            assert_eq!(h.is_nan(), b & 0x7f == 0x7f, "{b:#04x}");
        }
        assert_eq!(f16_to_f32(F8_E4M3_AS_F16[0x7e]), 448.0);
        assert_eq!(f16_to_f32(F8_E4M3_AS_F16[0x01]), 2f32.powi(-9));
        assert_eq!(f16_to_f32(f8_e5m2_to_f16(0x7c)), f32::INFINITY);
        assert_eq!(f16_to_f32(f8_e5m2_to_f16(0xfc)), f32::NEG_INFINITY);
        assert_eq!(f16_to_f32(f8_e5m2_to_f16(0x7b)), 57344.0);
    }

    #[test]
    fn integers_convert_as_numpy_astype() {
        use crate::format::IntDtype as T;
        let one = |ty: T, bytes: &[u8]| {
            let mut out = [f32::NAN];
            ints_to_f32(ty, bytes, &mut out);
            (ty.to_f64(bytes), out[0])
        };
        assert_eq!(one(T::I8, &[0x80]), (-128.0, -128.0));
        assert_eq!(one(T::U8, &[0xff]), (255.0, 255.0));
        assert_eq!(one(T::Bool, &[0x02]), (1.0, 1.0));
        assert_eq!(one(T::Bool, &[0x00]), (0.0, 0.0));
        assert_eq!(
            one(T::I16, &(-32768i16).to_le_bytes()),
            (-32768.0, -32768.0)
        );
        assert_eq!(one(T::U16, &u16::MAX.to_le_bytes()), (65535.0, 65535.0));
        // 2^24 + 1 is no f32: ties to even, down.
        assert_eq!(
            one(T::I32, &(1i32 << 24 | 1).to_le_bytes()),
            (16_777_217.0, 16_777_216.0)
        );
        assert_eq!(
            one(T::U32, &u32::MAX.to_le_bytes()),
            (4_294_967_295.0, 4_294_967_296.0)
        );
        assert_eq!(
            one(T::I64, &i64::MIN.to_le_bytes()),
            (-(2f64.powi(63)), -(2f32.powi(63)))
        );
        assert_eq!(
            one(T::U64, &u64::MAX.to_le_bytes()),
            (2f64.powi(64), 2f32.powi(64))
        );
        // Just above an f32 tie, but within half an f64 ulp of it: once
        // rounded, up (numpy); through f64 it would tie and go down.
        let x = (1i64 << 62) + (1 << 38) + 1;
        let (wide, narrow) = one(T::I64, &x.to_le_bytes());
        assert_eq!(wide, 2f64.powi(62) + 2f64.powi(38));
        assert_eq!(narrow, 2f32.powi(62) + 2f32.powi(39));
        assert_eq!(wide as f32, 2f32.powi(62), "the double rounding avoided");
        let (_, narrow) = one(T::U64, &((1u64 << 63) + (1 << 39) + 1).to_le_bytes());
        assert_eq!(narrow, 2f32.powi(63) + 2f32.powi(40));
    }

    #[test]
    fn f64_narrowing_rounds_to_nearest_even() {
        let values = [
            1.0 + 2f64.powi(-24),                  // a tie: to even, 1.0
            1.0 + 3.0 * 2f64.powi(-24),            // a tie: to even, 1 + 2^-22
            1.0 + 2f64.powi(-24) + 2f64.powi(-50), // just above a tie: up
            1e-46,                                 // below f32's smallest subnormal
            3e-45,                                 // a subnormal
            f64::from(f32::MAX) * 1.5,             // overflow
            -1e300,
            f64::NAN,
            f64::NEG_INFINITY,
        ];
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut out = [0f32; 9];
        f64s_to_f32(&bytes, &mut out);
        assert_eq!(out[0], 1.0);
        assert_eq!(out[1], 1.0 + 2f32.powi(-22));
        assert_eq!(out[2], 1.0 + 2f32.powi(-23));
        assert_eq!(out[3], 0.0);
        assert_eq!(out[4], f32::from_bits(2));
        assert_eq!(out[5], f32::INFINITY);
        assert_eq!(out[6], f32::NEG_INFINITY);
        assert!(out[7].is_nan());
        assert_eq!(out[8], f32::NEG_INFINITY);
    }

    #[test]
    fn every_16_bit_pattern_converts_as_half_and_the_old_code_did() {
        for h in 0..=u16::MAX {
            let v = f16_to_f32(h);
            assert_eq!(v.to_bits(), half::f16::from_bits(h).to_f32().to_bits());
            assert!(same(v, old::f16_to_f32(h)), "{h:#06x}");
            assert_eq!(v.is_nan(), (h & 0x7fff) > 0x7c00, "{h:#06x}");
            if v.is_nan() {
                assert!(f16_to_f32(f32_to_f16(v)).is_nan());
            } else {
                assert_eq!(f32_to_f16(v), h, "{h:#06x} -> {v}");
            }
            let b = bf16_to_f32(h);
            assert_eq!(b.to_bits(), half::bf16::from_bits(h).to_f32().to_bits());
            assert!(same(b, f32::from_bits(u32::from(h) << 16)), "{h:#06x}");
            assert_eq!(f32_to_bf16(b), old::f32_to_bf16(b), "{h:#06x}");
        }
    }

    #[test]
    fn narrowing_rounds_to_nearest_even_as_before() {
        // Every top half with the low bits that decide rounding for both
        // targets: exact, just below, at and just above each halfway point.
        let lows = [
            0u32, 1, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x2000, 0x3000, 0x7fff, 0x8000, 0x8001,
            0xafff, 0xb000, 0xb001, 0xffff,
        ];
        for top in 0..=u32::from(u16::MAX) {
            for low in lows {
                let v = f32::from_bits(top << 16 | low);
                assert_eq!(f32_to_bf16(v), old::f32_to_bf16(v), "{:#010x}", v.to_bits());
                assert_eq!(
                    f32_to_bf16(v),
                    half::bf16::from_f32(v).to_bits(),
                    "{:#010x}",
                    v.to_bits()
                );
                let (new, was) = (f32_to_f16(v), old::f32_to_f16(v));
                if v.is_nan() {
                    assert!(f16_to_f32(new).is_nan() && f16_to_f32(was).is_nan());
                    assert_eq!(new & 0x8000, was & 0x8000, "NaN keeps its sign");
                } else {
                    assert_eq!(new, was, "{:#010x}", v.to_bits());
                }
            }
        }
    }

    #[test]
    fn slice_conversion_equals_the_scalar_one() {
        let bytes: Vec<u8> = (0..=u16::MAX).flat_map(|h| h.to_le_bytes()).collect();
        for bf16 in [false, true] {
            // Lengths off the internal block size, and a short input.
            for n in [0usize, 1, 255, 256, 257, 65536] {
                let mut out = vec![7.5f32; n];
                halves_to_f32(bf16, &bytes[..2 * n], &mut out);
                for (h, &v) in (0..=u16::MAX).zip(&out) {
                    let want = if bf16 { bf16_to_f32(h) } else { f16_to_f32(h) };
                    assert!(same(v, want), "{h:#06x}");
                }
            }
            let mut out = [7.5f32; 4];
            halves_to_f32(bf16, &bytes[..5], &mut out);
            assert_eq!(out[2..], [7.5, 7.5]);
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
