//! The signed manifest against the model folder: every file the
//! serialization covers is listed (bounded walk, no special files opened),
//! hashed (or its digest taken from the audit's own SHA-256 pass), and
//! compared. Shards are hashed range by range, in parallel.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File};
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use super::statement::{HashType, Method, Statement};
use crate::finding::{Finding, checks};
use crate::format::window::read_at;
use crate::util::CancelToken;

/// Most files walked.
const MAX_FILES: usize = 200_000;
/// Deepest folder nesting walked.
const MAX_DEPTH: usize = 64;
/// Paths the reference verifier always ignores.
const GIT_PATHS: &[&str] = &[".git", ".gitattributes", ".github", ".gitignore"];
/// Bytes per read when hashing: small enough that each piece is hashed
/// while it is still in this core's cache (as the pass's reader does).
const CHUNK: usize = 256 << 10;

/// Digests the audit's pass already computed, so the comparison does not
/// read those bytes again: whole files' SHA-256 (for the `files` method)
/// and shard ranges hashed in the pass's own read (for `shards`).
#[derive(Debug, Clone, Default)]
pub struct Known {
    /// A relative path to the pass's SHA-256 of the whole file.
    pub sha256: HashMap<String, Vec<u8>>,
    /// `(relative path, start, end)` to the digest of that range, in the
    /// serialization's hash type.
    pub ranges: HashMap<(String, u64, u64), Vec<u8>>,
}

/// What the comparison found.
#[derive(Debug, Clone, Default)]
pub struct Compared {
    /// Resources whose digest was recomputed and matched.
    pub matched: usize,
    /// Files whose every resource was checked.
    pub files_checked: usize,
    /// Those files, by the names the findings use.
    pub matched_files: Vec<String>,
    /// Files in the folder the signature does not cover.
    pub unsigned_files: Vec<String>,
    /// Every problem, one finding each.
    pub findings: Vec<Finding>,
}

fn ignored(rel: &str, ignore: &[String]) -> bool {
    ignore.iter().any(|p| {
        let p = p.trim_end_matches('/');
        rel == p || rel.strip_prefix(p).is_some_and(|r| r.starts_with('/'))
    })
}

