//! Safetensors files, read strictly and written simply.
//!
//! A file is an 8-byte little-endian header length `N`, `N` bytes of JSON
//! (`{name: {dtype, shape, data_offsets: [begin, end]}}` plus an optional
//! `__metadata__` map of strings), then the data; offsets are relative to the
//! end of the header.
//!
//! [`parse_header`] takes the whole file as a byte slice (a memory map: only
//! the header's pages are touched) and reports every violation it finds, each
//! naming the file, the tensor and the absolute byte offset. The `safetensors`
//! crate's own validation runs as well, as a second opinion: a file it rejects
//! can never pass.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use serde_json::{Map, Value};

use crate::finding::Finding;
use crate::finding::checks as c;

/// Largest header bundlescope parses (the `safetensors` crate's own limit).
pub const MAX_HEADER_BYTES: u64 = 100_000_000;

/// Most entries one header may list (tensors and `__metadata__`). Every
/// tensor costs the audit a few KiB (its record, statistics and report row),
/// so this bounds an audit's memory whatever a header claims; real
/// checkpoints list at most a few thousand per shard.
pub const MAX_TENSORS: usize = 32_768;

/// The number of entries of a JSON object's top level (its commas outside
/// strings at depth 1, plus one), counted without parsing, stopping once it
/// passes `cap`. Escapes inside strings are honoured; malformed JSON just
/// gives some count, which the parser then rejects.
pub fn count_entries(json: &[u8], cap: usize) -> usize {
    let (mut depth, mut in_string, mut escaped) = (0u32, false, false);
    let (mut commas, mut any) = (0usize, false);
    for &b in json {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => {
                in_string = true;
                any |= depth == 1;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth = depth.saturating_sub(1),
            b',' if depth == 1 => {
                commas += 1;
                if commas > cap {
                    return commas + 1;
                }
            }
            _ => {}
        }
    }
    if any { commas + 1 } else { 0 }
}

/// Bytes per element of a safetensors dtype, for the dtypes bundlescope knows.
pub fn dtype_size(dtype: &str) -> Option<u64> {
    Some(match dtype {
        "BOOL" | "U8" | "I8" | "F8_E4M3" | "F8_E5M2" | "F8_E8M0" => 1,
        "U16" | "I16" | "F16" | "BF16" => 2,
        "U32" | "I32" | "F32" => 4,
        "U64" | "I64" | "F64" => 8,
        _ => return None,
    })
}

/// Bits per element of a safetensors dtype, including the sub-byte ones
/// (`F4`, `F6_E2M3`, `F6_E3M2`) that [`dtype_size`] cannot express.
pub fn dtype_bits(dtype: &str) -> Option<u64> {
    match dtype {
        "F4" => Some(4),
        "F6_E2M3" | "F6_E3M2" => Some(6),
        d => dtype_size(d).map(|b| b * 8),
    }
}

/// Bytes of `prod(shape)` elements of `dtype`, when the dtype is known, the
/// product fits and (for sub-byte dtypes) it fills whole bytes.
pub fn tensor_bytes(dtype: &str, shape: &[u64]) -> Option<u64> {
    let bits = shape
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d))?
        .checked_mul(dtype_bits(dtype)?)?;
    bits.is_multiple_of(8).then_some(bits / 8)
}

/// One tensor of a parsed header. `begin`/`end` are absolute file offsets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StTensor {
    /// Tensor name.
    pub name: String,
    /// Dtype as written (`BF16`, `U32`, ...).
    pub dtype: String,
    /// Shape.
    pub shape: Vec<u64>,
    /// Absolute offset of the first byte.
    pub begin: u64,
    /// Absolute offset one past the last byte.
    pub end: u64,
}

/// A parsed, validated header.
#[derive(Debug, Clone, Default)]
pub struct Header {
    /// Absolute offset where the data section starts (`8 + N`).
    pub data_start: u64,
    /// Tensors in file order (ascending offsets).
    pub tensors: Vec<StTensor>,
    /// The `__metadata__` map, if any.
    pub metadata: Vec<(String, String)>,
}

fn header_err(file: &str, msg: String) -> Finding {
    Finding::error(c::SHARD_HEADER, format!("{file}: {msg}")).field(file.to_string())
}

