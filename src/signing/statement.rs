//! The in-toto statement an OMS signature signs: the model's name, the
//! serialization that was used, and one resource (file or shard) per
//! digest. Read from the payload bytes exactly as signed.

use serde_json::Value;
use sha2::{Digest as _, Sha256};

use super::bundle::kind;
use crate::finding::{Finding, checks};

/// The in-toto statement type.
pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
/// The OMS v1.0 predicate.
pub const PREDICATE_V1: &str = "https://model_signing/signature/v1.0";
/// The pre-1.0 predicate, read for compatibility.
pub const PREDICATE_V0_1: &str = "https://model_signing/Digests/v0.1";
/// Most resources one statement may list.
const MAX_RESOURCES: usize = 1_000_000;

/// A digest algorithm of the serialization.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashType {
    /// SHA-256.
    Sha256,
    /// BLAKE2b-512.
    Blake2b,
    /// BLAKE3 (32-byte output).
    Blake3,
}

impl HashType {
    /// The name the statement uses.
    pub fn name(self) -> &'static str {
        match self {
            HashType::Sha256 => "sha256",
            HashType::Blake2b => "blake2b",
            HashType::Blake3 => "blake3",
        }
    }

    /// Digest length in bytes.
    pub fn digest_len(self) -> usize {
        match self {
            HashType::Blake2b => 64,
            _ => 32,
        }
    }

    fn from_name(s: &str) -> Option<Self> {
        match s {
            "sha256" => Some(HashType::Sha256),
            "blake2b" | "blake2" => Some(HashType::Blake2b),
            "blake3" => Some(HashType::Blake3),
            _ => None,
        }
    }
}

/// How the model was cut into resources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Method {
    /// One resource per file.
    Files,
    /// One resource per `shard_size` range of each file.
    Shards {
        /// Bytes per shard (the last one of a file may be shorter).
        shard_size: u64,
    },
}

/// The `serialization` of the predicate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Serialization {
    /// `method` (with `shard_size`).
    pub method: Method,
    /// `hash_type`.
    pub hash_type: HashType,
    /// `allow_symlinks`.
    pub allow_symlinks: bool,
    /// `ignore_paths`, relative to the model folder.
    pub ignore_paths: Vec<String>,
}

/// One signed resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    /// `name` as written.
    pub name: String,
    /// Its file, relative to the model folder (POSIX separators).
    pub path: String,
    /// For a shard, its `[start, end)`.
    pub range: Option<(u64, u64)>,
    /// The digest bytes.
    pub digest: Vec<u8>,
}

/// A parsed, self-consistent statement.
#[derive(Debug, Clone)]
pub struct Statement {
    /// `predicateType`.
    pub predicate_type: String,
    /// The subject's name (the model folder's name when it was signed).
    pub model_name: String,
    /// The subject's SHA-256 over every resource digest (v1.0 only).
    pub root_digest: Option<String>,
    /// The serialization.
    pub serialization: Serialization,
    /// The resources, as listed.
    pub resources: Vec<Resource>,
    /// The signer was given one file, not a folder: every resource's path
    /// is `.` (the file itself).
    pub single_file: bool,
}

impl Statement {
    /// Whether this is the pre-1.0 predicate.
    pub fn is_pre_1_0(&self) -> bool {
        self.predicate_type == PREDICATE_V0_1
    }
}

fn bad(field: &str, message: String) -> Finding {
    Finding::error(checks::OMS_STATEMENT, message).field(field.to_string())
}

fn bad_manifest(field: &str, message: String) -> Finding {
    Finding::error(checks::OMS_MANIFEST, message).field(field.to_string())
}

fn get<'a>(v: &'a Value, field: &str, key: &str) -> Result<&'a Value, Finding> {
    let path = if field.is_empty() {
        key.to_string()
    } else {
        format!("{field}.{key}")
    };
    v.get(key)
        .ok_or_else(|| bad(&path, format!("the statement has no {path}")))
}

fn string<'a>(v: &'a Value, field: &str) -> Result<&'a str, Finding> {
    v.as_str()
        .ok_or_else(|| bad(field, format!("{field} is {}, not a string", kind(v))))
}

