//! The strict, bounded GGUF header parser: magic, version, counts, the
//! key/value metadata and the tensor infos. Every length and count is
//! checked against the bytes that remain before anything is allocated for
//! it, so a header cannot make bundlescope allocate what the file does not
//! hold. Offsets in findings are absolute byte offsets in the file.

use std::collections::HashMap;

use serde::Serialize;
use serde::ser::SerializeMap;

use crate::finding::checks as c;
use crate::finding::{CheckId, Finding};

/// Default `general.alignment`.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Most dimensions a ggml tensor has (`GGML_MAX_DIMS`).
pub const MAX_DIMS: u32 = 4;
/// Deepest array nesting read (gguf-py reads arrays of arrays).
const MAX_DEPTH: u32 = 3;
/// Arrays longer than this serialise as their type and count only.
pub const SHOWN_ITEMS: usize = 64;

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// UINT8.
    U8(u8),
    /// INT8.
    I8(i8),
    /// UINT16.
    U16(u16),
    /// INT16.
    I16(i16),
    /// UINT32.
    U32(u32),
    /// INT32.
    I32(i32),
    /// FLOAT32.
    F32(f32),
    /// BOOL.
    Bool(bool),
    /// STRING (UTF-8).
    Str(String),
    /// UINT64.
    U64(u64),
    /// INT64.
    I64(i64),
    /// FLOAT64.
    F64(f64),
    /// ARRAY: the item type's number and the items.
    Array(u32, Vec<Value>),
}

impl Value {
    /// The GGUF name of a value type number.
    pub fn type_name(t: u32) -> &'static str {
        match t {
            0 => "UINT8",
            1 => "INT8",
            2 => "UINT16",
            3 => "INT16",
            4 => "UINT32",
            5 => "INT32",
            6 => "FLOAT32",
            7 => "BOOL",
            8 => "STRING",
            9 => "ARRAY",
            10 => "UINT64",
            11 => "INT64",
            12 => "FLOAT64",
            _ => "unknown",
        }
    }

    /// This value's type name (`ARRAY[STRING]` for arrays).
    pub fn type_label(&self) -> String {
        match self {
            Value::Array(t, _) => format!("ARRAY[{}]", Value::type_name(*t)),
            Value::U8(_) => "UINT8".into(),
            Value::I8(_) => "INT8".into(),
            Value::U16(_) => "UINT16".into(),
            Value::I16(_) => "INT16".into(),
            Value::U32(_) => "UINT32".into(),
            Value::I32(_) => "INT32".into(),
            Value::F32(_) => "FLOAT32".into(),
            Value::Bool(_) => "BOOL".into(),
            Value::Str(_) => "STRING".into(),
            Value::U64(_) => "UINT64".into(),
            Value::I64(_) => "INT64".into(),
            Value::F64(_) => "FLOAT64".into(),
        }
    }

    /// The value as an unsigned integer, if it is a non-negative integer.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The string, for a STRING value.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// A short one-line rendering (arrays as their type and count).
    pub fn short(&self) -> String {
        match self {
            Value::Array(_, items) => format!("{} × {}", self.type_label(), items.len()),
            Value::Str(s) => {
                let first: String = s.chars().take(120).collect();
                if first.len() < s.len() {
                    format!("{first:?}…")
                } else {
                    format!("{s:?}")
                }
            }
            Value::U8(v) => v.to_string(),
            Value::I8(v) => v.to_string(),
            Value::U16(v) => v.to_string(),
            Value::I16(v) => v.to_string(),
            Value::U32(v) => v.to_string(),
            Value::I32(v) => v.to_string(),
            Value::F32(v) => v.to_string(),
            Value::Bool(v) => v.to_string(),
            Value::U64(v) => v.to_string(),
            Value::I64(v) => v.to_string(),
            Value::F64(v) => v.to_string(),
        }
    }
}

impl Serialize for Value {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Value::U8(v) => s.serialize_u8(*v),
            Value::I8(v) => s.serialize_i8(*v),
            Value::U16(v) => s.serialize_u16(*v),
            Value::I16(v) => s.serialize_i16(*v),
            Value::U32(v) => s.serialize_u32(*v),
            Value::I32(v) => s.serialize_i32(*v),
            Value::F32(v) => s.serialize_f32(*v),
            Value::Bool(v) => s.serialize_bool(*v),
            Value::Str(v) => s.serialize_str(v),
            Value::U64(v) => s.serialize_u64(*v),
            Value::I64(v) => s.serialize_i64(*v),
            Value::F64(v) => s.serialize_f64(*v),
            // A tokenizer's 250k strings do not belong in a report: long
            // arrays are their type and count.
            Value::Array(t, items) if items.len() > SHOWN_ITEMS => {
                let mut m = s.serialize_map(Some(2))?;
                m.serialize_entry("type", &format!("ARRAY[{}]", Value::type_name(*t)))?;
                m.serialize_entry("count", &items.len())?;
                m.end()
            }
            Value::Array(_, items) => items.serialize(s),
        }
    }
}

