//! The provenance chain as plain data: source revision → parent bundle (for
//! a calibrated GPTQ-Q4 overlay) → this bundle → a compared bundle, each
//! node with its hashes and a verified / mismatch / unknown mark, each link
//! with the checks that tie its two ends. The app's Lineage tab draws it,
//! [`Chain::to_text`] prints it, and a report renderer can walk it.

use serde::{Deserialize, Serialize};

use super::{FileRow, Report};
use crate::finding::{CheckId, Finding, Severity, checks as c};
use crate::format::Provenance;
use crate::format::gptq::{ParentStatus, ProvenanceReport};

/// What is known of a hash, a node or a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mark {
    /// Measured and as declared.
    Verified,
    /// Measured and not as declared.
    Mismatch,
    /// Not measured (not at hand, not finished, or nothing to compare with).
    Unknown,
}

impl Mark {
    /// The word shown beside it.
    pub fn text(self) -> &'static str {
        match self {
            Mark::Verified => "verified",
            Mark::Mismatch => "mismatch",
            Mark::Unknown => "unknown",
        }
    }

    /// A one-character symbol for compact text.
    pub fn symbol(self) -> &'static str {
        match self {
            Mark::Verified => "✔",
            Mark::Mismatch => "✖",
            Mark::Unknown => "?",
        }
    }

    /// The worst of several marks: any mismatch, else any unknown.
    pub fn worst(marks: impl IntoIterator<Item = Mark>) -> Mark {
        let mut out = Mark::Verified;
        for m in marks {
            match m {
                Mark::Mismatch => return Mark::Mismatch,
                Mark::Unknown => out = Mark::Unknown,
                Mark::Verified => {}
            }
        }
        out
    }

    fn of(ok: Option<bool>) -> Mark {
        match ok {
            Some(true) => Mark::Verified,
            Some(false) => Mark::Mismatch,
            None => Mark::Unknown,
        }
    }
}

/// Which place in the chain a node holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeKind {
    /// The source checkpoint's revision.
    Source,
    /// The parent bundle of an overlay.
    Parent,
    /// The bundle audited.
    Bundle,
    /// The bundle it was compared with.
    Compared,
}

/// One hash of a node, with what is known of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HashLine {
    /// What it is the hash of.
    pub label: String,
    /// The hash (or revision), when known.
    pub value: Option<String>,
    /// Verified against its declaration, mismatched, or unknown.
    pub mark: Mark,
}

/// One box of the chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    /// Its place.
    pub kind: NodeKind,
    /// Heading (`source revision`, `parent bundle`, …).
    pub title: String,
    /// A path, a format or a revision.
    pub subtitle: String,
    /// Its hashes.
    pub hashes: Vec<HashLine>,
    /// The node as a whole.
    pub mark: Mark,
    /// One sentence more, when there is one.
    pub note: Option<String>,
}

/// One check of a link.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkCheck {
    /// Its check id (registered), or a short name for a step that is no check.
    pub check: String,
    /// Its outcome.
    pub mark: Mark,
    /// What was found.
    pub detail: String,
}

/// The arrow between `nodes[i]` and `nodes[i + 1]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Link {
    /// What the arrow means (`recalibrated from`, …).
    pub label: String,
    /// The checks that tie its ends.
    pub checks: Vec<LinkCheck>,
    /// The worst of its checks' marks.
    pub mark: Mark,
}

/// A bundle this one was compared with (filled in by whoever compares;
/// the chain ends in "no bundle compared" without one).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Compared {
    /// Its folder.
    pub path: String,
    /// Its format name.
    pub format: Option<String>,
    /// SHA-256 of its manifest.json.
    pub manifest_sha256: Option<String>,
    /// SHA-256 of its payload (first file).
    pub weights_sha256: Option<String>,
    /// Tensors with the same range hash on both sides.
    pub identical: usize,
    /// Tensors on both sides with different bytes.
    pub changed: usize,
    /// Tensors only in this bundle.
    pub only_a: usize,
    /// Tensors only in the compared one.
    pub only_b: usize,
}

/// The whole chain, left to right.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Chain {
    /// [`crate::format::gptq::READING`] for a calibrated overlay: the chain's
    /// parent link follows bundlescope's documented reading.
    pub reading: Option<String>,
    /// The OMS signature's headline ("signed by …, 14 files, all digests
    /// match", or what failed); `Some("unsigned")` for an audited bundle
    /// without one; None while unknown.
    pub signature: Option<String>,
    /// The nodes, source first.
    pub nodes: Vec<Node>,
    /// `links[i]` joins `nodes[i]` and `nodes[i + 1]`.
    pub links: Vec<Link>,
}

