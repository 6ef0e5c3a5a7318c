//! Packed codes read and written one bit at a time (independent of the
//! decoder), and a helper that re-codes part of a tensor in a sample copy.

use super::TestBundle;

/// Bits and largest valid code of a packed precision.
pub fn bits_and_max(precision: &str) -> (usize, u8) {
    match precision {
        "q3" => (3, 6),
        "q3_full8" => (3, 7),
        "q4" => (4, 14),
        p => panic!("not packed: {p}"),
    }
}

/// Code `j` of an LSB-first stream of `bits`-bit codes.
pub fn get_code(row: &[u8], bits: usize, j: usize) -> u8 {
    (0..bits).fold(0, |c, k| {
        let bit = j * bits + k;
        c | ((row[bit / 8] >> (bit % 8)) & 1) << k
    })
}

/// Sets code `j` of an LSB-first stream of `bits`-bit codes.
pub fn set_code(row: &mut [u8], bits: usize, j: usize, code: u8) {
    for k in 0..bits {
        let bit = j * bits + k;
        row[bit / 8] &= !(1 << (bit % 8));
        row[bit / 8] |= ((code >> k) & 1) << (bit % 8);
    }
}

/// Moves the first `count` codes of row 0 of packed tensor `name` by one
/// level (staying valid) and re-hashes the payload.
pub fn recode(b: &TestBundle, name: &str, count: usize) {
    let rec = b.record(name);
    let (bits, max) = bits_and_max(rec["precision"].as_str().unwrap());
    let off = rec["offset"].as_u64().unwrap() as usize;
    let row_bytes = rec["row_bytes"].as_u64().unwrap() as usize;
    b.patch_payload(true, |p| {
        let row = &mut p[off..off + row_bytes];
        for j in 0..count {
            let c = get_code(row, bits, j);
            set_code(row, bits, j, if c < max { c + 1 } else { c - 1 });
        }
    });
}

/// Histogram of the stored codes of packed tensor `name` in `payload`.
pub fn count_codes(b: &TestBundle, payload: &[u8], name: &str) -> Vec<u64> {
    let rec = b.record(name);
    let (bits, _) = bits_and_max(rec["precision"].as_str().unwrap());
    let off = rec["offset"].as_u64().unwrap() as usize;
    let row_bytes = rec["row_bytes"].as_u64().unwrap() as usize;
    let rows = rec["shape"][0].as_u64().unwrap() as usize;
    let cols = rec["shape"][1].as_u64().unwrap() as usize;
    let mut counts = vec![0u64; 1 << bits];
    for r in 0..rows {
        let row = &payload[off + r * row_bytes..off + (r + 1) * row_bytes];
        for j in 0..cols {
            counts[get_code(row, bits, j) as usize] += 1;
        }
    }
    counts
}

/// Names of the q4 tensors no alias points at, in manifest order.
pub fn plain_q4(b: &TestBundle) -> Vec<String> {
    let m = b.manifest();
    let targets: Vec<&str> = m["aliases"]
        .as_object()
        .map(|a| a.values().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    m["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["precision"] == "q4")
        .map(|r| r["name"].as_str().unwrap())
        .filter(|n| !targets.contains(n))
        .map(str::to_string)
        .collect()
}
