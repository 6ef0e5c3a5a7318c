//! A calibrated GPTQ-Q4 overlay and its parent, written by the real binary
//! (`sample PARENT`, then `sample OVERLAY --format gptq-q4 --parent PARENT`),
//! and the edits the tests make to a copy, each followed by whatever rehash
//! keeps every other rule intact. The overlay identity is recomputed here
//! independently of the library (a BTreeMap's sorted keys through serde).

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::hex;

pub const V_PROJ: &str = "language_model.model.layers.0.self_attn.v_proj.weight";
pub const GATE: &str = "language_model.model.layers.0.mlp.gate_proj.weight";
pub const NORM: &str = "language_model.model.norm.weight";

pub struct Overlay {
    _tmp: tempfile::TempDir,
    _tmp_parent: Option<tempfile::TempDir>,
    pub parent: PathBuf,
    pub dir: PathBuf,
}

impl Overlay {
    /// Parent and overlay side by side (the audit finds the parent as a
    /// sibling), or, with `beside == false`, the parent in another folder
    /// (no parent at hand unless `--parent` names it).
    pub fn new(beside: bool) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let tmp_parent = (!beside).then(|| tempfile::tempdir().unwrap());
        let parent = tmp_parent
            .as_ref()
            .map_or(tmp.path(), |t| t.path())
            .join("parent");
        let dir = tmp.path().join("overlay");
        let run = super::cli(&["sample", parent.to_str().unwrap(), "--seed", "7"]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        let run = super::cli(&[
            "sample",
            dir.to_str().unwrap(),
            "--format",
            "gptq-q4",
            "--parent",
            parent.to_str().unwrap(),
            "--seed",
            "3",
        ]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        Self {
            _tmp: tmp,
            _tmp_parent: tmp_parent,
            parent,
            dir,
        }
    }

    pub fn manifest(&self) -> Value {
        serde_json::from_slice(&fs::read(self.dir.join("manifest.json")).unwrap()).unwrap()
    }

    pub fn edit(&self, f: impl FnOnce(&mut Value)) {
        let mut m = self.manifest();
        f(&mut m);
        fs::write(
            self.dir.join("manifest.json"),
            serde_json::to_vec_pretty(&m).unwrap(),
        )
        .unwrap();
    }

    pub fn payload(&self) -> PathBuf {
        self.dir.join("weights.bin")
    }

    pub fn record(&self, name: &str) -> Value {
        self.manifest()["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("no record {name}"))
            .clone()
    }

    /// The bytes of tensor `name` in the overlay's payload.
    pub fn bytes_of(&self, name: &str) -> Vec<u8> {
        let r = self.record(name);
        let (o, n) = (r["offset"].as_u64().unwrap(), r["bytes"].as_u64().unwrap());
        fs::read(self.payload()).unwrap()[o as usize..(o + n) as usize].to_vec()
    }

    /// Replaces tensor `name`'s bytes (same length), then rehashes the
    /// payload (weights_sha256) so only the provenance rules can break.
    pub fn set_bytes(&self, name: &str, bytes: &[u8]) {
        let r = self.record(name);
        let o = r["offset"].as_u64().unwrap() as usize;
        let mut p = fs::read(self.payload()).unwrap();
        p[o..o + bytes.len()].copy_from_slice(bytes);
        fs::write(self.payload(), &p).unwrap();
        let sha = hex(&Sha256::digest(&p));
        self.edit(|m| m["weights_sha256"] = json!(sha));
    }

    /// The range hash of tensor `name` as the payload holds it now.
    pub fn range_sha(&self, name: &str) -> String {
        hex(&Sha256::digest(self.bytes_of(name)))
    }

    /// Recomputes and writes overlay_identity_sha256 for the overlay list as
    /// it now stands (independent implementation).
    pub fn reidentify(&self) {
        let m = self.manifest();
        let names: Vec<String> = m["provenance"]["overlay"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect();
        let pairs: Vec<(String, String)> = names
            .iter()
            .map(|n| (n.clone(), self.range_sha(n)))
            .collect();
        let parent = m["provenance"]["parent"]["manifest_sha256"]
            .as_str()
            .unwrap()
            .to_string();
        let id = identity(&parent, &pairs);
        self.edit(|m| m["provenance"]["overlay_identity_sha256"] = json!(id));
    }
}

/// SHA-256 of `{"overlay": [{"name","range_sha256"}] sorted by name,
/// "parent": sha}` with sorted keys and no whitespace, built from BTreeMaps
/// (which serialise their keys in order) rather than by hand.
pub fn identity(parent: &str, pairs: &[(String, String)]) -> String {
    let mut sorted = pairs.to_vec();
    sorted.sort();
    let overlay: Vec<BTreeMap<&str, &str>> = sorted
        .iter()
        .map(|(n, h)| BTreeMap::from([("name", n.as_str()), ("range_sha256", h.as_str())]))
        .collect();
    let mut top: BTreeMap<&str, serde_json::Value> = BTreeMap::new();
    top.insert("parent", json!(parent));
    top.insert("overlay", serde_json::to_value(&overlay).unwrap());
    // serde_json::to_value would build a Map (insertion-ordered here); the
    // BTreeMap itself is serialised, in key order.
    let text = serde_json::to_string(&top).unwrap();
    hex(&Sha256::digest(text.as_bytes()))
}