/// Lists the folder's files (relative POSIX paths), minus the ignored ones;
/// symbolic links and special files are findings unless allowed.
fn walk(dir: &Path, ignore: &[String], allow_symlinks: bool, out: &mut Compared) -> Vec<String> {
    let mut files = Vec::new();
    let mut stack: Vec<(PathBuf, String, usize)> = vec![(dir.to_path_buf(), String::new(), 0)];
    while let Some((path, rel, depth)) = stack.pop() {
        let entries = match fs::read_dir(&path) {
            Ok(e) => e,
            Err(e) => {
                out.findings.push(
                    Finding::error(
                        checks::OMS_PATH,
                        format!("cannot list {}: {e}", path.display()),
                    )
                    .field(rel.clone()),
                );
                continue;
            }
        };
        for e in entries.flatten() {
            if files.len() >= MAX_FILES {
                out.findings.push(Finding::error(
                    checks::OMS_PATH,
                    format!(
                        "the folder holds more than {MAX_FILES} files; the rest were not compared"
                    ),
                ));
                return files;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            let r = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            if ignored(&r, ignore) {
                continue;
            }
            let Ok(meta) = fs::symlink_metadata(e.path()) else {
                continue;
            };
            let ft = meta.file_type();
            let target_meta = if ft.is_symlink() {
                if !allow_symlinks {
                    out.findings.push(
                        Finding::error(
                            checks::OMS_PATH,
                            format!("{r} is a symbolic link, and the signature was made with allow_symlinks false"),
                        )
                        .field(r.clone()),
                    );
                    continue;
                }
                match fs::metadata(e.path()) {
                    Ok(m) => m,
                    Err(err) => {
                        out.findings.push(
                            Finding::error(
                                checks::OMS_PATH,
                                format!("{r} is a broken symbolic link: {err}"),
                            )
                            .field(r.clone()),
                        );
                        continue;
                    }
                }
            } else {
                meta
            };
            if target_meta.is_dir() {
                if ft.is_symlink() {
                    continue; // a linked folder is not descended (no loops)
                }
                if depth + 1 > MAX_DEPTH {
                    out.findings.push(
                        Finding::error(
                            checks::OMS_PATH,
                            format!("{r} nests deeper than {MAX_DEPTH} folders"),
                        )
                        .field(r.clone()),
                    );
                    continue;
                }
                stack.push((e.path(), r, depth + 1));
            } else if target_meta.is_file() {
                files.push(r);
            } else {
                out.findings.push(
                    Finding::error(
                        checks::OMS_PATH,
                        format!("{r} is neither a file nor a folder (a FIFO, socket or device); it was not opened"),
                    )
                    .field(r.clone()),
                );
            }
        }
    }
    files.sort();
    files
}

/// One digest stream of a serialization's hash type.
pub enum Hasher {
    Sha256(sha2::Sha256),
    Blake2b(Box<blake2::Blake2b512>),
    Blake3(Box<blake3::Hasher>),
}

impl Hasher {
    /// A fresh stream.
    pub fn new(t: HashType) -> Self {
        use sha2::Digest;
        match t {
            HashType::Sha256 => Hasher::Sha256(sha2::Sha256::new()),
            HashType::Blake2b => Hasher::Blake2b(Box::new(blake2::Blake2b512::new())),
            HashType::Blake3 => Hasher::Blake3(Box::new(blake3::Hasher::new())),
        }
    }

    /// Hashes the next bytes.
    pub fn update(&mut self, b: &[u8]) {
        use sha2::Digest;
        match self {
            Hasher::Sha256(h) => h.update(b),
            Hasher::Blake2b(h) => h.update(b),
            Hasher::Blake3(h) => {
                h.update(b);
            }
        }
    }

    /// The digest.
    pub fn finish(self) -> Vec<u8> {
        use sha2::Digest;
        match self {
            Hasher::Sha256(h) => h.finalize().to_vec(),
            Hasher::Blake2b(h) => h.finalize().to_vec(),
            Hasher::Blake3(h) => h.finalize().as_bytes().to_vec(),
        }
    }
}

/// Hashes `[start, end)` of `path` (a regular file, checked before the open).
fn hash_range(
    path: &Path,
    start: u64,
    end: u64,
    t: HashType,
    cancel: &CancelToken,
) -> Result<Vec<u8>, String> {
    let meta = fs::metadata(path).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    let file = File::open(path).map_err(|e| e.to_string())?;
    let mut h = Hasher::new(t);
    let mut buf = vec![0u8; CHUNK.min((end - start).max(1) as usize)];
    let mut at = start;
    while at < end {
        if cancel.is_cancelled() {
            return Err("cancelled".into());
        }
        let want = ((end - at) as usize).min(buf.len());
        let n = read_at(&file, &mut buf[..want], at)
            .map_err(|e| format!("read error at byte {at}: {e}"))?;
        if n == 0 {
            return Err(format!("the file ends at byte {at}, before {end}"));
        }
        h.update(&buf[..n]);
        at += n as u64;
    }
    Ok(h.finish())
}

/// Compares the statement's resources with `dir`. `known` holds what the
/// audit's pass already hashed (whole files' SHA-256 for the `files`
/// method with `sha256`, shard ranges for `shards`), so payload files are
/// not read twice. `signature` is the signature file, never counted as
/// unsigned.
pub fn compare(
    dir: &Path,
    statement: &Statement,
    signature: Option<&Path>,
    known: &Known,
    ignore_unsigned: bool,
    cancel: &CancelToken,
) -> Compared {
    let mut out = Compared::default();
    let ser = &statement.serialization;
    let mut ignore: Vec<String> = ser.ignore_paths.clone();
    ignore.extend(GIT_PATHS.iter().map(|s| s.to_string()));
    if let Some(sig) = signature
        && let (Ok(d), Ok(s)) = (dir.canonicalize(), sig.canonicalize())
        && let Ok(rel) = s.strip_prefix(&d)
    {
        ignore.push(rel.to_string_lossy().replace('\\', "/"));
    }
    let present = walk(dir, &ignore, ser.allow_symlinks, &mut out);
    let present_set: std::collections::HashSet<&str> = present.iter().map(String::as_str).collect();

    // Resources by file.
    let mut by_file: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, r) in statement.resources.iter().enumerate() {
        by_file.entry(r.path.as_str()).or_default().push(i);
    }
    for f in &present {
        if !by_file.contains_key(f.as_str()) {
            out.unsigned_files.push(f.clone());
            if !ignore_unsigned {
                out.findings.push(
                    Finding::error(
                        checks::OMS_UNSIGNED,
                        format!("{f} is in the folder but not in the signature (pass --ignore-unsigned to accept files the signer did not sign)"),
                    )
                    .field(f.clone()),
                );
            }
        }
    }
    // One job per resource to hash: (resource index, path, range).
    let mut jobs: Vec<(usize, PathBuf, u64, u64)> = Vec::new();
    let mut checked_files = Vec::new();
    for (file, idx) in &by_file {
        if !present_set.contains(file) {
            if ignored(file, &ignore) {
                out.findings.push(
                    Finding::error(
                        checks::OMS_MANIFEST,
                        format!(
                            "{file} is signed, but the signature's own ignore_paths exclude it"
                        ),
                    )
                    .field(file.to_string()),
                );
            } else {
                out.findings.push(
                    Finding::error(
                        checks::OMS_MISSING,
                        format!("{file} is signed but missing from the folder"),
                    )
                    .field(file.to_string()),
                );
            }
            continue;
        }
        plan(
            file,
            dir.join(file),
            idx,
            statement,
            known,
            &mut jobs,
            &mut out,
        );
        checked_files.push(file.to_string());
    }
    hash_jobs(&jobs, statement, cancel, &mut out);
    count_checked(&checked_files, &mut out);
    out
}