/// Parses and validates the header of a safetensors file whose entire
/// content is `bytes`. On any violation, returns every finding it could make.
pub fn parse_header(file: &str, bytes: &[u8]) -> Result<Header, Vec<Finding>> {
    let len = bytes.len() as u64;
    let Some(prefix) = bytes.get(..8) else {
        return Err(vec![
            header_err(
                file,
                format!("is {len} bytes, too short for the 8-byte header length"),
            )
            .offset(0),
        ]);
    };
    let mut word = [0u8; 8];
    word.copy_from_slice(prefix);
    let n = u64::from_le_bytes(word);
    if n > MAX_HEADER_BYTES {
        return Err(vec![
            header_err(
                file,
                format!("header length is {n} bytes, over the {MAX_HEADER_BYTES}-byte limit"),
            )
            .offset(0),
        ]);
    }
    if n > len - 8 {
        return Err(vec![
            header_err(
                file,
                format!(
                    "header length is {n} bytes but only {} bytes follow it",
                    len - 8
                ),
            )
            .offset(0),
        ]);
    }
    let data_start = 8 + n;
    let json = &bytes[8..data_start as usize];
    let entries = count_entries(json, MAX_TENSORS);
    if entries > MAX_TENSORS {
        return Err(vec![
            header_err(
                file,
                format!(
                    "header lists more than {MAX_TENSORS} entries ({} or more); bundlescope reads at most {MAX_TENSORS} tensors per file",
                    entries
                ),
            )
            .offset(8),
        ]);
    }
    let data_len = len - data_start;
    // A well-formed header goes through typed, borrowed deserialisation;
    // anything it does not take (a wrong type, a missing or unknown key, an
    // escaped name, a duplicate, an unknown dtype) is read again below as a
    // `Value`, which names every violation.
    if let Some(header) = fast_header(file, json, data_start) {
        return finish(file, bytes, header, data_len, Vec::new());
    }
    let values = super::json::count_values(json);
    if values > super::json::MAX_VALUES {
        return Err(vec![
            header_err(
                file,
                format!(
                    "header holds about {values} JSON values, over the limit of {}",
                    super::json::MAX_VALUES
                ),
            )
            .offset(8),
        ]);
    }
    let value: Value = match serde_json::from_slice(json) {
        Ok(v) => v,
        Err(e) => {
            return Err(vec![
                header_err(file, format!("header is not valid JSON: {e}")).offset(8),
            ]);
        }
    };
    let Some(object) = value.as_object() else {
        return Err(vec![
            header_err(
                file,
                format!("header is {}, not a JSON object", super::json::kind(&value)),
            )
            .offset(8),
        ]);
    };
    let mut findings = Vec::new();
    let mut header = Header {
        data_start,
        ..Default::default()
    };
    for (name, entry) in object {
        if name == "__metadata__" {
            metadata(file, entry, &mut header, &mut findings);
            continue;
        }
        if let Some(t) = tensor_entry(file, name, entry, data_start, &mut findings) {
            header.tensors.push(t);
        }
    }
    finish(file, bytes, header, data_len, findings)
}

/// The offset checks and the `safetensors` crate's second opinion.
fn finish(
    file: &str,
    bytes: &[u8],
    mut header: Header,
    data_len: u64,
    mut findings: Vec<Finding>,
) -> Result<Header, Vec<Finding>> {
    check_offsets(file, &mut header, data_len, &mut findings);
    if findings.is_empty()
        && let Err(e) = ::safetensors::SafeTensors::read_metadata(bytes)
    {
        findings.push(header_err(
            file,
            format!("rejected by the safetensors reader: {e}"),
        ));
    }
    if findings.is_empty() {
        Ok(header)
    } else {
        Err(findings)
    }
}

/// One tensor entry exactly as the format writes it.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTensor<'a> {
    #[serde(borrow)]
    dtype: &'a str,
    shape: Vec<u64>,
    data_offsets: [u64; 2],
}

/// The header's entries in file order, names borrowed from the JSON.
#[derive(Default)]
struct RawHeader<'a> {
    tensors: Vec<(&'a str, RawTensor<'a>)>,
    metadata: Option<Value>,
}