/// One key/value pair, with where it starts.
#[derive(Debug, Clone, Serialize)]
pub struct Kv {
    /// The key.
    pub key: String,
    /// The value.
    pub value: Value,
    /// Absolute offset of the key's length field.
    #[serde(skip)]
    pub offset: u64,
}

/// One tensor info as read (before the checks that need all of them).
#[derive(Debug, Clone)]
pub struct RawTensor {
    /// Name.
    pub name: String,
    /// `ne[]`, contiguous axis first.
    pub ne: Vec<u64>,
    /// Type number as stored.
    pub type_number: u32,
    /// Offset relative to the data section.
    pub offset: u64,
    /// Absolute offset of this tensor info in the file.
    pub info_offset: u64,
}

/// What the header holds.
#[derive(Debug, Clone, Default)]
pub struct Header {
    /// GGUF version (2 or 3 when valid).
    pub version: u32,
    /// Metadata, in file order.
    pub kvs: Vec<Kv>,
    /// Tensor infos, in file order.
    pub tensors: Vec<RawTensor>,
    /// `general.alignment` (or the default).
    pub alignment: u64,
    /// Absolute offset where the data section starts.
    pub data_start: u64,
    /// Whether the whole header was read (false after a structural error).
    pub complete: bool,
}

impl Header {
    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.kvs.iter().find(|kv| kv.key == key).map(|kv| &kv.value)
    }
}

/// A structural error: the header cannot be read past it.
struct Stop {
    check: CheckId,
    message: String,
    offset: u64,
    field: String,
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Array items read so far, against [`MAX_ARRAY_ITEMS`].
    items: u64,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], Stop> {
        let at = self.pos as u64;
        match self.buf.get(self.pos..self.pos.saturating_add(n)) {
            Some(s) if self.pos.checked_add(n).is_some() => {
                self.pos += n;
                Ok(s)
            }
            _ => Err(Stop {
                check: c::GGUF_HEADER,
                message: format!(
                    "the header ends inside {what}: {n} bytes needed at byte {at}, {} left in the file",
                    self.remaining()
                ),
                offset: at,
                field: what.to_string(),
            }),
        }
    }

    fn u32(&mut self, what: &str) -> Result<u32, Stop> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self, what: &str) -> Result<u64, Stop> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    fn string(&mut self, what: &str) -> Result<String, Stop> {
        let at = self.pos as u64;
        let len = self.u64(what)?;
        if len > self.remaining() {
            return Err(Stop {
                check: c::GGUF_STRING,
                message: format!(
                    "{what} claims {len} bytes at byte {at}, but only {} bytes follow in the file",
                    self.remaining()
                ),
                offset: at,
                field: what.to_string(),
            });
        }
        // Bounded by the check above: len <= remaining <= usize::MAX.
        let bytes = self.take(len as usize, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|e| Stop {
            check: c::GGUF_STRING,
            message: format!(
                "{what} at byte {at} is not UTF-8 (invalid byte at position {})",
                e.utf8_error().valid_up_to()
            ),
            offset: at + 8 + e.utf8_error().valid_up_to() as u64,
            field: what.to_string(),
        })
    }

    /// Smallest number of bytes one value of type `t` can take.
    fn min_size(t: u32) -> Option<u64> {
        Some(match t {
            0 | 1 | 7 => 1,
            2 | 3 => 2,
            4..=6 => 4,
            8 | 10..=12 => 8,
            9 => 12,
            _ => return None,
        })
    }

    fn value(&mut self, t: u32, depth: u32, what: &str) -> Result<Value, Stop> {
        let at = self.pos as u64;
        Ok(match t {
            0 => Value::U8(self.take(1, what)?[0]),
            1 => Value::I8(self.take(1, what)?[0] as i8),
            2 => {
                let b = self.take(2, what)?;
                Value::U16(u16::from_le_bytes([b[0], b[1]]))
            }
            3 => {
                let b = self.take(2, what)?;
                Value::I16(i16::from_le_bytes([b[0], b[1]]))
            }
            4 => Value::U32(self.u32(what)?),
            5 => Value::I32(self.u32(what)? as i32),
            6 => Value::F32(f32::from_bits(self.u32(what)?)),
            7 => Value::Bool(self.take(1, what)?[0] != 0),
            8 => Value::Str(self.string(what)?),
            10 => Value::U64(self.u64(what)?),
            11 => Value::I64(self.u64(what)? as i64),
            12 => Value::F64(f64::from_bits(self.u64(what)?)),
            9 => {
                if depth >= MAX_DEPTH {
                    return Err(Stop {
                        check: c::GGUF_KV_TYPE,
                        message: format!(
                            "{what} nests arrays deeper than {MAX_DEPTH} levels at byte {at}"
                        ),
                        offset: at,
                        field: what.to_string(),
                    });
                }
                let item_at = self.pos as u64;
                let item = self.u32(what)?;
                let Some(min) = Self::min_size(item) else {
                    return Err(unknown_type(item, item_at, what, true));
                };
                let count_at = self.pos as u64;
                let count = self.u64(what)?;
                // Checked before any allocation: each item takes at least
                // `min` bytes, so the file bounds the count.
                if count.checked_mul(min).is_none_or(|n| n > self.remaining()) {
                    return Err(Stop {
                        check: c::GGUF_COUNTS,
                        message: format!(
                            "{what} claims {count} items of {} at byte {count_at}, but only {} bytes follow (at least {min} bytes an item)",
                            Value::type_name(item),
                            self.remaining()
                        ),
                        offset: count_at,
                        field: what.to_string(),
                    });
                }
                // Each item is kept as a value of a few dozen bytes, more
                // than the byte it may take in the file: the items of all
                // arrays together are bounded.
                self.items = self.items.saturating_add(count);
                if self.items > MAX_ARRAY_ITEMS {
                    return Err(Stop {
                        check: c::GGUF_COUNTS,
                        message: format!(
                            "{what} claims {count} items at byte {count_at}; bundlescope reads at most {MAX_ARRAY_ITEMS} array items in a header"
                        ),
                        offset: count_at,
                        field: what.to_string(),
                    });
                }
                let mut items = Vec::with_capacity(count as usize);
                for _ in 0..count {
                    items.push(self.value(item, depth + 1, what)?);
                }
                Value::Array(item, items)
            }
            other => return Err(unknown_type(other, at, what, false)),
        })
    }
}