/// Plans the hashing of one signed file's resources (`idx`): the pass's own
/// digests where it has them (`known`, by the name `file` has there), else
/// one job per range; a shard range the file no longer has, or bytes no
/// shard covers, is a finding.
fn plan(
    file: &str,
    path: PathBuf,
    idx: &[usize],
    statement: &Statement,
    known: &Known,
    jobs: &mut Vec<(usize, PathBuf, u64, u64)>,
    out: &mut Compared,
) {
    let ser = &statement.serialization;
    let len = fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    match ser.method {
        Method::Files => {
            let i = idx[0];
            if ser.hash_type == HashType::Sha256
                && let Some(d) = known.sha256.get(file)
            {
                compare_one(statement, i, d, out);
            } else {
                jobs.push((i, path, 0, len));
            }
        }
        Method::Shards { shard_size } => {
            let mut want: Vec<(u64, u64)> = Vec::new();
            let mut s = 0;
            while s < len {
                want.push((s, (s + shard_size).min(len)));
                s += shard_size;
            }
            let mut have: Vec<(u64, u64, usize)> = idx
                .iter()
                .filter_map(|&i| statement.resources[i].range.map(|(a, b)| (a, b, i)))
                .collect();
            have.sort();
            for &(a, b, i) in &have {
                if !want.contains(&(a, b)) {
                    out.findings.push(
                        Finding::error(
                            checks::OMS_MISSING,
                            format!("shard {} is signed, but {file} is now {len} bytes, so that range does not exist", statement.resources[i].name),
                        )
                        .field(file.to_string())
                        .offset(a),
                    );
                } else if let Some(d) = known.ranges.get(&(file.to_string(), a, b)) {
                    compare_one(statement, i, d, out);
                } else {
                    jobs.push((i, path.clone(), a, b));
                }
            }
            for &(a, b) in &want {
                if !have.iter().any(|&(x, y, _)| (x, y) == (a, b)) {
                    out.findings.push(
                        Finding::error(
                            checks::OMS_UNSIGNED,
                            format!("bytes {a}..{b} of {file} are covered by no signed shard"),
                        )
                        .field(file.to_string())
                        .offset(a),
                    );
                }
            }
        }
    }
}

/// Hashes every planned range in parallel (shards of one large file spread
/// over every core) and compares each digest.
fn hash_jobs(
    jobs: &[(usize, PathBuf, u64, u64)],
    statement: &Statement,
    cancel: &CancelToken,
    out: &mut Compared,
) {
    let ser = &statement.serialization;
    let results: Vec<(usize, Result<Vec<u8>, String>)> = jobs
        .par_iter()
        .map(|(i, path, a, b)| (*i, hash_range(path, *a, *b, ser.hash_type, cancel)))
        .collect();
    for (i, r) in results {
        match r {
            Ok(d) => compare_one(statement, i, &d, out),
            Err(e) => {
                let res = &statement.resources[i];
                out.findings.push(
                    Finding::error(
                        checks::OMS_DIGEST,
                        format!("{} could not be hashed: {e}", res.name),
                    )
                    .field(res.path.clone()),
                );
            }
        }
    }
}

/// Counts the files with no finding among those whose resources were checked.
fn count_checked(checked_files: &[String], out: &mut Compared) {
    let bad_files: std::collections::HashSet<String> = out
        .findings
        .iter()
        .filter_map(|f| f.field.clone())
        .collect();
    out.matched_files = checked_files
        .iter()
        .filter(|f| !bad_files.contains(*f))
        .cloned()
        .collect();
    out.files_checked = out.matched_files.len();
}