impl<'de> serde::Deserialize<'de> for RawHeader<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = RawHeader<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a safetensors header object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut out = RawHeader::default();
                while let Some(key) = map.next_key::<&'de str>()? {
                    if key == "__metadata__" {
                        if out.metadata.is_some() {
                            return Err(serde::de::Error::custom("duplicate __metadata__"));
                        }
                        out.metadata = Some(map.next_value()?);
                    } else {
                        out.tensors.push((key, map.next_value()?));
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_map(V)
    }
}

/// The header of a well-formed file without building a `Value` per entry,
/// or `None` when any entry needs the full reading (which reports it).
fn fast_header(file: &str, json: &[u8], data_start: u64) -> Option<Header> {
    let raw: RawHeader<'_> = serde_json::from_slice(json).ok()?;
    let mut seen = std::collections::HashSet::with_capacity(raw.tensors.len());
    if !raw.tensors.iter().all(|(name, _)| seen.insert(*name)) {
        return None; // a repeated name: the full reading keeps the last
    }
    let mut header = Header {
        data_start,
        ..Default::default()
    };
    if let Some(m) = &raw.metadata {
        let mut findings = Vec::new();
        metadata(file, m, &mut header, &mut findings);
        if !findings.is_empty() {
            return None;
        }
    }
    header.tensors.reserve_exact(raw.tensors.len());
    for (name, t) in raw.tensors {
        dtype_bits(t.dtype)?;
        let [b, e] = t.data_offsets;
        header.tensors.push(StTensor {
            name: name.to_string(),
            dtype: t.dtype.to_string(),
            shape: t.shape,
            begin: data_start.checked_add(b)?,
            end: data_start.checked_add(e)?,
        });
    }
    Some(header)
}

fn metadata(file: &str, entry: &Value, header: &mut Header, findings: &mut Vec<Finding>) {
    if entry.is_null() {
        return; // MLX writes `"__metadata__": null`; the format allows it.
    }
    let Some(map) = entry.as_object() else {
        findings.push(
            header_err(
                file,
                format!(
                    "__metadata__ is {}, expected an object of strings",
                    super::json::kind(entry)
                ),
            )
            .offset(8),
        );
        return;
    };
    for (k, v) in map {
        match v.as_str() {
            Some(s) => header.metadata.push((k.clone(), s.to_string())),
            None => findings.push(
                header_err(
                    file,
                    format!(
                        "__metadata__[{k:?}] is {}, expected a string",
                        super::json::kind(v)
                    ),
                )
                .offset(8),
            ),
        }
    }
}

fn tensor_entry(
    file: &str,
    name: &str,
    entry: &Value,
    data_start: u64,
    findings: &mut Vec<Finding>,
) -> Option<StTensor> {
    let bad = |msg: String| header_err(file, msg).tensor(name.to_string()).offset(8);
    let Some(obj) = entry.as_object() else {
        findings.push(bad(format!(
            "entry {name:?} is {}, expected an object with dtype, shape and data_offsets",
            super::json::kind(entry)
        )));
        return None;
    };
    let mut ok = true;
    let dtype = match obj.get("dtype").and_then(Value::as_str) {
        Some(d) if dtype_bits(d).is_some() => Some(d.to_string()),
        Some(d) => {
            findings.push(bad(format!("tensor {name:?} has unknown dtype {d:?}")));
            None
        }
        None => {
            findings.push(bad(format!("tensor {name:?} has no string 'dtype'")));
            None
        }
    };
    let shape = uint_list(obj, "shape");
    if shape.is_none() {
        findings.push(bad(format!(
            "tensor {name:?}: 'shape' must be a list of non-negative integers"
        )));
        ok = false;
    }
    let offsets = uint_list(obj, "data_offsets").filter(|o| o.len() == 2);
    if offsets.is_none() {
        findings.push(bad(format!(
            "tensor {name:?}: 'data_offsets' must be [begin, end] (non-negative integers)"
        )));
        ok = false;
    }
    let unknown: Vec<&String> = obj
        .keys()
        .filter(|k| !matches!(k.as_str(), "dtype" | "shape" | "data_offsets"))
        .collect();
    if !unknown.is_empty() {
        findings.push(bad(format!(
            "tensor {name:?} has unexpected keys {unknown:?}"
        )));
    }
    let (dtype, shape, offsets) = (dtype?, shape?, offsets?);
    if !ok {
        return None;
    }
    let (Some(begin), Some(end)) = (
        data_start.checked_add(offsets[0]),
        data_start.checked_add(offsets[1]),
    ) else {
        findings.push(bad(format!(
            "tensor {name:?}: data_offsets {offsets:?} overflow"
        )));
        return None;
    };
    Some(StTensor {
        name: name.to_string(),
        dtype,
        shape,
        begin,
        end,
    })
}

