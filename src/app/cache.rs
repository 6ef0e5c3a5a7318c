//! The audit cache: a finished audit is remembered, keyed by the bundle
//! folder's files (name, size, mtime, and what a user cannot set back: the
//! ctime to the nanosecond, device and inode). Reopening an unchanged bundle
//! shows its verdict at once; any change to any file misses the cache.
//! Every method here touches the disk: the app calls them from jobs only.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::audit::{Event, Finding, Outcome};
use crate::decode::stats::TensorStats;
use crate::format;
use crate::report::{FileRow, ReportBuilder};

/// Where cached audits live.
#[derive(Debug, Clone)]
pub struct AuditCache {
    dir: PathBuf,
}

/// One remembered audit, as stored.
#[derive(Serialize, Deserialize)]
pub(super) struct Entry {
    /// Filled in by [`AuditCache::store`], from the files as they are then.
    fingerprint: String,
    date: String,
    findings: Vec<Finding>,
    files: Vec<FileRow>,
    stats: Vec<Option<Box<TensorStats>>>,
    passed: u64,
    valid: bool,
    errors: usize,
    warnings: usize,
    duration_s: f64,
}

/// A cache hit: the events that rebuild the finished audit.
pub struct Cached {
    /// When the audit ran (UTC).
    pub date: String,
    /// Opened, findings, hashes, statistics and Finished, in order.
    pub events: Vec<Event>,
    /// Checks that passed in that audit.
    pub passed: u64,
}

impl AuditCache {
    /// A cache in `dir` (created on first store).
    pub fn new(dir: PathBuf) -> Self {
        Self { dir }
    }

    /// The user's cache folder, `…/bundlescope/audits`.
    pub fn default_location() -> Option<Self> {
        Some(Self::new(
            crate::util::paths::cache_base()
                .join("bundlescope")
                .join("audits"),
        ))
    }

    fn entry_path(&self, bundle: &Path) -> Option<PathBuf> {
        // A bundle is its folder, but a `.gguf` file is itself: several in
        // one folder must not share an entry.
        let canonical = std::fs::canonicalize(bundle).ok()?;
        let key = if canonical
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
        {
            canonical
        } else {
            folder_of(bundle)?
        };
        let name = format::sha256_hex(key.to_string_lossy().as_bytes());
        Some(self.dir.join(format!("{}.json", &name[..32])))
    }

    /// The cached audit of `bundle`, if its files are exactly as they were.
    pub fn load(&self, bundle: &Path) -> Option<Cached> {
        let text = std::fs::read(self.entry_path(bundle)?).ok()?;
        let entry: Entry = serde_json::from_slice(&text).ok()?;
        if entry.fingerprint != fingerprint(bundle)? {
            return None;
        }
        let opened = Arc::new(format::open(bundle).ok()?);
        // A calibrated overlay's parent checks read another folder, which
        // the key does not cover: it is always audited afresh.
        if opened.format == format::FormatKind::GptqQ4Calibrated {
            return None;
        }
        // A signed folder's signature covers every file in it, which the
        // fingerprint does not: it is verified afresh each time.
        if folder_of(bundle).is_some_and(|d| d.join(crate::signing::SIGNATURE_FILE).exists()) {
            return None;
        }
        if entry.stats.len() != opened.tensors.len() || entry.files.len() != opened.files.len() {
            return None;
        }
        let mut events = vec![Event::Opened(opened.clone())];
        events.extend(entry.findings.into_iter().map(Event::Finding));
        for (i, f) in entry.files.into_iter().enumerate() {
            if let Some(sha) = f.sha256 {
                events.push(Event::FileHashed {
                    file: i,
                    bytes: f.bytes.unwrap_or(0),
                    sha256: Some(sha),
                    ok: f.ok,
                });
            }
        }
        for (i, s) in entry.stats.into_iter().enumerate() {
            if let Some(stats) = s {
                events.push(Event::TensorDone {
                    tensor: i,
                    resident_bytes: opened.tensors[i].resident_bytes,
                    ok: true,
                    stats,
                });
            }
        }
        events.push(Event::Finished(Ok(Outcome {
            valid: entry.valid,
            errors: entry.errors,
            warnings: entry.warnings,
            duration: Duration::from_secs_f64(entry.duration_s.max(0.0)),
        })));
        Some(Cached {
            date: entry.date,
            events,
            passed: entry.passed,
        })
    }