/// Parses the statement (the payload bytes as signed). Statement-shape
/// violations are `oms.statement`; a serialization or resource list that
/// contradicts itself is `oms.manifest`; a resource path that leaves the
/// folder is `oms.path`.
pub fn parse(payload: &[u8]) -> Result<Statement, Finding> {
    if crate::format::json::count_values(payload) > crate::format::json::MAX_VALUES {
        return Err(bad(
            "payload",
            format!(
                "the signed payload holds over {} JSON values",
                crate::format::json::MAX_VALUES
            ),
        ));
    }
    let v: Value = serde_json::from_slice(payload).map_err(|e| {
        bad(
            "payload",
            format!(
                "the signed payload is not JSON: {e} (line {}, column {})",
                e.line(),
                e.column()
            ),
        )
    })?;
    if !v.is_object() {
        return Err(bad(
            "payload",
            format!("the signed payload is {}, not an object", kind(&v)),
        ));
    }
    let ty = string(get(&v, "", "_type")?, "_type")?;
    if ty != STATEMENT_TYPE {
        return Err(bad(
            "_type",
            format!("_type is {ty:?}, expected {STATEMENT_TYPE:?}"),
        ));
    }
    let pt = string(get(&v, "", "predicateType")?, "predicateType")?;
    match pt {
        PREDICATE_V1 => parse_v1(&v),
        PREDICATE_V0_1 => parse_v0_1(&v),
        other => Err(bad(
            "predicateType",
            format!(
                "predicateType is {other:?}; OMS signs {PREDICATE_V1:?} (or the pre-1.0 {PREDICATE_V0_1:?})"
            ),
        )),
    }
}

fn hex_digest(field: &str, v: &Value, len: usize) -> Result<Vec<u8>, Finding> {
    let s = string(v, field)?;
    let bytes =
        decode_hex(s).ok_or_else(|| bad(field, format!("{field} is not lower-case hex: {s:?}")))?;
    if bytes.len() != len {
        return Err(bad_manifest(
            field,
            format!(
                "{field} is {} bytes, the hash type gives {len}",
                bytes.len()
            ),
        ));
    }
    Ok(bytes)
}

/// Lower-case (or upper-case) hex to bytes.
pub fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || s.len() > 256 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// A resource `f` of file `path` under `name` is admitted once: its path
/// relative and inside the folder, its name not listed before.
fn admit(
    f: &str,
    path: &str,
    name: &str,
    seen: &mut std::collections::HashSet<String>,
) -> Result<(), Finding> {
    if path != SINGLE_FILE && !safe_path(path) {
        return Err(Finding::error(
            checks::OMS_PATH,
            format!("{f} names {path:?}, which is not a relative path inside the model folder"),
        )
        .field(format!("{f}.name")));
    }
    if !seen.insert(name.to_string()) {
        return Err(bad_manifest(
            &format!("{f}.name"),
            format!("{name:?} is listed twice"),
        ));
    }
    Ok(())
}

/// The path a signer writes for the one file it was given (the model path
/// itself).
pub const SINGLE_FILE: &str = ".";

/// A relative POSIX path that stays inside the folder: no root, no `..`,
/// no empty or `.` component, no NUL or backslash.
pub fn safe_path(p: &str) -> bool {
    !p.is_empty()
        && !p.starts_with('/')
        && !p.contains('\0')
        && !p.contains('\\')
        && p.split('/').all(|c| !c.is_empty() && c != "." && c != "..")
}