/// What the chain is built from: the pieces of a report (so the app can
/// build it from its running model without building a whole report).
pub struct Inputs<'a> {
    /// The bundle's folder as given.
    pub path: &'a str,
    /// Its format name.
    pub format: &'a str,
    /// Its provenance (with `gptq` filled in when measured).
    pub provenance: &'a Provenance,
    /// Its payload files.
    pub files: &'a [FileRow],
    /// Every finding so far.
    pub findings: &'a [Finding],
    /// Did the audit complete?
    pub finished: bool,
}

/// The line a provenance view leads with: the signature's headline, or
/// "unsigned".
pub fn signature_headline(sig: Option<&crate::signing::SignatureReport>) -> String {
    sig.map_or_else(
        || format!("unsigned (no {})", crate::signing::SIGNATURE_FILE),
        |s| s.headline(),
    )
}

/// Whether bundles of `format` (a format name) carry a manifest.json that
/// declares a source revision, a profile and the source's config.json
/// hash: GGUF files, safetensors checkpoints and NVFP4 artifacts declare
/// none of these.
pub fn declares_source(format: &str) -> bool {
    !matches!(format, "gguf" | "mlx-lm" | "safetensors" | "mlx-nvfp4")
}

/// What a bundle of `format` hashes as its manifest (`manifest_sha256`),
/// named for a person: a GGUF has no manifest (its header bytes are
/// hashed), a checkpoint's is its config.json or index (`file`: the
/// [`Provenance::manifest_file`], when known).
pub fn manifest_hash_label(format: &str, file: Option<&str>) -> String {
    match (format, file) {
        ("gguf", _) => "header SHA-256".into(),
        (_, Some("manifest.json")) => "manifest SHA-256".into(),
        (_, Some(f)) => format!("{f} SHA-256"),
        ("mlx-lm", None) => "config.json SHA-256".into(),
        ("safetensors", None) => "config.json or index SHA-256".into(),
        _ => "manifest SHA-256".into(),
    }
}

/// Base models a GGUF file's metadata lists at most (a hostile count is
/// not followed further).
const MAX_BASE_MODELS: u32 = 8;

/// Characters of a metadata string shown at most.
const MAX_SHOWN_CHARS: usize = 200;

/// What a GGUF file's metadata declares of its source (`general.base_model.*`,
/// `general.source.*`, as llama.cpp's converter writes them): the node's
/// subtitle and one line per repository or address; `None` when it
/// declares nothing.
fn gguf_source(meta: &crate::format::gguf::Metadata) -> Option<(String, Vec<HashLine>)> {
    use crate::format::gguf::Value;
    let text = |key: &str| match meta.get(key) {
        // Control and invisible characters (a bidirectional override that
        // would reorder the line) written out, the length cut.
        Some(Value::Str(s)) if !s.trim().is_empty() => {
            Some(crate::util::text::shown(s.trim(), MAX_SHOWN_CHARS).into_owned())
        }
        _ => None,
    };
    let count = match meta.get("general.base_model.count") {
        Some(Value::U32(n)) => u64::from(*n),
        Some(Value::U64(n)) => *n,
        Some(Value::I32(n)) => u64::try_from(*n).unwrap_or(0),
        Some(Value::I64(n)) => u64::try_from(*n).unwrap_or(0),
        _ => 0,
    };
    let mut names = Vec::new();
    let mut lines = Vec::new();
    for i in 0..count.min(u64::from(MAX_BASE_MODELS)) {
        let key = |field: &str| format!("general.base_model.{i}.{field}");
        let name = text(&key("name"));
        let org = text(&key("organization"));
        let version = text(&key("version"));
        let mut shown = match (org, name) {
            (Some(o), Some(n)) => format!("{o}/{n}"),
            (None, Some(n)) => n,
            (Some(o), None) => format!("{o}/?"),
            (None, None) => format!("base model {i}"),
        };
        if let Some(v) = version {
            shown = format!("{shown} {v}");
        }
        names.push(shown);
        for (field, label) in [("repo_url", "repository"), ("url", "address")] {
            if let Some(v) = text(&key(field)) {
                lines.push(HashLine {
                    label: format!("base model {i} {label}"),
                    value: Some(v),
                    mark: Mark::Unknown,
                });
            }
        }
    }
    if count > u64::from(MAX_BASE_MODELS) {
        names.push(format!("{} more", count - u64::from(MAX_BASE_MODELS)));
    }
    for (key, label) in [
        ("general.source.repo_url", "source repository"),
        ("general.source.url", "source address"),
    ] {
        if let Some(v) = text(key) {
            lines.push(HashLine {
                label: label.into(),
                value: Some(v),
                mark: Mark::Unknown,
            });
        }
    }
    if names.is_empty() && lines.is_empty() {
        return None;
    }
    let subtitle = if names.is_empty() {
        "a source address".to_string()
    } else {
        format!("base model: {}", names.join(", "))
    };
    Some((subtitle, lines))
}

