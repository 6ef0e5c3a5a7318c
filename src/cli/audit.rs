//! `bundlescope audit DIR [--json | --markdown]`.

use std::path::PathBuf;

use anyhow::{Result, bail};
use bundlescope::audit::{self, Event, Failure, Severity};
use bundlescope::report::markdown::audit_markdown;
use bundlescope::report::{Report, ReportBuilder, aliases_line, failure_report, human_bytes};
use bundlescope::util::text::{SHOWN_CHARS, shown};

use super::common::progress_bar;

/// Arguments of `audit`.
#[derive(clap::Args, Default)]
pub struct Args {
    /// Bundle folder (or its manifest.json).
    pub dir: PathBuf,
    /// Print the JSON report on stdout instead of the summary.
    #[arg(long)]
    pub json: bool,
    /// Print the report as Markdown (for a review) instead of the summary.
    #[arg(long, conflicts_with = "json")]
    pub markdown: bool,
    /// Also hash every tensor's byte range (`tensors[].sha256` in the JSON
    /// report), in the same read, on one more core.
    #[arg(long)]
    pub range_hashes: bool,
    /// The parent bundle of a calibrated GPTQ-Q4 overlay (default: a folder
    /// beside it whose manifest hash is the declared parent's).
    #[arg(long, value_name = "DIR")]
    pub parent: Option<PathBuf>,
    /// Expected SHA-256 of a payload file, `FILE=HEX` (repeatable): verified
    /// in the pass, over any hash the folder carries (a hub's listed hashes;
    /// a GGUF file carries none of its own).
    #[arg(long, value_name = "FILE=HEX", value_parser = parse_expect)]
    pub expect: Vec<(String, String)>,
    /// The OMS signature to verify (default: model.sig in the folder).
    #[arg(long, value_name = "FILE")]
    pub signature: Option<PathBuf>,
    /// Public key (PEM) of an OMS key-method signature.
    #[arg(long, value_name = "PUB.pem")]
    pub key: Vec<PathBuf>,
    /// Root certificate(s) (PEM) of an OMS certificate-method signature
    /// (repeatable).
    #[arg(long, value_name = "ROOT.pem")]
    pub cert_root: Vec<PathBuf>,
    /// Sigstore trusted_root.json: the Fulcio roots a Sigstore-method
    /// certificate chain is checked against.
    #[arg(long, value_name = "FILE")]
    pub trusted_root: Option<PathBuf>,
    /// Accept files in the folder that the signature does not cover.
    #[arg(long)]
    pub ignore_unsigned: bool,
}

/// `FILE=HEX`: a file name and 64 hex digits.
fn parse_expect(s: &str) -> std::result::Result<(String, String), String> {
    let (file, hex) = s
        .rsplit_once('=')
        .ok_or_else(|| format!("{s:?}: expected FILE=HEX"))?;
    if file.is_empty() || !bundlescope::format::checksums::is_sha256(hex) {
        return Err(format!(
            "{s:?}: expected FILE=HEX with a file name and 64 hex digits"
        ));
    }
    Ok((file.to_string(), hex.to_ascii_lowercase()))
}

pub fn run(a: Args) -> Result<i32> {
    let handle = audit::spawn(
        a.dir.clone(),
        audit::Options {
            range_hashes: a.range_hashes,
            parent: a.parent.clone(),
            expect: a.expect.clone(),
            signature: a.signature.clone(),
            trust: bundlescope::signing::TrustPaths {
                keys: a.key.clone(),
                roots: a.cert_root.clone(),
                trusted_root: a.trusted_root.clone(),
            },
            ignore_unsigned: a.ignore_unsigned,
            ..audit::Options::default()
        },
        None,
    )?;
    let bar = progress_bar(
        "{spinner} {msg} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta}",
    );
    let mut builder = ReportBuilder::default();
    let mut base = Vec::new();
    for event in handle.events.iter() {
        match &event {
            Event::Started { files, total_bytes } => {
                bar.set_length(*total_bytes);
                bar.set_message(files.first().map_or(String::new(), |f| f.name.clone()));
                base = vec![0u64; files.len()];
            }
            Event::HashProgress { file, done, .. } => {
                if let Some(b) = base.get_mut(*file) {
                    *b = *done;
                }
                bar.set_position(base.iter().sum());
            }
            _ => {}
        }
        let finished = matches!(event, Event::Finished(_));
        builder.apply(&event);
        if finished {
            break;
        }
    }
    bar.finish_and_clear();
    // No verdict without a completed pass: each of these exits 2.
    match &builder.outcome {
        Some(Err(Failure::Cancelled)) | None => bail!("the audit stopped before it finished"),
        // A pipeline reading --json gets a report for this outcome too; the
        // sentence on stderr is the same as without --json.
        Some(Err(Failure::Open(e))) => {
            if a.json || a.markdown {
                let report = failure_report(&a.dir.display().to_string(), e);
                if a.json {
                    println!("{}", serde_json::to_string_pretty(&report)?);
                } else {
                    print!("{}", audit_markdown(&report));
                }
            }
            return Err(Failure::Open(e.clone()).into());
        }
        Some(Err(failure)) => return Err(failure.clone().into()),
        Some(Ok(_)) => {}
    }
    let Some(report) = builder.report(&a.dir.display().to_string()) else {
        bail!("the audit finished without opening the bundle");
    };
    if a.json {
        print_json(&report)?;
    } else if a.markdown {
        print!("{}", audit_markdown(&report));
    } else {
        print_summary(&report);
    }
    Ok(if report.verdict == "valid" {
        super::EXIT_OK
    } else {
        super::EXIT_INVALID
    })
}