fn unknown_type(t: u32, at: u64, what: &str, item: bool) -> Stop {
    Stop {
        check: c::GGUF_KV_TYPE,
        message: format!(
            "{what} has {} type {t} at byte {at}; GGUF value types are 0..=12",
            if item { "array item" } else { "value" }
        ),
        offset: at,
        field: what.to_string(),
    }
}

/// Smallest tensor info: name length (8), n_dims (4), one dim (8), type (4), offset (8).
const MIN_TENSOR_INFO: u64 = 32;
/// Smallest key/value: key length (8), type (4), one byte of value.
const MIN_KV: u64 = 13;
/// Most tensors a GGUF file may declare (as for a safetensors file: each
/// costs the audit a few KiB, so this bounds its memory; real files stack
/// their experts and declare at most a few thousand).
pub const MAX_TENSORS: u64 = crate::format::safetensors::MAX_TENSORS as u64;
/// Most key/value pairs (real files have a few dozen; the tokenizer's
/// vocabulary is one array).
pub const MAX_KVS: u64 = 65_536;
/// Most array items in all of a header's values together: a 262,144-token
/// vocabulary with its scores and types, or 128k tokens with 280k merges,
/// fits; a million one-byte strings cost the audit about 150 MiB.
pub const MAX_ARRAY_ITEMS: u64 = 1 << 20;

/// Parses the header of `buf` (the file's bytes, mapped). Findings are
/// pushed for everything wrong; after a structural error the header is
/// returned as far as it was read, with `complete` false.
pub fn parse(buf: &[u8], file: &str, findings: &mut Vec<Finding>) -> Header {
    let mut r = Reader {
        buf,
        pos: 0,
        items: 0,
    };
    let mut h = Header {
        alignment: DEFAULT_ALIGNMENT,
        ..Header::default()
    };
    match read(&mut r, &mut h, file, findings) {
        Ok(()) => h.complete = true,
        Err(stop) => findings.push(
            Finding::error(stop.check, format!("{file}: {}", stop.message))
                .field(stop.field)
                .offset(stop.offset),
        ),
    }
    h
}