/// Whether the OMS signature does not vouch for the bytes of `file` (a
/// path in the folder): an error naming it of a digest that differs, a
/// signed range the file no longer has, or bytes (or the whole file) that
/// no signed resource covers.
pub fn not_as_signed(findings: &[Finding], file: &str) -> bool {
    findings.iter().any(|f| {
        [c::OMS_DIGEST, c::OMS_MISSING, c::OMS_UNSIGNED].contains(&f.check)
            && f.severity == Severity::Error
            && f.field.as_deref() == Some(file)
    })
}

impl Chain {
    /// The chain of a finished report.
    pub fn of_report(r: &Report, compared: Option<&Compared>) -> Chain {
        let mut chain = Chain::build(
            &Inputs {
                path: &r.bundle.path,
                format: r.bundle.format.as_deref().unwrap_or("?"),
                provenance: &r.provenance,
                files: &r.files,
                findings: &r.findings,
                finished: matches!(r.verdict, "valid" | "invalid"),
            },
            compared,
        );
        chain.signature = Some(signature_headline(r.signature.as_ref()));
        chain
    }

    /// Builds the chain.
    pub fn build(i: &Inputs, compared: Option<&Compared>) -> Chain {
        let errors = |id: CheckId| {
            i.findings
                .iter()
                .filter(|f| f.check == id && f.severity == Severity::Error)
                .count()
        };
        // A check's mark from the findings: any error is a mismatch, none
        // after a finished audit is verified.
        let by_findings = |id: CheckId| {
            if errors(id) > 0 {
                Mark::Mismatch
            } else if i.finished {
                Mark::Verified
            } else {
                Mark::Unknown
            }
        };
        let p = i.provenance;
        let g: Option<&ProvenanceReport> = p.gptq.as_deref();
        let declared = p.calibrated.as_deref().or(g.map(|g| &g.declared));
        let mut nodes = Vec::new();
        let mut links = Vec::new();

        // Source revision (a GGUF file: the base models its metadata names).
        let gguf_declares = p.gguf.as_deref().and_then(gguf_source);
        let (revision, rev_mark, rev_note) = match (declared, g) {
            (Some(d), Some(g)) => (
                d.parent.source_revision.clone(),
                Mark::of(g.parent_check.source_revision_ok),
                "declared by the overlay's parent; checked against the parent's manifest",
            ),
            (Some(d), None) => (
                d.parent.source_revision.clone(),
                Mark::Unknown,
                "declared by the overlay's parent",
            ),
            _ if gguf_declares.is_some() => (
                gguf_declares.as_ref().map(|(subtitle, _)| subtitle.clone()),
                Mark::Unknown,
                "declared by the GGUF metadata (general.base_model, general.source); the source checkpoint is not at hand",
            ),
            _ if !declares_source(i.format) => (
                None,
                Mark::Unknown,
                "this format declares no source revision",
            ),
            _ => (
                p.source_revision.clone(),
                Mark::Unknown,
                "declared by the manifest; the source checkpoint is not at hand",
            ),
        };
        nodes.push(Node {
            kind: NodeKind::Source,
            title: if gguf_declares.is_some() {
                "source".into()
            } else {
                "source revision".into()
            },
            subtitle: revision.clone().unwrap_or_else(|| "not given".into()),
            hashes: if let Some((_, lines)) = gguf_declares.clone() {
                lines
            } else if declares_source(i.format) || declared.is_some() {
                vec![HashLine {
                    label: "config.json (expected)".into(),
                    value: p.expected_config_sha256.clone(),
                    mark: Mark::Unknown,
                }]
            } else {
                Vec::new()
            },
            mark: rev_mark,
            note: Some(rev_note.into()),
        });

        // Parent bundle, for an overlay.
        if let Some(d) = declared {
            let pc = g.map(|g| &g.parent_check);
            let status = pc.map_or(ParentStatus::NotFound, |pc| pc.status);
            let mark = match status {
                ParentStatus::Verified => Mark::Verified,
                ParentStatus::Mismatch | ParentStatus::Unreadable => Mark::Mismatch,
                ParentStatus::NotFound => Mark::Unknown,
            };
            nodes.push(Node {
                kind: NodeKind::Parent,
                title: "parent bundle".into(),
                subtitle: pc
                    .and_then(|pc| pc.path.clone())
                    .unwrap_or_else(|| "not found (give --parent DIR or pick it)".into()),
                hashes: vec![
                    HashLine {
                        label: "manifest SHA-256".into(),
                        value: d.parent.manifest_sha256.clone(),
                        mark: Mark::of(pc.and_then(|pc| pc.manifest_sha256_ok)),
                    },
                    HashLine {
                        label: "weights SHA-256".into(),
                        value: d.parent.weights_sha256.clone(),
                        mark: Mark::of(pc.and_then(|pc| pc.weights_sha256_ok)),
                    },
                ],
                mark,
                // Once verified, the link's checks say it all.
                note: pc
                    .filter(|pc| pc.status != ParentStatus::Verified)
                    .map(|pc| pc.message.clone())
                    .filter(|m| !m.is_empty())
                    .or_else(|| {
                        pc.is_none()
                            .then(|| "the parent checks have not run yet".to_string())
                    }),
            });
            links.push(Link::new(
                "source of",
                vec![LinkCheck {
                    check: c::PROVENANCE_PARENT.as_str().into(),
                    mark: rev_mark,
                    detail: match rev_mark {
                        Mark::Verified => "the parent's source_revision is the declared one".into(),
                        Mark::Mismatch => {
                            "the parent's source_revision differs from the declared one".into()
                        }
                        Mark::Unknown => "parent not at hand".into(),
                    },
                }],
            ));
            let parent_known = status != ParentStatus::NotFound;
            let parent_mark = |id: CheckId| {
                if parent_known {
                    by_findings(id)
                } else {
                    Mark::Unknown
                }
            };
            let mut checks = vec![
                LinkCheck {
                    check: c::PROVENANCE_PARENT.as_str().into(),
                    mark: Mark::worst([
                        Mark::of(pc.and_then(|pc| pc.manifest_sha256_ok)),
                        Mark::of(pc.and_then(|pc| pc.weights_sha256_ok)),
                    ]),
                    detail: "the parent's manifest and payload hash to the declared SHA-256s"
                        .into(),
                },
                LinkCheck {
                    check: c::PROVENANCE_PARENT_COPIED.as_str().into(),
                    mark: parent_mark(c::PROVENANCE_PARENT_COPIED),
                    detail: pc.map_or("parent not at hand".into(), |pc| {
                        format!(
                            "{} copied tensors byte-identical, {} differ",
                            pc.copied_identical,
                            pc.copied_differing.len()
                        )
                    }),
                },
                LinkCheck {
                    check: c::PROVENANCE_PARENT_OVERLAY.as_str().into(),
                    mark: parent_mark(c::PROVENANCE_PARENT_OVERLAY),
                    detail: pc.map_or("parent not at hand".into(), |pc| {
                        format!(
                            "{} overlay tensors recalibrated (same name and shape, other bytes), {} problems",
                            pc.overlay_changed,
                            pc.overlay_problems.len()
                        )
                    }),
                },
            ];
            let scale_detail = match (g, pc) {
                (Some(g), Some(pc)) if g.static_parent_scale_equality_rechecked => format!(
                    "rechecked (info): {} overlay tensors keep the parent's scales, {} have new ones",
                    pc.scales_equal.len(),
                    pc.scales_differ.len()
                ),
                _ => "not rechecked (needs the parent)".into(),
            };
            checks.push(LinkCheck {
                check: c::PROVENANCE_PARENT_SCALES.as_str().into(),
                mark: if g.is_some_and(|g| g.static_parent_scale_equality_rechecked) {
                    Mark::Verified
                } else {
                    Mark::Unknown
                },
                detail: scale_detail,
            });
            // Info, not a verification: it does not decide the link's mark.
            let mut link = Link::new("recalibrated into", checks);
            link.mark = Mark::worst(
                link.checks
                    .iter()
                    .filter(|c| c.check != c::PROVENANCE_PARENT_SCALES.as_str())
                    .map(|c| c.mark),
            );
            links.push(link);
        }

        // This bundle.
        // A file whose bytes differ from what the signature lists is a
        // mismatch, whatever the folder's own manifest says of it.
        let unsigned_bytes = |file: &str| not_as_signed(i.findings, file);
        let manifest_mark = match p.manifest_file.as_deref() {
            Some(m) if unsigned_bytes(m) => Mark::Mismatch,
            _ => by_findings(c::BUNDLE_CHANGED),
        };
        let mut hashes = Vec::new();
        // A checkpoint of shards alone has no JSON to hash.
        if !p.manifest_sha256.is_empty() {
            hashes.push(HashLine {
                label: manifest_hash_label(i.format, p.manifest_file.as_deref()),
                value: Some(p.manifest_sha256.clone()),
                mark: manifest_mark,
            });
        }
        for f in i.files {
            hashes.push(HashLine {
                label: format!("{} SHA-256", f.file),
                value: f.sha256.clone().or_else(|| f.expected_sha256.clone()),
                mark: match (f.ok, f.as_signed) {
                    _ if unsigned_bytes(&f.file) => Mark::Mismatch,
                    (_, Some(false)) => Mark::Mismatch,
                    // Nothing in the folder claims its digest; the
                    // signature's matched (a GGUF, a checkpoint).
                    (None, Some(true)) => Mark::Verified,
                    (ok, _) => Mark::of(ok),
                },
            });
        }
        if let Some(d) = declared {
            let recomputed = g.and_then(|g| g.overlay_identity_recomputed_sha256.clone());
            hashes.push(HashLine {
                label: "overlay identity".into(),
                value: d.overlay_identity_sha256.clone(),
                mark: match (&recomputed, &d.overlay_identity_sha256) {
                    (Some(r), Some(d)) if r == d => Mark::Verified,
                    (Some(_), _) => Mark::Mismatch,
                    _ if errors(c::PROVENANCE_IDENTITY) > 0 => Mark::Mismatch,
                    _ => Mark::Unknown,
                },
            });
        }
        let errors_total = i
            .findings
            .iter()
            .filter(|f| f.severity == Severity::Error)
            .count();
        let mut mark = Mark::worst(hashes.iter().map(|h| h.mark));
        if errors_total > 0 {
            mark = Mark::Mismatch;
        }
        nodes.push(Node {
            kind: NodeKind::Bundle,
            title: "this bundle".into(),
            subtitle: format!("{} ({})", i.path, i.format),
            hashes,
            mark,
            note: Some(if !i.finished {
                "audit not finished".into()
            } else if errors_total > 0 {
                format!("{errors_total} error finding(s)")
            } else {
                "every check passed".into()
            }),
        });
        if declared.is_none() {
            let detail = if declares_source(i.format) || gguf_declares.is_some() {
                "declared only: bundlescope does not read the source checkpoint here (spotcheck --reference measures against it)"
            } else {
                "not declared: spotcheck --reference measures against a source checkpoint you give"
            };
            links.insert(
                0,
                Link::new(
                    "quantised from",
                    vec![LinkCheck {
                        check: "source_revision".into(),
                        mark: Mark::Unknown,
                        detail: detail.into(),
                    }],
                ),
            );
        } else if let Some(g) = g {
            // The overlay's own checks sit on the parent → this link.
            if let Some(link) = links.last_mut() {
                link.checks.push(LinkCheck {
                    check: c::PROVENANCE_COPIED_HASH.as_str().into(),
                    mark: if g.copied_tensor_range_hashes_verified {
                        Mark::Verified
                    } else if errors(c::PROVENANCE_COPIED_HASH) > 0 {
                        Mark::Mismatch
                    } else {
                        Mark::Unknown
                    },
                    detail: format!(
                        "{} copied range hashes against this payload",
                        g.declared.copied.len()
                    ),
                });
                link.checks.push(LinkCheck {
                    check: c::PROVENANCE_IDENTITY.as_str().into(),
                    mark: by_findings(c::PROVENANCE_IDENTITY),
                    detail: format!(
                        "overlay identity of {} tensors recomputed",
                        g.declared.overlay.len()
                    ),
                });
                link.mark = Mark::worst(
                    link.checks
                        .iter()
                        .filter(|c| c.check != c::PROVENANCE_PARENT_SCALES.as_str())
                        .map(|c| c.mark),
                );
            }
        }

        // The compared bundle.
        match compared {
            Some(cmp) => {
                nodes.push(Node {
                    kind: NodeKind::Compared,
                    title: "compared bundle".into(),
                    subtitle: format!("{} ({})", cmp.path, cmp.format.as_deref().unwrap_or("?")),
                    hashes: vec![
                        HashLine {
                            label: manifest_hash_label(cmp.format.as_deref().unwrap_or(""), None),
                            value: cmp.manifest_sha256.clone(),
                            mark: Mark::Unknown,
                        },
                        HashLine {
                            label: "weights SHA-256".into(),
                            value: cmp.weights_sha256.clone(),
                            mark: Mark::Unknown,
                        },
                    ],
                    mark: Mark::Unknown,
                    note: Some("compared tensor by tensor; not audited here".into()),
                });
                links.push(Link::new(
                    "compared with",
                    vec![LinkCheck {
                        check: "diff".into(),
                        mark: Mark::Verified,
                        detail: format!(
                            "{} identical, {} changed, {} only here, {} only there",
                            cmp.identical, cmp.changed, cmp.only_a, cmp.only_b
                        ),
                    }],
                ));
            }
            None => {
                nodes.push(Node {
                    kind: NodeKind::Compared,
                    title: "compared bundle".into(),
                    subtitle: "no bundle compared".into(),
                    hashes: Vec::new(),
                    mark: Mark::Unknown,
                    note: None,
                });
                links.push(Link::new("compared with", Vec::new()));
            }
        }
        Chain {
            reading: declared.map(|_| crate::format::gptq::READING.to_string()),
            signature: None,
            nodes,
            links,
        }
    }