fn uint_list(obj: &Map<String, Value>, key: &str) -> Option<Vec<u64>> {
    obj.get(key)?
        .as_array()?
        .iter()
        .map(Value::as_u64)
        .collect()
}

/// Offsets in bounds, in order, contiguous, covering the data, each span
/// equal to `prod(shape) * itemsize`.
fn check_offsets(file: &str, header: &mut Header, data_len: u64, findings: &mut Vec<Finding>) {
    let data_start = header.data_start;
    let data_end = data_start + data_len;
    header.tensors.sort_by_key(|t| (t.begin, t.end));
    let mut cursor = data_start;
    let mut previous: Option<String> = None;
    let mut broken = Vec::new();
    for (i, t) in header.tensors.iter().enumerate() {
        let err = |msg: String| {
            Finding::error(c::SHARD_OFFSETS, format!("{file}: {msg}"))
                .field(file.to_string())
                .tensor(t.name.clone())
                .offset(t.begin)
        };
        let mut bad = false;
        if t.end < t.begin {
            findings.push(err(format!(
                "tensor {:?} ends (byte {}) before it begins (byte {})",
                t.name, t.end, t.begin
            )));
            broken.push(i);
            continue;
        }
        if t.end > data_end {
            findings.push(err(format!(
                "tensor {:?} spans bytes {}..{}, past the end of the file ({data_end} bytes)",
                t.name, t.begin, t.end
            )));
            bad = true;
        }
        if t.begin < cursor {
            findings.push(err(format!(
                "tensor {:?} (bytes {}..{}) overlaps {} which ends at byte {cursor}",
                t.name,
                t.begin,
                t.end,
                previous
                    .as_deref()
                    .map_or("the header".to_string(), |p| format!("{p:?}"))
            )));
            bad = true;
        } else if t.begin > cursor {
            findings.push(err(format!(
                "{} unreferenced bytes {cursor}..{} lie before tensor {:?}",
                t.begin - cursor,
                t.begin,
                t.name
            )));
        }
        let expected = tensor_bytes(&t.dtype, &t.shape);
        match expected {
            Some(e) if e == t.end - t.begin => {}
            Some(e) => {
                findings.push(err(format!(
                    "tensor {:?} is {} {:?} = {e} bytes but its data_offsets span {} bytes",
                    t.name,
                    t.dtype,
                    t.shape,
                    t.end - t.begin
                )));
                bad = true;
            }
            None => {
                findings.push(err(format!(
                    "tensor {:?}: shape {:?} of {} overflows 64 bits or does not fill whole bytes",
                    t.name, t.shape, t.dtype
                )));
                bad = true;
            }
        }
        if bad {
            broken.push(i);
        }
        cursor = cursor.max(t.end);
        previous = Some(t.name.clone());
    }
    if cursor < data_end {
        findings.push(
            Finding::error(
                c::SHARD_OFFSETS,
                format!(
                    "{file}: {} bytes at {cursor}..{data_end} after the last tensor are not referenced by any tensor",
                    data_end - cursor
                ),
            )
            .field(file.to_string())
            .offset(cursor),
        );
    }
    // One sweep: removing them one by one shifts the good entries after
    // each (quadratic when broken and good entries alternate).
    let mut broken = broken.into_iter().peekable();
    let mut i = 0;
    header.tensors.retain(|_| {
        let keep = broken.next_if_eq(&i).is_none();
        i += 1;
        keep
    });
}

