//! The keys and roots that verify a folder's OMS signature, picked in the
//! Summary tab and remembered per folder (eframe storage), so a signed
//! bundle opened again is verified with what the user chose for it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::signing::TrustPaths;

/// Storage key of the remembered keys and roots.
const KEY: &str = "bundlescope.signing";

/// What was picked for one folder.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
struct Picked {
    keys: Vec<PathBuf>,
    roots: Vec<PathBuf>,
    /// A Sigstore `trusted_root.json` (one: a later pick replaces it).
    trusted_root: Option<PathBuf>,
}

/// Which kind of file was picked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrustFile {
    /// A public key (`--key`).
    Key,
    /// A root certificate (`--cert-root`), or a Sigstore trusted root
    /// (`--trusted-root`) when the file is JSON.
    Root,
}

/// Whether a picked root is a Sigstore `trusted_root.json` (by extension,
/// else by its first non-blank byte) rather than a PEM certificate.
pub fn is_trusted_root(file: &Path) -> bool {
    if file
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"))
    {
        return true;
    }
    use std::io::Read;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(file)
        .and_then(|mut f| f.read(&mut head))
        .unwrap_or(0);
    head[..n]
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|&b| b == b'{')
}

/// Keys and roots per bundle folder.
#[derive(Debug, Clone, Default)]
pub struct SigningTrust {
    by_folder: BTreeMap<PathBuf, Picked>,
}

/// The folder a bundle path stands for (a manifest's or a file's folder).
fn folder(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.to_path_buf()
    } else {
        path.parent()
            .map_or_else(|| path.to_path_buf(), Path::to_path_buf)
    }
}

impl SigningTrust {
    /// What verifies the bundle at `path`.
    pub fn for_bundle(&self, path: &Path) -> TrustPaths {
        let p = self
            .by_folder
            .get(&folder(path))
            .cloned()
            .unwrap_or_default();
        TrustPaths {
            keys: p.keys,
            roots: p.roots,
            trusted_root: p.trusted_root,
        }
    }

    /// Remembers `file` for the bundle at `path` (once).
    pub fn add(&mut self, path: &Path, kind: TrustFile, file: PathBuf) {
        let p = self.by_folder.entry(folder(path)).or_default();
        if kind == TrustFile::Root && is_trusted_root(&file) {
            p.trusted_root = Some(file);
            return;
        }
        let list = match kind {
            TrustFile::Key => &mut p.keys,
            TrustFile::Root => &mut p.roots,
        };
        if !list.contains(&file) {
            list.push(file);
        }
    }

    /// Forgets every key and root of the bundle at `path`.
    pub fn forget(&mut self, path: &Path) {
        self.by_folder.remove(&folder(path));
    }

    /// Writes them to eframe's storage.
    pub fn save_to(&self, storage: &mut dyn eframe::Storage) {
        eframe::set_value(storage, KEY, &self.by_folder);
    }

    /// Reads what [`SigningTrust::save_to`] wrote.
    pub fn restore(storage: &dyn eframe::Storage) -> Self {
        Self {
            by_folder: eframe::get_value(storage, KEY).unwrap_or_default(),
        }
    }
}
