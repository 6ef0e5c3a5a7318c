//! `bundlescope list DIR [--json]`: the tensor index from the manifest alone.

use std::path::PathBuf;

use anyhow::Result;
use bundlescope::report::{Tool, human_bytes, totals};
use bundlescope::util::text::{SHOWN_CHARS, shown};
use serde_json::json;

use super::common::open_bundle;

/// Arguments of `list`.
#[derive(clap::Args)]
pub struct Args {
    /// Bundle folder (or its manifest.json).
    pub dir: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: Args) -> Result<i32> {
    let bundle = open_bundle(&a.dir)?;
    let totals = totals(&bundle.tensors);
    if a.json {
        let out = json!({
            "tool": Tool::default(),
            "bundle": {"path": a.dir.display().to_string(), "format": bundle.format.name()},
            "tensors": bundle.tensors,
            "totals": totals,
            "findings": bundle.findings,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(super::EXIT_OK);
    }
    let width = bundle
        .tensors
        .iter()
        .map(|t| shown(&t.name, SHOWN_CHARS).chars().count())
        .max()
        .unwrap_or(4)
        .min(72);
    println!(
        "{:<width$}  {:<9} {:<14} {:<5} {:>12} {:>12}",
        "name", "precision", "shape", "dtype", "bytes", "resident"
    );
    for t in &bundle.tensors {
        let dtype = match (&t.source_dtype, t.precision.packed()) {
            (Some(d), _) => d.clone(),
            (None, Some(_)) => "codes".into(),
            _ => "?".into(),
        };
        let name = match &t.alias_of {
            Some(target) => format!(
                "{} → {}",
                shown(&t.name, SHOWN_CHARS),
                shown(target, SHOWN_CHARS)
            ),
            None => shown(&t.name, SHOWN_CHARS).into_owned(),
        };
        println!(
            "{:<width$}  {:<9} {:<14} {:<5} {:>12} {:>12}",
            name,
            t.precision.as_str(),
            t.shape_text(),
            dtype,
            t.bytes.map_or("-".into(), human_bytes),
            t.resident_bytes.map_or("-".into(), human_bytes),
        );
    }
    println!(
        "{} tensors, {} aliases, {} parameters, {} payload, {} resident",
        totals.tensors,
        totals.aliases,
        totals.parameters,
        human_bytes(totals.bytes),
        human_bytes(totals.resident_bytes)
    );
    if !bundle.findings.is_empty() {
        println!(
            "{} problems in the manifest; run `bundlescope audit` for details",
            bundle.findings.len()
        );
    }
    Ok(super::EXIT_OK)
}