fn parse_v1(v: &Value) -> Result<Statement, Finding> {
    let subject = get(v, "", "subject")?;
    let subjects = subject.as_array().ok_or_else(|| {
        bad(
            "subject",
            format!("subject is {}, not an array", kind(subject)),
        )
    })?;
    if subjects.len() != 1 {
        return Err(bad(
            "subject",
            format!(
                "subject lists {} entries; an OMS v1.0 statement has exactly one (the model)",
                subjects.len()
            ),
        ));
    }
    let model_name =
        string(get(&subjects[0], "subject[0]", "name")?, "subject[0].name")?.to_string();
    let root = string(
        get(
            get(&subjects[0], "subject[0]", "digest")?,
            "subject[0].digest",
            "sha256",
        )?,
        "subject[0].digest.sha256",
    )?
    .to_string();
    let predicate = get(v, "", "predicate")?;
    let ser = get(predicate, "predicate", "serialization")?;
    let serialization = parse_serialization(ser)?;
    let list = get(predicate, "predicate", "resources")?;
    let list = list.as_array().ok_or_else(|| {
        bad(
            "predicate.resources",
            format!("predicate.resources is {}, not an array", kind(list)),
        )
    })?;
    if list.len() > MAX_RESOURCES {
        return Err(bad_manifest(
            "predicate.resources",
            format!(
                "{} resources, over the limit of {MAX_RESOURCES}",
                list.len()
            ),
        ));
    }
    let mut resources = Vec::with_capacity(list.len());
    let mut root_hasher = Sha256::new();
    let mut seen = std::collections::HashSet::new();
    let expected_alg = serialization.hash_type.name();
    for (i, r) in list.iter().enumerate() {
        let f = format!("predicate.resources[{i}]");
        let name = string(get(r, &f, "name")?, &format!("{f}.name"))?.to_string();
        let alg = string(get(r, &f, "algorithm")?, &format!("{f}.algorithm"))?;
        let alg_ok = alg == expected_alg
            || matches!(serialization.method, Method::Shards { shard_size }
                if alg == format!("{expected_alg}-sharded-{shard_size}"));
        if !alg_ok {
            return Err(bad_manifest(
                &format!("{f}.algorithm"),
                format!(
                    "{f} ({name}) is hashed with {alg:?}, the serialization says {expected_alg:?}"
                ),
            ));
        }
        let digest = hex_digest(
            &format!("{f}.digest"),
            get(r, &f, "digest")?,
            serialization.hash_type.digest_len(),
        )?;
        root_hasher.update(&digest);
        let (path, range) = match serialization.method {
            Method::Files => (name.clone(), None),
            Method::Shards { shard_size } => {
                let mut parts = name.rsplitn(3, ':');
                let (end, start, path) = (parts.next(), parts.next(), parts.next());
                let (Some(end), Some(start), Some(path)) = (end, start, path) else {
                    return Err(bad_manifest(
                        &format!("{f}.name"),
                        format!("shard resource {name:?} is not \"path:start:end\""),
                    ));
                };
                let (Ok(start), Ok(end)) = (start.parse::<u64>(), end.parse::<u64>()) else {
                    return Err(bad_manifest(
                        &format!("{f}.name"),
                        format!("shard resource {name:?}: start and end are not integers"),
                    ));
                };
                if end <= start || end - start > shard_size || !start.is_multiple_of(shard_size) {
                    return Err(bad_manifest(
                        &format!("{f}.name"),
                        format!(
                            "shard resource {name:?} is not a {shard_size}-byte shard (starts at a multiple, ends after it, at most one shard long)"
                        ),
                    ));
                }
                (path.to_string(), Some((start, end)))
            }
        };
        admit(&f, &path, &name, &mut seen)?;
        resources.push(Resource {
            name,
            path,
            range,
            digest,
        });
    }
    let single_file = single_file(&resources, "predicate.resources")?;
    let got = crate::format::hex(&root_hasher.finalize());
    if got != root.to_ascii_lowercase() {
        return Err(bad_manifest(
            "subject[0].digest.sha256",
            format!("the subject's digest is {root}, but the resources' digests hash to {got}"),
        ));
    }
    Ok(Statement {
        predicate_type: PREDICATE_V1.into(),
        model_name,
        root_digest: Some(root),
        serialization,
        single_file,
        resources,
    })
}

/// The first resource listed out of the signer's order, with the one
/// before it. model-signing lists a v1.0 statement's resources sorted by
/// path, component by component (as Python orders paths), then by shard
/// start and end; the subject digest is taken over them in that order.
/// Another order still verifies (each digest is compared by name), but no
/// conforming signer wrote it.
pub fn out_of_order(resources: &[Resource]) -> Option<(usize, usize)> {
    fn key(r: &Resource) -> (std::str::Split<'_, char>, (u64, u64)) {
        (r.path.split('/'), r.range.unwrap_or((0, 0)))
    }
    resources
        .windows(2)
        .position(|w| {
            let ((a, ra), (b, rb)) = (key(&w[0]), key(&w[1]));
            a.cmp(b).then(ra.cmp(&rb)) == std::cmp::Ordering::Greater
        })
        .map(|i| (i, i + 1))
}