/// A tensor to write.
pub struct WriteTensor<'a> {
    /// Name.
    pub name: &'a str,
    /// Dtype (`BF16`, `F16`, `F32`, `U8`, `U32`, ...).
    pub dtype: &'a str,
    /// Shape.
    pub shape: &'a [u64],
    /// Little-endian bytes, exactly `prod(shape) * itemsize`.
    pub data: &'a [u8],
}

/// The header of a file holding `entries` (name, dtype, shape) in order,
/// padded with spaces to a multiple of 8 bytes, length prefix included.
pub fn header_bytes(entries: &[(&str, &str, &[u64])], metadata: &[(&str, &str)]) -> Vec<u8> {
    let mut map = Map::new();
    if !metadata.is_empty() {
        let m: Map<String, Value> = metadata
            .iter()
            .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
            .collect();
        map.insert("__metadata__".into(), Value::Object(m));
    }
    let mut offset = 0u64;
    for (name, dtype, shape) in entries {
        let n = shape.iter().product::<u64>() * dtype_size(dtype).unwrap_or(1);
        map.insert(
            name.to_string(),
            serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}),
        );
        offset += n;
    }
    let mut json = serde_json::to_vec(&Value::Object(map)).unwrap_or_default();
    while !json.len().is_multiple_of(8) {
        json.push(b' ');
    }
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&json);
    out
}

