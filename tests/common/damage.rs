//! Damage that every rule accepts, done to one packed q4 tensor of a
//! bundle copy (codes and scales stay valid, the payload is re-hashed):
//! the corpus the peer comparison is calibrated on (tests/peers.rs).

use super::TestBundle;
use super::codes::{get_code, set_code};

/// The kinds of damage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Damage {
    /// 30% of the codes pushed to the two extreme levels.
    Extremes,
    /// 5% of the rows with scales 16× too large.
    RowScales,
    /// Every scale 4× too large.
    TensorScales,
    /// The bytes of the same tensor of another layer.
    CopiedLayer,
    /// 5% of the rows' codes all at the zero level.
    ZeroedRows,
    /// Every level one up (the top level stays).
    ShiftedLevels,
}

impl Damage {
    pub const ALL: [Damage; 6] = [
        Damage::Extremes,
        Damage::RowScales,
        Damage::TensorScales,
        Damage::CopiedLayer,
        Damage::ZeroedRows,
        Damage::ShiftedLevels,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Damage::Extremes => "30% of codes pushed to the extreme levels",
            Damage::RowScales => "5% of rows with scales 16× too large",
            Damage::TensorScales => "every scale 4× too large",
            Damage::CopiedLayer => "bytes copied from the same tensor of layer 0",
            Damage::ZeroedRows => "5% of rows zeroed (all codes at level 0)",
            Damage::ShiftedLevels => "every level shifted up by one",
        }
    }
}

/// A deterministic hash of a position, for choosing codes.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `h` times 2^k as an F16 pattern (an exponent shift); stays finite.
fn f16_times_pow2(h: u16, k: u16) -> u16 {
    let exp = (h >> 10) & 0x1f;
    assert!(
        exp > 0 && exp + k < 31,
        "scale {h:#06x} cannot be scaled by 2^{k}"
    );
    h + (k << 10)
}

/// Applies `d` to q4 tensor `target` (`donor`: the tensor copied from).
pub fn apply(b: &TestBundle, d: Damage, target: &str, donor: &str) {
    let rec = b.record(target);
    assert_eq!(rec["precision"], "q4", "the corpus damages q4 tensors");
    let off = rec["offset"].as_u64().unwrap() as usize;
    let bytes = rec["bytes"].as_u64().unwrap() as usize;
    let row_bytes = rec["row_bytes"].as_u64().unwrap() as usize;
    let rows = rec["shape"][0].as_u64().unwrap() as usize;
    let cols = rec["shape"][1].as_u64().unwrap() as usize;
    let scales_at = rec["scales_offset"].as_u64().unwrap() as usize;
    let groups = cols / 64;
    let (bits, max, zero) = (4usize, 14u8, 7u8);
    let drec = b.record(donor);
    let doff = drec["offset"].as_u64().unwrap() as usize;
    b.patch_payload(true, |p| {
        let every_20th = |r: usize| r % 20 == 3;
        match d {
            Damage::CopiedLayer => {
                let src = p[doff..doff + bytes].to_vec();
                p[off..off + bytes].copy_from_slice(&src);
            }
            Damage::RowScales | Damage::TensorScales => {
                for r in 0..rows {
                    let k = match d {
                        Damage::RowScales if every_20th(r) => 4,
                        Damage::TensorScales => 2,
                        _ => continue,
                    };
                    for g in 0..groups {
                        let at = scales_at + (r * groups + g) * 2;
                        let h = u16::from_le_bytes([p[at], p[at + 1]]);
                        p[at..at + 2].copy_from_slice(&f16_times_pow2(h, k).to_le_bytes());
                    }
                }
            }
            Damage::Extremes | Damage::ZeroedRows | Damage::ShiftedLevels => {
                for r in 0..rows {
                    if d == Damage::ZeroedRows && !every_20th(r) {
                        continue;
                    }
                    let row = &mut p[off + r * row_bytes..off + (r + 1) * row_bytes];
                    for j in 0..cols {
                        let c = get_code(row, bits, j);
                        let new = match d {
                            Damage::Extremes => {
                                let h = mix((r * cols + j) as u64);
                                if h % 10 >= 3 {
                                    continue;
                                }
                                if h & 1024 == 0 { 0 } else { max }
                            }
                            Damage::ZeroedRows => zero,
                            _ => (c + 1).min(max),
                        };
                        set_code(row, bits, j, new);
                    }
                }
            }
        }
    });
}