/// Compares a single-file signature (every resource named `.`) with `file`,
/// the one file the user audits. `known` is what the pass hashed of it,
/// under the file's name (its last path component).
pub fn compare_file(
    file: &Path,
    statement: &Statement,
    known: &Known,
    cancel: &CancelToken,
) -> Compared {
    let mut out = Compared::default();
    let idx: Vec<usize> = (0..statement.resources.len()).collect();
    let mut jobs = Vec::new();
    let shown = file.file_name().map_or_else(
        || file.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    plan(
        &shown,
        file.to_path_buf(),
        &idx,
        statement,
        known,
        &mut jobs,
        &mut out,
    );
    hash_jobs(&jobs, statement, cancel, &mut out);
    // The statement calls the file "."; findings name it.
    let single = super::statement::SINGLE_FILE;
    for f in &mut out.findings {
        if f.field.as_deref() == Some(single) {
            f.field = Some(shown.clone());
        }
        if let Some(rest) = f.message.strip_prefix(single)
            && (rest.starts_with(' ') || rest.starts_with(':'))
        {
            f.message = format!("{shown}{rest}");
        }
    }
    count_checked(std::slice::from_ref(&shown), &mut out);
    out
}

fn compare_one(statement: &Statement, i: usize, got: &[u8], out: &mut Compared) {
    let r = &statement.resources[i];
    if r.digest == got {
        out.matched += 1;
    } else {
        out.findings.push(
            Finding::error(
                checks::OMS_DIGEST,
                format!(
                    "{} has {} {}, the signature says {}",
                    r.name,
                    statement.serialization.hash_type.name(),
                    crate::format::hex(got),
                    crate::format::hex(&r.digest)
                ),
            )
            .field(r.path.clone())
            .maybe_offset(r.range.map(|(a, _)| a)),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signing::statement::{Resource, Serialization};

    fn statement(files: &[(&str, &[u8])]) -> Statement {
        use sha2::Digest;
        Statement {
            predicate_type: crate::signing::statement::PREDICATE_V1.into(),
            model_name: "m".into(),
            root_digest: None,
            serialization: Serialization {
                method: Method::Files,
                hash_type: HashType::Sha256,
                allow_symlinks: false,
                ignore_paths: vec!["skip".into()],
            },
            resources: files
                .iter()
                .map(|(n, b)| Resource {
                    name: n.to_string(),
                    path: n.to_string(),
                    range: None,
                    digest: sha2::Sha256::digest(b).to_vec(),
                })
                .collect(),
            single_file: false,
        }
    }

    #[cfg(unix)]
    #[test]
    fn links_and_special_files_are_findings_and_never_opened() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        std::fs::write(d.join("a"), b"alpha").unwrap();
        std::fs::create_dir_all(d.join("skip/deep")).unwrap();
        std::fs::write(d.join("skip/deep/x"), b"ignored").unwrap();
        std::os::unix::fs::symlink(d.join("a"), d.join("link")).unwrap();
        let fifo = d.join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo only creates a node.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let st = statement(&[("a", b"alpha")]);
        let out = compare(
            d,
            &st,
            None,
            &Known::default(),
            false,
            &CancelToken::default(),
        );
        let mut paths: Vec<_> = out
            .findings
            .iter()
            .map(|f| (f.check.as_str(), f.field.clone().unwrap_or_default()))
            .collect();
        paths.sort();
        assert_eq!(
            paths,
            [
                ("oms.path", "fifo".to_string()),
                ("oms.path", "link".to_string())
            ]
        );
        assert_eq!(out.matched, 1);
        assert!(out.unsigned_files.is_empty());
    }

    #[test]
    fn a_digest_from_the_pass_is_used_without_reading_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("w"), b"on disk").unwrap();
        let st = statement(&[("w", b"signed")]);
        // The pass's digest says "signed": it is taken as is.
        let mut known = Known::default();
        known
            .sha256
            .insert("w".to_string(), st.resources[0].digest.clone());
        let out = compare(
            tmp.path(),
            &st,
            None,
            &known,
            false,
            &CancelToken::default(),
        );
        assert!(out.findings.is_empty(), "{:?}", out.findings);
        // Without it the file is hashed, and differs.
        let out = compare(
            tmp.path(),
            &st,
            None,
            &Known::default(),
            false,
            &CancelToken::default(),
        );
        assert_eq!(out.findings[0].check, checks::OMS_DIGEST);
    }
}
