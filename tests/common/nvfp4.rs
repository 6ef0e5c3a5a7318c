//! An mlx-nvfp4 sample artifact in its own temporary folder, and the edits
//! the tests make to a copy: the manifest, a shard's header, a tensor's bytes,
//! each followed by a rehash so that only the intended check fires.

use std::fs;
use std::path::{Path, PathBuf};

use bundlescope::sample::nvfp4::{Nvfp4Options, write};
use serde_json::{Map, Value, json};
use sha2::Digest;

use super::hex;

pub struct Artifact {
    _tmp: tempfile::TempDir,
    pub dir: PathBuf,
}

impl Artifact {
    /// The default sample, written by the project's own encoder.
    pub fn sample() -> Self {
        Self::with(&Nvfp4Options::default())
    }

    pub fn with(o: &Nvfp4Options) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("nv");
        write(&dir, o).unwrap();
        Self { _tmp: tmp, dir }
    }

    /// Written by the real binary: `bundlescope sample DIR --format nvfp4 ARGS`.
    pub fn from_cli(args: &[&str]) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("nv");
        let mut all = vec!["sample", dir.to_str().unwrap(), "--format", "nvfp4"];
        all.extend_from_slice(args);
        let run = super::cli(&all);
        assert_eq!(run.code, 0, "{}", run.stderr);
        Self { _tmp: tmp, dir }
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

    pub fn shard_of(&self, tensor: &str) -> PathBuf {
        let m = self.manifest();
        self.dir.join(m["weight_map"][tensor].as_str().unwrap())
    }

    /// The shard's header JSON and where its data begins.
    pub fn header(shard: &Path) -> (Map<String, Value>, usize) {
        let bytes = fs::read(shard).unwrap();
        let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        (serde_json::from_slice(&bytes[8..8 + n]).unwrap(), 8 + n)
    }

    /// Re-writes the manifest's per-shard hashes and sizes after a shard edit.
    pub fn rehash(&self) {
        self.edit(|m| {
            for s in m["shards"].as_array_mut().unwrap() {
                let bytes = fs::read(self.dir.join(s["file"].as_str().unwrap())).unwrap();
                s["sha256"] = json!(hex(&sha2::Sha256::digest(&bytes)));
                s["bytes"] = json!(bytes.len());
            }
        });
    }

    /// Edits a shard's header JSON (keeping the data), then rehashes.
    pub fn edit_header(&self, shard: &Path, f: impl FnOnce(&mut Map<String, Value>)) {
        let bytes = fs::read(shard).unwrap();
        let (mut header, data) = Self::header(shard);
        f(&mut header);
        let mut text = serde_json::to_vec(&header).unwrap();
        while !text.len().is_multiple_of(8) {
            text.push(b' ');
        }
        let mut out = (text.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(&text);
        out.extend_from_slice(&bytes[data..]);
        fs::write(shard, out).unwrap();
        self.rehash();
    }

    /// Absolute byte range of a tensor's data in its shard.
    pub fn range(&self, tensor: &str) -> (usize, usize) {
        let (header, data) = Self::header(&self.shard_of(tensor));
        let o = &header[tensor]["data_offsets"];
        (
            data + o[0].as_u64().unwrap() as usize,
            data + o[1].as_u64().unwrap() as usize,
        )
    }

    /// The tensor's data bytes, read with the safetensors crate.
    pub fn bytes(&self, tensor: &str) -> Vec<u8> {
        let shard = fs::read(self.shard_of(tensor)).unwrap();
        let st = safetensors::SafeTensors::deserialize(&shard).unwrap();
        st.tensor(tensor).unwrap().data().to_vec()
    }

    /// Edits a tensor's data in place, then rehashes.
    pub fn patch(&self, tensor: &str, f: impl FnOnce(&mut [u8])) {
        let path = self.shard_of(tensor);
        let mut bytes = fs::read(&path).unwrap();
        let (a, b) = self.range(tensor);
        f(&mut bytes[a..b]);
        fs::write(&path, bytes).unwrap();
        self.rehash();
    }
}