    /// What to remember of a finished audit (`None` while it runs or when
    /// it failed). Cheap: no disk access, so the UI builds it.
    pub(super) fn entry_of(&self, model: &ReportBuilder) -> Option<Entry> {
        let Some(Ok(outcome)) = &model.outcome else {
            return None;
        };
        Some(Entry {
            fingerprint: String::new(),
            date: utc_text(SystemTime::now()),
            findings: model.findings.clone(),
            files: model.files.clone(),
            stats: model.stats.clone(),
            passed: model.passed,
            valid: outcome.valid,
            errors: outcome.errors,
            warnings: outcome.warnings,
            duration_s: outcome.duration.as_secs_f64(),
        })
    }

    /// Remembers a finished audit. Failures to write are not the user's
    /// problem: the cache is an optimisation.
    pub(super) fn store(&self, bundle: &Path, mut entry: Entry) {
        let (Some(path), Some(fingerprint)) = (self.entry_path(bundle), fingerprint(bundle)) else {
            return;
        };
        entry.fingerprint = fingerprint;
        if std::fs::create_dir_all(&self.dir).is_ok()
            && let Ok(bytes) = serde_json::to_vec(&entry)
        {
            let tmp = path.with_extension("tmp");
            if std::fs::write(&tmp, bytes).is_ok() {
                let _ = std::fs::rename(tmp, path);
            }
        }
    }
}

fn folder_of(bundle: &Path) -> Option<PathBuf> {
    let p = std::fs::canonicalize(bundle).ok()?;
    if p.is_dir() {
        Some(p)
    } else {
        p.parent().map(Path::to_path_buf)
    }
}

/// Name, size, mtime, ctime (with nanoseconds), device and inode of every
/// entry of the bundle folder. The mtime can be set back (`touch -r`) after
/// an edit; the ctime cannot (the kernel sets it on every change, including
/// the one that restores the mtime), nor can an edited copy moved into place
/// keep the inode.
fn fingerprint(bundle: &Path) -> Option<String> {
    let dir = folder_of(bundle)?;
    let mut rows = Vec::new();
    for entry in std::fs::read_dir(&dir).ok()? {
        let entry = entry.ok()?;
        let meta = std::fs::metadata(entry.path()).ok()?;
        let mtime = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        rows.push(format!(
            "{}\t{}\t{mtime}\t{}",
            entry.file_name().to_string_lossy(),
            meta.len(),
            unforgeable(&meta)
        ));
    }
    rows.sort();
    Some(format!("{}\n{}", dir.display(), rows.join("\n")))
}

/// The part of a file's metadata a user cannot set back.
#[cfg(unix)]
fn unforgeable(meta: &std::fs::Metadata) -> String {
    use std::os::unix::fs::MetadataExt;
    format!(
        "{}.{:09}\t{}\t{}",
        meta.ctime(),
        meta.ctime_nsec(),
        meta.dev(),
        meta.ino()
    )
}

/// Elsewhere there is no ctime; the creation time is the closest.
#[cfg(not(unix))]
fn unforgeable(meta: &std::fs::Metadata) -> String {
    meta.created()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos())
        .to_string()
}

/// `YYYY-MM-DD HH:MM UTC`.
pub fn utc_text(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(utc_text(UNIX_EPOCH), "1970-01-01 00:00 UTC");
        let t = UNIX_EPOCH + Duration::from_secs(1_796_169_600 + 16 * 3600 + 15 * 60);
        assert_eq!(utc_text(t), "2026-12-02 16:15 UTC");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(utc_text(leap), "2000-02-29 00:00 UTC");
    }
}
