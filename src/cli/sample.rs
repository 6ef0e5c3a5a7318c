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
    /// audio8-v2 (default), audio8-v1, nvfp4 (an mlx-nvfp4 MoE artifact),
    /// gptq-q4 (a calibrated GPTQ-Q4 overlay of --parent) or gguf
    /// (DIR/model.gguf, one tensor of each decoded ggml type).
    #[arg(long, default_value = "audio8-v2")]
    pub format: String,
    /// Seed of every random choice.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Grow the payload to about this many MiB.
    #[arg(long)]
    pub size_mib: Option<u64>,
    /// nvfp4: MoE layers.
    #[arg(long, default_value_t = 4)]
    pub layers: u64,
    /// nvfp4: experts per layer.
    #[arg(long, default_value_t = 8)]
    pub experts: u64,
    /// Also write the unquantised weights (REF/model.safetensors, same
    /// tensor names) for `spotcheck --reference REF` (audio8 samples).
    #[arg(long)]
    pub reference: Option<PathBuf>,
    /// gptq-q4: the audio8 bundle the overlay recalibrates (only read).
    #[arg(long, value_name = "DIR")]
    pub parent: Option<PathBuf>,
    /// gptq-q4: a tensor to recalibrate (repeat it; default: every q3_full8
    /// tensor and two q4 projections).
    #[arg(long = "overlay", value_name = "NAME")]
    pub overlay: Vec<String>,
}

pub fn run(a: Args) -> Result<i32> {
    if a.reference.is_some() && a.format.contains("nvfp4") {
        anyhow::bail!("--reference writes the source of audio8 samples only");
    }
    if a.parent.is_some() != (a.format == "gptq-q4") {
        anyhow::bail!(
            "--format gptq-q4 and --parent DIR go together: an overlay is written on top of a parent (write one with `bundlescope sample PARENT`)"
        );
    }
    if let Some(parent) = &a.parent {
        let s = sample::gptq::write_overlay(
            parent,
            &a.dir,
            &sample::gptq::OverlayOptions {
                seed: a.seed,
                overlay: (!a.overlay.is_empty()).then(|| a.overlay.clone()),
            },
        )?;
        println!(
            "wrote {} (overlay of {}: {} tensors recalibrated, {} copied, {} payload)",
            s.dir.display(),
            parent.display(),
            s.overlay.len(),
            s.copied,
            human_bytes(s.payload_bytes)
        );
        return Ok(super::EXIT_OK);
    }
    if a.format == "gguf" {
        std::fs::create_dir_all(&a.dir)?;
        let path = a.dir.join("model.gguf");
        let bytes = sample::gguf::write_sized(&path, a.seed, a.size_mib)?;
        println!("wrote {} ({})", path.display(), human_bytes(bytes));
        return Ok(super::EXIT_OK);
    }
    if a.format == "nvfp4" || a.format == "mlx-nvfp4" {
        let big = a.size_mib.is_some();
        let o = sample::nvfp4::Nvfp4Options {
            seed: a.seed,
            layers: a.layers,
            experts: a.experts,
            hidden: if big { 1024 } else { 128 },
            intermediate: if big { 1024 } else { 64 },
            size_mib: a.size_mib,
            shard_hashes: true,
        };
        let (tensors, bytes) = sample::nvfp4::write(&a.dir, &o)?;
        println!(
            "wrote {} ({tensors} tensors, {} in shards)",
            a.dir.display(),
            human_bytes(bytes)
        );
        return Ok(super::EXIT_OK);
    }
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
    if let Some(dir) = &a.reference {
        let r = sample::reference::write(&a.dir, dir, a.seed)?;
        println!(
            "wrote {} ({} tensors, {})",
            r.path.display(),
            r.tensors,
            human_bytes(r.bytes)
        );
    }
    Ok(super::EXIT_OK)
}