    /// The chain as plain text, one node after the other with its links.
    pub fn to_text(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        if let Some(sig) = &self.signature {
            let _ = writeln!(s, "signature: {sig}");
        }
        if let Some(r) = &self.reading {
            let _ = writeln!(s, "({r})");
        }
        for (k, n) in self.nodes.iter().enumerate() {
            let _ = writeln!(
                s,
                "[{}] {}: {}  ({})",
                n.mark.symbol(),
                n.title,
                n.subtitle,
                n.mark.text()
            );
            for h in &n.hashes {
                let _ = writeln!(
                    s,
                    "      {:<24} {}  {}",
                    h.label,
                    h.value.as_deref().unwrap_or("—"),
                    h.mark.text()
                );
            }
            if let Some(note) = &n.note {
                let _ = writeln!(s, "      {note}");
            }
            if let Some(l) = self.links.get(k) {
                let _ = writeln!(s, "   │ {} ({})", l.label, l.mark.text());
                for ch in &l.checks {
                    let _ = writeln!(s, "   │   {} {}: {}", ch.mark.symbol(), ch.check, ch.detail);
                }
                let _ = writeln!(s, "   ▼");
            }
        }
        s
    }
}

impl Link {
    fn new(label: &str, checks: Vec<LinkCheck>) -> Link {
        let mark = if checks.is_empty() {
            Mark::Unknown
        } else {
            Mark::worst(checks.iter().map(|c| c.mark))
        };
        Link {
            label: label.into(),
            checks,
            mark,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finding::Finding;

    fn inputs<'a>(p: &'a Provenance, files: &'a [FileRow], findings: &'a [Finding]) -> Inputs<'a> {
        Inputs {
            path: "/b",
            format: "audio8-mixed-bundle-v2",
            provenance: p,
            files,
            findings,
            finished: true,
        }
    }