/// Whether the resources are those of one signed file (all named `.`);
/// `.` beside folder paths is an `oms.path` finding.
fn single_file(resources: &[Resource], field: &str) -> Result<bool, Finding> {
    let single = resources.iter().filter(|r| r.path == SINGLE_FILE).count();
    if single > 0 && single != resources.len() {
        return Err(Finding::error(
            checks::OMS_PATH,
            format!(
                "{single} of {} resources name \".\" (a single signed file) beside folder paths",
                resources.len()
            ),
        )
        .field(field.to_string()));
    }
    Ok(single > 0)
}

fn parse_serialization(ser: &Value) -> Result<Serialization, Finding> {
    let f = "predicate.serialization";
    if !ser.is_object() {
        return Err(bad(f, format!("{f} is {}, not an object", kind(ser))));
    }
    let method = string(get(ser, f, "method")?, "predicate.serialization.method")?;
    let ht = string(
        get(ser, f, "hash_type")?,
        "predicate.serialization.hash_type",
    )?;
    let hash_type = HashType::from_name(ht).ok_or_else(|| {
        bad_manifest(
            "predicate.serialization.hash_type",
            format!("hash_type {ht:?} is none of sha256, blake2b, blake3"),
        )
    })?;
    let allow = get(ser, f, "allow_symlinks")?;
    // Protobuf JSON can write the flag as a string.
    let allow_symlinks = match allow {
        Value::Bool(b) => *b,
        Value::String(s) if s == "true" || s == "false" => s == "true",
        other => {
            return Err(bad(
                "predicate.serialization.allow_symlinks",
                format!("allow_symlinks is {}, not a boolean", kind(other)),
            ));
        }
    };
    let ignore_paths = match ser.get("ignore_paths") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, p)| {
                string(p, &format!("predicate.serialization.ignore_paths[{i}]")).map(str::to_string)
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(bad(
                "predicate.serialization.ignore_paths",
                format!("ignore_paths is {}, not an array", kind(other)),
            ));
        }
    };
    let method = match method {
        "files" => Method::Files,
        "shards" => {
            let s = get(ser, f, "shard_size")?;
            // The reference signer writes it through protobuf's Struct,
            // as a float (300000.0): accept an integral, positive number.
            let size = s
                .as_u64()
                .or_else(|| {
                    s.as_f64()
                        .filter(|x| x.fract() == 0.0 && *x >= 1.0 && *x < 9.0e15)
                        .map(|x| x as u64)
                })
                .filter(|&n| n > 0)
                .ok_or_else(|| {
                    bad_manifest(
                        "predicate.serialization.shard_size",
                        format!("shard_size is {s}, not a positive whole number of bytes"),
                    )
                })?;
            Method::Shards { shard_size: size }
        }
        other => {
            return Err(bad_manifest(
                "predicate.serialization.method",
                format!("method {other:?} is neither \"files\" nor \"shards\""),
            ));
        }
    };
    Ok(Serialization {
        method,
        hash_type,
        allow_symlinks,
        ignore_paths,
    })
}