/// Writes a safetensors file.
pub fn write(path: &Path, tensors: &[WriteTensor<'_>]) -> std::io::Result<()> {
    write_with_metadata(path, tensors, &[])
}

/// Writes a safetensors file with a `__metadata__` map (MLX writes
/// `{"format": "mlx"}`).
pub fn write_with_metadata(
    path: &Path,
    tensors: &[WriteTensor<'_>],
    metadata: &[(&str, &str)],
) -> std::io::Result<()> {
    let entries: Vec<(&str, &str, &[u64])> =
        tensors.iter().map(|t| (t.name, t.dtype, t.shape)).collect();
    let mut w = BufWriter::new(File::create(path)?);
    w.write_all(&header_bytes(&entries, metadata))?;
    for t in tensors {
        let expected = t.shape.iter().product::<u64>() * dtype_size(t.dtype).unwrap_or(1);
        if expected != t.data.len() as u64 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "{}: {} bytes given, {} {:?} needs {expected}",
                    t.name,
                    t.data.len(),
                    t.dtype,
                    t.shape
                ),
            ));
        }
        w.write_all(t.data)?;
    }
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_counted_outside_strings_and_nested_values() {
        // Independent count: serde_json's own parse of the same objects.
        for json in [
            r#"{}"#,
            r#"{"a":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]}}"#,
            r#"{"a,b":{"x":[1,2,3]},"c\",\"d":{},"__metadata__":{"k":"v,w"}}"#,
            r#"{ "q\\": [ {"x": ","}, "]" ], "r": 1 }"#,
        ] {
            let parsed: serde_json::Map<String, Value> = serde_json::from_str(json).unwrap();
            assert_eq!(count_entries(json.as_bytes(), 100), parsed.len(), "{json}");
        }
        // Stops once past the cap.
        let many = format!(
            "{{{}}}",
            (0..1000)
                .map(|i| format!("\"{i}\":0"))
                .collect::<Vec<_>>()
                .join(",")
        );
        assert_eq!(count_entries(many.as_bytes(), 10), 12);
    }

    fn file(entries: &[(&str, &str, &[u64])], data: &[u8]) -> Vec<u8> {
        let mut b = header_bytes(entries, &[("format", "pt")]);
        b.extend_from_slice(data);
        b
    }

    #[test]
    fn written_headers_parse_back() {
        let b = file(
            &[
                ("a", "BF16", &[2, 3]),
                ("b", "U32", &[1]),
                ("e", "F32", &[0]),
            ],
            &[7u8; 16],
        );
        let h = parse_header("x.safetensors", &b).unwrap();
        assert_eq!(h.tensors.len(), 3);
        assert_eq!(h.tensors[0].name, "a");
        assert_eq!(h.tensors[0].begin, h.data_start);
        assert_eq!(h.tensors[1].end, b.len() as u64);
        assert_eq!(h.metadata, vec![("format".into(), "pt".into())]);
    }

    #[test]
    fn violations_name_file_tensor_and_offset() {
        // Declared span 12 but shape needs 8: wrong size, and 4 bytes unreferenced.
        let b = file(&[("a", "F32", &[2])], &[0u8; 12]);
        let text = String::from_utf8(b[8..b.len() - 12].to_vec()).unwrap();
        let text = text.trim_end().replace("[0,8]", "[0,12]");
        assert!(text.contains("[0,12]"), "{text}");
        let mut b = (text.len() as u64).to_le_bytes().to_vec();
        b.extend_from_slice(text.as_bytes());
        let json_end = b.len();
        b.extend_from_slice(&[0u8; 12]);
        let f = parse_header("s.safetensors", &b).unwrap_err();
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].check, c::SHARD_OFFSETS);
        assert_eq!(f[0].tensor.as_deref(), Some("a"));
        assert_eq!(f[0].offset, Some(json_end as u64));
        assert!(f[0].message.contains("s.safetensors"));
    }

    /// The header as the full `Value` reading gives it.
    fn slow(file: &str, bytes: &[u8]) -> Header {
        let n = u64::from_le_bytes(bytes[..8].try_into().unwrap());
        let value: Value = serde_json::from_slice(&bytes[8..8 + n as usize]).unwrap();
        let mut h = Header {
            data_start: 8 + n,
            ..Default::default()
        };
        let mut f = Vec::new();
        for (name, entry) in value.as_object().unwrap() {
            if name == "__metadata__" {
                metadata(file, entry, &mut h, &mut f);
            } else {
                h.tensors
                    .extend(tensor_entry(file, name, entry, 8 + n, &mut f));
            }
        }
        check_offsets(file, &mut h, bytes.len() as u64 - 8 - n, &mut f);
        assert!(f.is_empty(), "{f:?}");
        h
    }

    fn raw(json: &str, data: usize) -> Vec<u8> {
        let mut b = (json.len() as u64).to_le_bytes().to_vec();
        b.extend_from_slice(json.as_bytes());
        b.extend(std::iter::repeat_n(0u8, data));
        b
    }

    #[test]
    fn the_typed_reading_equals_the_value_reading() {
        // Zero-length tensors share offsets: their order is the file's.
        let b = raw(
            r#"{"z":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},"__metadata__":{"k":"v","a":"b"},"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},"m":{"shape":[2],"dtype":"BF16","data_offsets":[0,4]}}"#,
            4,
        );
        assert!(fast_header("f", &b[8..b.len() - 4], (b.len() - 4) as u64).is_some());
        let (h, s) = (parse_header("f", &b).unwrap(), slow("f", &b));
        assert_eq!(h.tensors, s.tensors);
        assert_eq!(h.metadata, s.metadata);
        assert_eq!(h.tensors[0].name, "z");
        // An escaped name and a repeated name take the
        // full reading, which keeps the last of a repeated entry.
        for json in [
            r#"{"a\u0041":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#,
            r#"{"a":{"dtype":"F32","shape":[9],"data_offsets":[0,36]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#,
        ] {
            let b = raw(json, 4);
            assert!(fast_header("f", &b[8..b.len() - 4], (b.len() - 4) as u64).is_none());
            let (h, s) = (parse_header("f", &b).unwrap(), slow("f", &b));
            assert_eq!(h.tensors, s.tensors);
        }
        let b = raw(
            r#"{"__metadata__":null,"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#,
            4,
        );
        assert!(parse_header("f", &b).unwrap().metadata.is_empty());
    }

    #[test]
    fn hostile_lengths_are_refused_without_allocating() {
        let mut b = vec![0u8; 16];
        b[..8].copy_from_slice(&(1u64 << 62).to_le_bytes());
        let f = parse_header("h.safetensors", &b).unwrap_err();
        assert_eq!(f[0].check, c::SHARD_HEADER);
        assert!(f[0].message.contains("limit"));
        b[..8].copy_from_slice(&9u64.to_le_bytes());
        let f = parse_header("h.safetensors", &b).unwrap_err();
        assert!(f[0].message.contains("only 8 bytes follow"), "{f:?}");
        assert!(parse_header("h", &[1, 2]).is_err());
    }
}