    /// weights.bin, hashed and equal to what its manifest expects.
    fn verified_payload() -> [FileRow; 1] {
        [FileRow {
            file: "weights.bin".into(),
            bytes: Some(1),
            sha256: Some("s".into()),
            expected_sha256: Some("s".into()),
            ok: Some(true),
            as_signed: None,
        }]
    }

    #[test]
    fn worst_mark_wins() {
        use Mark::*;
        assert_eq!(Mark::worst([Verified, Verified]), Verified);
        assert_eq!(Mark::worst([Verified, Unknown]), Unknown);
        assert_eq!(Mark::worst([Unknown, Mismatch, Verified]), Mismatch);
        assert_eq!(Mark::worst([]), Verified);
    }

    #[test]
    fn a_plain_bundle_chains_source_bundle_compared() {
        let p = Provenance {
            source_revision: Some("rev".into()),
            manifest_sha256: "m".into(),
            ..Provenance::default()
        };
        let files = verified_payload();
        let c = Chain::build(&inputs(&p, &files, &[]), None);
        let kinds: Vec<_> = c.nodes.iter().map(|n| n.kind).collect();
        assert_eq!(
            kinds,
            [NodeKind::Source, NodeKind::Bundle, NodeKind::Compared]
        );
        assert_eq!(c.links.len(), c.nodes.len() - 1);
        assert_eq!(c.nodes[1].mark, Mark::Verified);
        assert_eq!(c.nodes[2].subtitle, "no bundle compared");
        assert!(c.reading.is_none());
        // A payload mismatch marks the bundle, and the text says so.
        let bad = [FileRow {
            ok: Some(false),
            ..files[0].clone()
        }];
        let err = [Finding::error(c::PAYLOAD_SHA256, "payload hash differs")];
        let c = Chain::build(&inputs(&p, &bad, &err), None);
        assert_eq!(c.nodes[1].mark, Mark::Mismatch);
        let text = c.to_text();
        assert!(
            text.contains("[✖] this bundle: /b (audio8-mixed-bundle-v2)  (mismatch)"),
            "{text}"
        );
        assert!(text.contains("weights.bin SHA-256"), "{text}");
    }

