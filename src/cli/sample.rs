//! `bundlescope sample DIR`: writes a valid bundle.

use std::path::PathBuf;

use anyhow::{Result, anyhow};
use bundlescope::report::human_bytes;
use bundlescope::sample::{self, SampleFormat, SampleOptions};

/// Arguments of `sample`.
#[derive(clap::Args)]
pub struct Args {
    /// Folder to create (must be new or empty).
    pub dir: PathBuf,
    /// audio8-v2 (default) or audio8-v1.
    #[arg(long, default_value = "audio8-v2")]
    pub format: String,
    /// Seed of every random choice.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Grow the payload to about this many MiB.
    #[arg(long)]
    pub size_mib: Option<u64>,
}

pub fn run(a: Args) -> Result<i32> {
    let format = SampleFormat::parse(&a.format).ok_or_else(|| {
        anyhow!(
            "unknown sample format {:?} (expected audio8-v2 or audio8-v1)",
            a.format
        )
    })?;
    let s = sample::write(
        &a.dir,
        &SampleOptions {
            format,
            seed: a.seed,
            size_mib: a.size_mib,
        },
    )?;
    println!(
        "wrote {} ({} tensors, {} payload)",
        s.dir.display(),
        s.tensors,
        human_bytes(s.payload_bytes)
    );
    Ok(super::EXIT_OK)
}