fn parse_v0_1(v: &Value) -> Result<Statement, Finding> {
    let subject = get(v, "", "subject")?;
    let subjects = subject.as_array().ok_or_else(|| {
        bad(
            "subject",
            format!("subject is {}, not an array", kind(subject)),
        )
    })?;
    if subjects.len() > MAX_RESOURCES {
        return Err(bad_manifest(
            "subject",
            format!("{} subjects, over the limit", subjects.len()),
        ));
    }
    let mut resources = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (i, s) in subjects.iter().enumerate() {
        let f = format!("subject[{i}]");
        let name = string(get(s, &f, "name")?, &format!("{f}.name"))?.to_string();
        let digest = hex_digest(
            &format!("{f}.digest.sha256"),
            get(get(s, &f, "digest")?, &format!("{f}.digest"), "sha256")?,
            32,
        )?;
        admit(&f, &name, &name, &mut seen)?;
        resources.push(Resource {
            path: name.clone(),
            name,
            range: None,
            digest,
        });
    }
    Ok(Statement {
        predicate_type: PREDICATE_V0_1.into(),
        model_name: String::new(),
        root_digest: None,
        serialization: Serialization {
            method: Method::Files,
            hash_type: HashType::Sha256,
            allow_symlinks: false,
            ignore_paths: Vec::new(),
        },
        single_file: single_file(&resources, "subject")?,
        resources,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn statement(resources: Value, ser: Value) -> Value {
        let mut h = Sha256::new();
        for r in resources.as_array().unwrap() {
            h.update(decode_hex(r["digest"].as_str().unwrap()).unwrap());
        }
        serde_json::json!({
            "_type": STATEMENT_TYPE,
            "subject": [{"name": "m", "digest": {"sha256": crate::format::hex(&h.finalize())}}],
            "predicateType": PREDICATE_V1,
            "predicate": {"serialization": ser, "resources": resources}
        })
    }

    #[test]
    fn a_shards_statement_with_a_float_shard_size_reads() {
        let d = "11".repeat(32);
        let s = statement(
            serde_json::json!([{"name": "w.bin:0:10", "algorithm": "sha256-sharded-10", "digest": d},
                               {"name": "w.bin:10:15", "algorithm": "sha256-sharded-10", "digest": d}]),
            serde_json::json!({"method": "shards", "hash_type": "sha256", "shard_size": 10.0, "allow_symlinks": false}),
        );
        let st = parse(s.to_string().as_bytes()).unwrap();
        assert_eq!(st.serialization.method, Method::Shards { shard_size: 10 });
        assert_eq!(st.resources[1].range, Some((10, 15)));
        assert_eq!(st.resources[1].path, "w.bin");
    }

    #[test]
    fn the_signers_order_is_by_path_component_then_shard_start() {
        let r = |name: &str, range: Option<(u64, u64)>| Resource {
            name: name.to_string(),
            path: name.split(':').next().unwrap().to_string(),
            range,
            digest: Vec::new(),
        };
        // Python orders paths by component: "a/b" before "a.b", though
        // '.' sorts before '/' as text; shards by their numeric start.
        let sorted = [
            r("a/b", None),
            r("a.b", None),
            r("w:0:10", Some((0, 10))),
            r("w:10:20", Some((10, 20))),
            r("w:100:110", Some((100, 110))),
        ];
        assert_eq!(out_of_order(&sorted), None);
        let mut text_order = sorted.clone();
        text_order.swap(3, 4);
        assert_eq!(out_of_order(&text_order), Some((3, 4)));
        let mut by_text = sorted.clone();
        by_text.swap(0, 1);
        assert_eq!(out_of_order(&by_text), Some((0, 1)));
        assert_eq!(out_of_order(&[]), None);
    }

    #[test]
    fn broken_statements_name_the_field() {
        let d = "22".repeat(32);
        let files =
            serde_json::json!({"method": "files", "hash_type": "sha256", "allow_symlinks": false});
        let ok = statement(
            serde_json::json!([{"name": "a", "algorithm": "sha256", "digest": d}]),
            files.clone(),
        );
        assert!(parse(ok.to_string().as_bytes()).is_ok());
        let mut root = ok.clone();
        root["subject"][0]["digest"]["sha256"] = Value::from("00".repeat(32));
        assert_eq!(
            parse(root.to_string().as_bytes()).unwrap_err().check,
            checks::OMS_MANIFEST
        );
        let out = statement(
            serde_json::json!([{"name": "../x", "algorithm": "sha256", "digest": d}]),
            files.clone(),
        );
        assert_eq!(
            parse(out.to_string().as_bytes()).unwrap_err().check,
            checks::OMS_PATH
        );
        let twice = statement(
            serde_json::json!([{"name": "a", "algorithm": "sha256", "digest": d}, {"name": "a", "algorithm": "sha256", "digest": d}]),
            files.clone(),
        );
        assert_eq!(
            parse(twice.to_string().as_bytes()).unwrap_err().check,
            checks::OMS_MANIFEST
        );
        let mut pt = ok.clone();
        pt["predicateType"] = Value::from("x");
        assert_eq!(
            parse(pt.to_string().as_bytes())
                .unwrap_err()
                .field
                .as_deref(),
            Some("predicateType")
        );
        let short = statement(
            serde_json::json!([{"name": "a", "algorithm": "sha256", "digest": "22"}]),
            files,
        );
        assert_eq!(
            parse(short.to_string().as_bytes())
                .unwrap_err()
                .field
                .as_deref(),
            Some("predicate.resources[0].digest")
        );
    }

    #[test]
    fn paths_that_leave_the_folder_are_refused() {
        for p in ["/etc/passwd", "a/../../b", "", "a//b", "./a", "a\\b"] {
            assert!(!safe_path(p), "{p}");
        }
        assert!(safe_path("sub/dir/file.bin"));
    }
}