    #[test]
    fn a_file_the_signature_lists_otherwise_is_a_mismatch_though_its_manifest_agrees() {
        let p = Provenance {
            manifest_sha256: "m".into(),
            manifest_file: Some("manifest.json".into()),
            ..Provenance::default()
        };
        let files = verified_payload();
        let signed = |file: &str| {
            Finding::error(c::OMS_DIGEST, format!("{file} has sha256 …")).field(file.to_string())
        };
        let line = |c: &Chain, label: &str| {
            c.nodes[1]
                .hashes
                .iter()
                .find(|h| h.label == label)
                .map(|h| h.mark)
        };
        let c = Chain::build(&inputs(&p, &files, &[signed("weights.bin")]), None);
        assert_eq!(line(&c, "weights.bin SHA-256"), Some(Mark::Mismatch));
        assert_eq!(line(&c, "manifest SHA-256"), Some(Mark::Verified));
        let c = Chain::build(&inputs(&p, &files, &[signed("manifest.json")]), None);
        assert_eq!(line(&c, "weights.bin SHA-256"), Some(Mark::Verified));
        assert_eq!(line(&c, "manifest SHA-256"), Some(Mark::Mismatch));
        // A signed range gone (the file shortened) or bytes no shard covers
        // (the file grown): no digest differs, the file is still not as signed.
        for check in [c::OMS_MISSING, c::OMS_UNSIGNED] {
            let f = [Finding::error(check, "x").field("weights.bin".to_string())];
            let c = Chain::build(&inputs(&p, &files, &f), None);
            assert_eq!(line(&c, "weights.bin SHA-256"), Some(Mark::Mismatch));
            assert!(not_as_signed(&f, "weights.bin"));
        }
        // Another check naming the file is not the signature's, and a
        // warning is no verdict.
        let other = Finding::error(c::PAYLOAD_SHA256, "x").field("weights.bin".to_string());
        let c = Chain::build(&inputs(&p, &files, &[other]), None);
        assert_eq!(line(&c, "weights.bin SHA-256"), Some(Mark::Verified));
        let warn = Finding::warning(c::OMS_UNSIGNED, "x").field("weights.bin".to_string());
        assert!(!not_as_signed(&[warn], "weights.bin"));
        // A checkpoint whose manifest is its index: that file's line.
        let ck = Provenance {
            manifest_sha256: "m".into(),
            manifest_file: Some("model.safetensors.index.json".into()),
            ..Provenance::default()
        };
        let i = Inputs {
            format: "safetensors",
            ..inputs(&ck, &files, &[])
        };
        let found = [signed("model.safetensors.index.json")];
        let i = Inputs {
            findings: &found,
            ..i
        };
        let c = Chain::build(&i, None);
        assert_eq!(
            line(&c, "model.safetensors.index.json SHA-256"),
            Some(Mark::Mismatch)
        );
        // A file nothing in the folder claims a digest of (a GGUF): unknown
        // until the signature vouches for it, then verified; never
        // verified when the signature says otherwise.
        let unclaimed = |as_signed| {
            [FileRow {
                ok: None,
                expected_sha256: None,
                as_signed,
                ..files[0].clone()
            }]
        };
        for (as_signed, want) in [
            (None, Mark::Unknown),
            (Some(true), Mark::Verified),
            (Some(false), Mark::Mismatch),
        ] {
            let rows = unclaimed(as_signed);
            let c = Chain::build(&inputs(&p, &rows, &[]), None);
            assert_eq!(line(&c, "weights.bin SHA-256"), Some(want), "{as_signed:?}");
        }
    }