/// The report as pretty JSON, written straight to stdout: a report of
/// 10^5 tensors is tens of MB of text, never held in memory whole.
fn print_json(report: &Report) -> Result<()> {
    use std::io::Write as _;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    serde_json::to_writer_pretty(&mut out, report)?;
    writeln!(out)?;
    out.flush()?;
    Ok(())
}

fn print_summary(r: &Report) {
    let errors = r
        .findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .count();
    let warnings = r
        .findings
        .iter()
        .filter(|f| f.severity == Severity::Warning)
        .count();
    println!(
        "{}  ({})",
        shown(&r.bundle.path, 4 * SHOWN_CHARS),
        r.bundle.format.as_deref().unwrap_or("?")
    );
    println!(
        "verdict: {}  ({errors} errors, {warnings} warnings, {:.2} s)",
        r.verdict.to_uppercase(),
        r.duration_s.unwrap_or(0.0)
    );
    match &r.signature {
        Some(s) => println!("signature: {}", s.headline()),
        None => println!(
            "signature: unsigned (no {})",
            bundlescope::signing::SIGNATURE_FILE
        ),
    }
    if !r.findings.is_empty() {
        println!("\nfindings:");
        for f in &r.findings {
            let mut at = Vec::new();
            if let Some(t) = &f.tensor {
                at.push(format!("tensor {}", shown(t, SHOWN_CHARS)));
            }
            if let Some(fl) = &f.field {
                at.push(format!("field {}", shown(fl, SHOWN_CHARS)));
            }
            if let Some(o) = f.offset {
                at.push(format!("offset {o}"));
            }
            // Messages quote names and strings from the file: escaped, and
            // cut longer than a few names (the JSON report keeps them whole).
            println!(
                "  {:<7} [{}] {}",
                f.severity.as_str(),
                f.check,
                shown(&f.message, 4 * SHOWN_CHARS)
            );
            if !at.is_empty() {
                println!("          at {}", at.join(", "));
            }
        }
    }
    if r.provenance.gptq.is_some() {
        println!("\nprovenance:");
        let chain = bundlescope::report::lineage::Chain::of_report(r, None);
        for line in chain.to_text().lines() {
            println!("  {line}");
        }
    }
    println!("\nfiles:");
    for f in &r.files {
        let not_signed = f.as_signed == Some(false);
        let mark = match f.ok {
            // The signature does not vouch for these bytes: whatever the
            // folder's own manifest says of them.
            _ if not_signed => "NOT AS SIGNED",
            Some(true) => "verified",
            Some(false) => "MISMATCH",
            // Nothing in the folder claims a digest; the signature's matched.
            None if f.as_signed == Some(true) => "as signed",
            // Read to the end but not hashed whole: a signature by shards
            // checked every byte instead.
            None if f.sha256.is_none() && f.bytes.is_some() => "not hashed whole (signed shards)",
            None => "not checked",
        };
        println!(
            "  {}  {}  sha256 {}  {mark}",
            shown(&f.file, SHOWN_CHARS),
            f.bytes.map_or("?".into(), human_bytes),
            f.sha256.as_deref().unwrap_or("-")
        );
    }
    println!("\ntotals:");
    println!(
        "  {:<10} {:>8} {:>14} {:>12} {:>12} {:>6}",
        "precision", "tensors", "parameters", "bytes", "resident", "bpw"
    );
    let t = &r.totals;
    for (p, v) in &t.by_precision {
        println!(
            "  {:<10} {:>8} {:>14} {:>12} {:>12} {:>6}",
            p,
            v.tensors,
            v.parameters,
            human_bytes(v.bytes),
            human_bytes(v.resident_bytes),
            v.bits_per_weight.map_or("-".into(), |b| format!("{b:.2}"))
        );
    }
    println!(
        "  {:<10} {:>8} {:>14} {:>12} {:>12} {:>6}",
        "all",
        t.tensors,
        t.parameters,
        human_bytes(t.bytes),
        human_bytes(t.resident_bytes),
        t.bits_per_weight.map_or("-".into(), |b| format!("{b:.2}"))
    );
    if t.aliases > 0 {
        println!("  ({})", aliases_line(t.aliases));
    }
    println!(
        "\n  {:<10} {:>8} {:>14} {:>12}",
        "dtype", "tensors", "parameters", "bytes"
    );
    for (d, v) in &t.by_dtype {
        println!(
            "  {:<10} {:>8} {:>14} {:>12}",
            shown(d, 10),
            v.tensors,
            v.parameters,
            human_bytes(v.bytes)
        );
    }
}
