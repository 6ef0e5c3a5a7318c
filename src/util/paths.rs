//! The user's folders, and whether a path lies inside a folder once both are
//! resolved (the report guard of the CLI and the GUI).

use std::path::{Path, PathBuf};

/// The user's cache folder: `$XDG_CACHE_HOME` when it is an absolute path
/// (an empty or relative one is ignored, as the XDG spec says),
/// `~/Library/Caches` on macOS, `~/.cache` elsewhere; the temp folder as a
/// last resort.
pub fn cache_base() -> PathBuf {
    dirs::cache_dir().unwrap_or_else(std::env::temp_dir)
}

/// bundlescope's own folder inside [`cache_base`].
pub fn app_cache() -> PathBuf {
    cache_base().join("bundlescope")
}

/// The folder a bundle path stands for: the path itself when it is a folder,
/// else its parent (a `manifest.json`, a `.gguf` file), resolved through
/// symlinks. `None` when it does not exist.
pub fn bundle_folder(bundle: &Path) -> Option<PathBuf> {
    let real = std::fs::canonicalize(bundle).ok()?;
    if real.is_dir() {
        Some(real)
    } else {
        real.parent().map(Path::to_path_buf)
    }
}

/// Whether writing `out` would put a file inside `folder` (at any depth),
/// comparing real paths: symlinks, `..` and a path given through a file of
/// the folder are resolved first. A file that does not exist yet is judged
/// by its (resolved) parent.
pub fn is_inside(out: &Path, folder: &Path) -> bool {
    let Ok(folder) = std::fs::canonicalize(folder) else {
        return false;
    };
    let resolved = std::fs::canonicalize(out).ok().or_else(|| {
        let parent = match out.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let name = out.file_name()?;
        std::fs::canonicalize(parent).ok().map(|p| p.join(name))
    });
    resolved.is_some_and(|r| r.starts_with(&folder))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inside_is_judged_on_real_paths() {
        let tmp = tempfile::tempdir().unwrap();
        let bundle = tmp.path().join("b");
        std::fs::create_dir(&bundle).unwrap();
        std::fs::write(bundle.join("manifest.json"), "{}").unwrap();
        let folder = bundle_folder(&bundle.join("manifest.json")).unwrap();
        assert!(is_inside(&bundle.join("report.json"), &folder));
        assert!(is_inside(&bundle.join("manifest.json"), &folder));
        assert!(is_inside(&tmp.path().join("b/../b/x.json"), &folder));
        assert!(!is_inside(&tmp.path().join("report.json"), &folder));
        #[cfg(unix)]
        {
            let link = tmp.path().join("link");
            std::os::unix::fs::symlink(&bundle, &link).unwrap();
            assert!(is_inside(&link.join("r.json"), &folder));
            assert_eq!(bundle_folder(&link).unwrap(), folder);
        }
    }
}