    #[test]
    fn a_gguf_source_is_read_within_bounds_from_its_metadata() {
        use crate::format::gguf::{Kv, Metadata, Value};
        let meta = |kvs: Vec<(&str, Value)>| Metadata {
            version: 3,
            alignment: 32,
            data_start: 0,
            kvs: kvs
                .into_iter()
                .map(|(k, value)| Kv {
                    key: k.into(),
                    value,
                    offset: 0,
                })
                .collect(),
        };
        let source = |m: Metadata| {
            let p = Provenance {
                manifest_sha256: "h".into(),
                gguf: Some(std::sync::Arc::new(m)),
                ..Provenance::default()
            };
            let i = Inputs {
                format: "gguf",
                ..inputs(&p, &[], &[])
            };
            Chain::build(&i, None).nodes.remove(0)
        };
        // A hostile count is not followed, a long name is cut, a value of
        // the wrong type is not shown.
        let long = "n".repeat(10_000);
        let n = source(meta(vec![
            ("general.base_model.count", Value::U32(u32::MAX)),
            ("general.base_model.0.name", Value::Str(long)),
            ("general.base_model.1.name", Value::U32(7)),
            (
                "general.base_model.1.repo_url",
                Value::Str("https://r".into()),
            ),
            (
                "general.source.url",
                Value::Str("https://a\u{202e}gpj.exe\n".into()),
            ),
        ]));
        assert_eq!(n.title, "source");
        assert!(n.subtitle.starts_with("base model: nnn"), "{}", n.subtitle);
        assert!(n.subtitle.len() < 1_000, "{}", n.subtitle.len());
        assert!(n.subtitle.contains(", base model 1,"), "{}", n.subtitle);
        assert!(n.subtitle.ends_with(&format!("{} more", u32::MAX - 8)));
        let lines: Vec<_> = n.hashes.iter().map(|h| h.label.as_str()).collect();
        assert_eq!(lines, ["base model 1 repository", "source address"]);
        // A right-to-left override is shown, not obeyed.
        assert_eq!(
            n.hashes[1].value.as_deref(),
            Some("https://a\\u{202e}gpj.exe")
        );
        // Nothing declared: the format's own words.
        let n = source(meta(vec![("general.name", Value::Str("x".into()))]));
        assert_eq!(n.title, "source revision");
        assert_eq!(n.subtitle, "not given");
        assert!(n.hashes.is_empty());
    }