fn read(
    r: &mut Reader,
    h: &mut Header,
    file: &str,
    findings: &mut Vec<Finding>,
) -> Result<(), Stop> {
    let magic = r.take(4, "magic").map_err(|_| Stop {
        check: c::GGUF_MAGIC,
        message: format!(
            "{} bytes: too short to start with the magic GGUF",
            r.buf.len()
        ),
        offset: 0,
        field: "magic".into(),
    })?;
    if magic != b"GGUF" {
        return Err(Stop {
            check: c::GGUF_MAGIC,
            message: format!(
                "starts with {:02x?}, expected the magic \"GGUF\" (47 47 55 46)",
                magic
            ),
            offset: 0,
            field: "magic".into(),
        });
    }
    h.version = r.u32("version")?;
    if !(2..=3).contains(&h.version) {
        return Err(Stop {
            check: c::GGUF_VERSION,
            message: format!(
                "version {} (expected 2 or 3; version 1 used 32-bit counts and is not read)",
                h.version
            ),
            offset: 4,
            field: "version".into(),
        });
    }
    let n_tensors = r.u64("tensor_count")?;
    let n_kv = r.u64("metadata_kv_count")?;
    let need = n_tensors
        .checked_mul(MIN_TENSOR_INFO)
        .and_then(|a| n_kv.checked_mul(MIN_KV).and_then(|b| a.checked_add(b)));
    if need.is_none_or(|n| n > r.remaining()) {
        return Err(Stop {
            check: c::GGUF_COUNTS,
            message: format!(
                "{n_tensors} tensors and {n_kv} key/value pairs need at least {} bytes of header, the file has {} after the counts",
                need.map_or("more than 2^64".into(), |n| n.to_string()),
                r.remaining()
            ),
            offset: 8,
            field: "tensor_count".into(),
        });
    }
    if n_tensors > MAX_TENSORS || n_kv > MAX_KVS {
        return Err(Stop {
            check: c::GGUF_COUNTS,
            message: format!(
                "{n_tensors} tensors and {n_kv} key/value pairs declared; bundlescope reads at most {MAX_TENSORS} tensors and {MAX_KVS} key/value pairs"
            ),
            offset: 8,
            field: if n_tensors > MAX_TENSORS {
                "tensor_count".into()
            } else {
                "metadata_kv_count".into()
            },
        });
    }
    h.kvs = Vec::with_capacity(n_kv as usize);
    let mut seen: HashMap<String, u64> = HashMap::new();
    for i in 0..n_kv {
        let offset = r.pos as u64;
        let key = r.string(&format!("key of metadata pair {i}"))?;
        let type_at = r.pos as u64;
        let t = r.u32(&key)?;
        if Reader::min_size(t).is_none() {
            return Err(unknown_type(t, type_at, &key, false));
        }
        let value = r.value(t, 0, &key)?;
        if let Some(first) = seen.insert(key.clone(), offset) {
            findings.push(
                Finding::error(
                    c::GGUF_KV_KEY,
                    format!("{file}: metadata key {key:?} appears twice (first at byte {first})"),
                )
                .field(key.clone())
                .offset(offset),
            );
        }
        h.kvs.push(Kv { key, value, offset });
    }
    if let Some(kv) = h.kvs.iter().find(|kv| kv.key == "general.alignment") {
        match kv.value {
            Value::U32(a) if a > 0 && a.is_power_of_two() => h.alignment = u64::from(a),
            ref v => findings.push(
                Finding::error(
                    c::GGUF_ALIGNMENT,
                    format!(
                        "{file}: general.alignment is {} {}, expected a UINT32 power of two; the default {DEFAULT_ALIGNMENT} is used",
                        v.type_label(),
                        v.short()
                    ),
                )
                .field("general.alignment")
                .offset(kv.offset),
            ),
        }
    }
    h.tensors = Vec::with_capacity(n_tensors as usize);
    for i in 0..n_tensors {
        let info_offset = r.pos as u64;
        let name = r.string(&format!("name of tensor info {i}"))?;
        let dims_at = r.pos as u64;
        let n_dims = r.u32(&name)?;
        if n_dims == 0 || n_dims > MAX_DIMS {
            return Err(Stop {
                check: c::GGUF_DIMS,
                message: format!(
                    "tensor {name:?} has {n_dims} dimensions at byte {dims_at}; ggml tensors have 1 to {MAX_DIMS}"
                ),
                offset: dims_at,
                field: name,
            });
        }
        let mut ne = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            ne.push(r.u64(&name)?);
        }
        let type_number = r.u32(&name)?;
        let offset = r.u64(&name)?;
        h.tensors.push(RawTensor {
            name,
            ne,
            type_number,
            offset,
            info_offset,
        });
    }
    let end = r.pos as u64;
    h.data_start = end.div_ceil(h.alignment) * h.alignment;
    Ok(())
}
