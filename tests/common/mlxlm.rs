//! MLX-LM checkpoints written by MLX itself (tests/mlx_lm_checkpoint.py),
//! made once per process and mode and copied for each test, and the edits
//! the tests make to a copy: config, index, a shard's header, a tensor's bytes.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use serde_json::{Map, Value};

/// The script that writes them.
pub fn script() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/mlx_lm_checkpoint.py")
        .display()
        .to_string()
}

/// Runs the script; panics with its stderr when it fails. None when
/// Python with MLX is not available here (the caller skips, or fails in CI).
pub fn py(args: &[&str]) -> Option<String> {
    let s = script();
    let mut all = vec![s.as_str()];
    all.extend_from_slice(args);
    let out = super::run_python(&all)?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        if err.contains("No module named 'mlx'") {
            return None;
        }
        panic!("mlx_lm_checkpoint.py {args:?} failed: {err}");
    }
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

struct Templates {
    _tmp: tempfile::TempDir,
    made: HashMap<String, Option<PathBuf>>,
}

static TEMPLATES: OnceLock<Mutex<Templates>> = OnceLock::new();

/// The template checkpoint written by MLX with `args` (after `write OUT`).
fn template(args: &[&str]) -> Option<PathBuf> {
    let t = TEMPLATES.get_or_init(|| {
        Mutex::new(Templates {
            _tmp: tempfile::tempdir().unwrap(),
            made: HashMap::new(),
        })
    });
    let mut t = t.lock().unwrap_or_else(|e| e.into_inner());
    let key = args.join(" ");
    if let Some(p) = t.made.get(&key) {
        return p.clone();
    }
    let dir = t._tmp.path().join(format!("t{}", t.made.len()));
    let d = dir.to_str().unwrap().to_string();
    let mut all = vec!["write", d.as_str()];
    all.extend_from_slice(args);
    let made = py(&all).map(|_| dir);
    t.made.insert(key, made.clone());
    made
}

/// A copy of an MLX-written checkpoint in its own temporary folder.
pub struct Ckpt {
    _tmp: tempfile::TempDir,
    pub dir: PathBuf,
}

impl Ckpt {
    /// `args`: `--mode M`, `--bits B`, `--mixed`, `--source SRC` … (SRC is
    /// not copied: pass it only through [`Ckpt::with_source`]).
    pub fn mlx(args: &[&str]) -> Option<Self> {
        let src = template(args)?;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ck");
        copy_dir(&src, &dir);
        Some(Self { _tmp: tmp, dir })
    }

    /// A quantized checkpoint and its BF16 source, both written by MLX.
    pub fn with_source(args: &[&str]) -> Option<(Self, PathBuf)> {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ck");
        let src = tmp.path().join("src");
        let (d, s) = (dir.to_str().unwrap(), src.to_str().unwrap());
        let mut all = vec!["write", d, "--source", s];
        all.extend_from_slice(args);
        py(&all)?;
        Some((Self { _tmp: tmp, dir }, src))
    }

    fn json(&self, file: &str) -> Value {
        serde_json::from_slice(&fs::read(self.dir.join(file)).unwrap()).unwrap()
    }

    fn edit_json(&self, file: &str, f: impl FnOnce(&mut Value)) {
        let mut v = self.json(file);
        f(&mut v);
        fs::write(self.dir.join(file), serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    }

    pub fn edit_config(&self, f: impl FnOnce(&mut Value)) {
        self.edit_json("config.json", f);
    }

    pub fn edit_index(&self, f: impl FnOnce(&mut Value)) {
        self.edit_json("model.safetensors.index.json", f);
    }

    pub fn shard_name(&self, tensor: &str) -> String {
        self.json("model.safetensors.index.json")["weight_map"][tensor]
            .as_str()
            .unwrap()
            .to_string()
    }

    pub fn shard_of(&self, tensor: &str) -> PathBuf {
        self.dir.join(self.shard_name(tensor))
    }

    /// The shard's header JSON and where its data begins.
    pub fn header(shard: &Path) -> (Map<String, Value>, usize) {
        let bytes = fs::read(shard).unwrap();
        let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        (serde_json::from_slice(&bytes[8..8 + n]).unwrap(), 8 + n)
    }

    /// A tensor's bytes, read from its shard.
    pub fn bytes_of(&self, tensor: &str) -> Vec<u8> {
        let path = self.shard_of(tensor);
        let bytes = fs::read(&path).unwrap();
        let (header, data) = Self::header(&path);
        let o = &header[tensor]["data_offsets"];
        bytes[data + o[0].as_u64().unwrap() as usize..data + o[1].as_u64().unwrap() as usize]
            .to_vec()
    }

    /// Edits a shard's header JSON, keeping the data.
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
    }

    /// Edits a tensor's data in place.
    pub fn patch(&self, tensor: &str, f: impl FnOnce(&mut [u8])) {
        let path = self.shard_of(tensor);
        let mut bytes = fs::read(&path).unwrap();
        let (header, data) = Self::header(&path);
        let o = &header[tensor]["data_offsets"];
        let (a, b) = (
            data + o[0].as_u64().unwrap() as usize,
            data + o[1].as_u64().unwrap() as usize,
        );
        f(&mut bytes[a..b]);
        fs::write(&path, bytes).unwrap();
    }
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}