    #[test]
    fn checkpoints_name_their_own_hashes_and_declare_no_source() {
        let p = Provenance {
            manifest_sha256: "h".into(),
            ..Provenance::default()
        };
        for (format, label) in [
            ("gguf", "header SHA-256"),
            ("mlx-lm", "config.json SHA-256"),
            ("safetensors", "config.json or index SHA-256"),
        ] {
            let i = Inputs {
                format,
                ..inputs(&p, &[], &[])
            };
            let c = Chain::build(&i, None);
            let labels: Vec<_> = c.nodes[1].hashes.iter().map(|h| h.label.as_str()).collect();
            assert_eq!(labels, [label], "{format}");
            // No expected config line, and the source says it is not declared.
            assert!(c.nodes[0].hashes.is_empty(), "{format}");
            assert_eq!(c.nodes[0].subtitle, "not given");
            assert!(
                c.links[0].checks[0].detail.starts_with("not declared"),
                "{format}"
            );
        }
        // Shards alone: no JSON, no hash line for it.
        let bare = Provenance::default();
        let i = Inputs {
            format: "safetensors",
            ..inputs(&bare, &[], &[])
        };
        assert!(Chain::build(&i, None).nodes[1].hashes.is_empty());
        // An audio8 bundle keeps its manifest's lines.
        let c = Chain::build(&inputs(&p, &[], &[]), None);
        assert_eq!(c.nodes[1].hashes[0].label, "manifest SHA-256");
        assert_eq!(c.nodes[0].hashes[0].label, "config.json (expected)");
    }
}
