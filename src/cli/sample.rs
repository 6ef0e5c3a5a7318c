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
    /// gptq-q4 (a calibrated GPTQ-Q4 overlay of --parent), gguf
    /// (DIR/model.gguf, one tensor of each decoded ggml type) or mlx-lm (an
    /// MLX-LM quantized checkpoint).
    #[arg(long, default_value = "audio8-v2")]
    pub format: String,
    /// Seed of every random choice.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Grow the payload to about this many MiB.
    #[arg(long)]
    pub size_mib: Option<u64>,
    /// nvfp4: MoE layers (default 4); mlx-lm: transformer layers (default 2).
    #[arg(long)]
    pub layers: Option<u64>,
    /// nvfp4 and mlx-lm: experts per MoE layer (default 8; mlx-lm 4).
    #[arg(long)]
    pub experts: Option<u64>,
    /// mlx-lm: bits of the global block (affine 2, 3, 4, 5, 6, 8; default 4).
    #[arg(long)]
    pub bits: Option<u8>,
    /// mlx-lm: mode of the global block: affine (default), mxfp4, nvfp4, mxfp8.
    #[arg(long)]
    pub mode: Option<String>,
    /// mlx-lm: affine group size (32, 64, 128; default 64).
    #[arg(long)]
    pub group_size: Option<u64>,
    /// mlx-lm: per-module affine entries with 2, 3, 5, 6 and 8 bits.
    #[arg(long)]
    pub mixed: bool,
    /// mlx-lm: hidden size (a multiple of 128; default 128, 1024 with --size-mib).
    #[arg(long)]
    pub hidden: Option<u64>,
    /// mlx-lm: shards (default 2).
    #[arg(long)]
    pub shards: Option<usize>,
    /// Also write the unquantised weights (same tensor names) for
    /// `spotcheck --reference REF` (audio8 samples: REF/model.safetensors;
    /// mlx-lm: the BF16 checkpoint, sharded like the quantized one).
    #[arg(long)]
    pub reference: Option<PathBuf>,
    /// gptq-q4: the audio8 bundle the overlay recalibrates (only read).
    #[arg(long, value_name = "DIR")]
    pub parent: Option<PathBuf>,
    /// gptq-q4: a tensor to recalibrate (repeat it; default: every q3_full8
    /// tensor and two q4 projections).
    #[arg(long = "overlay", value_name = "NAME")]
    pub overlay: Vec<String>,
    /// Quantise this safetensors checkpoint (F32, BF16 or F16) into an
    /// audio8 v2 bundle (its matrices as q4) instead of drawing weights;
    /// with --reference, its values are written there for spot checks.
    #[arg(long, value_name = "FILE")]
    pub quantize: Option<PathBuf>,
}

fn mlx_lm(a: &Args) -> Result<i32> {
    use bundlescope::format::QuantMode;
    let mode = match &a.mode {
        None => QuantMode::Affine,
        Some(m) => QuantMode::parse(m).ok_or_else(|| {
            anyhow!("unknown --mode {m:?} (expected affine, mxfp4, nvfp4 or mxfp8)")
        })?,
    };
    let (bits, group) = mode.defaults();
    let big = a.size_mib.is_some();
    let hidden = a.hidden.unwrap_or(if big { 1024 } else { 128 });
    let o = sample::mlxlm::MlxLmOptions {
        seed: a.seed,
        mode,
        bits: a.bits.unwrap_or(bits),
        group: a.group_size.unwrap_or(group),
        mixed: a.mixed,
        layers: a.layers.unwrap_or(2),
        experts: a.experts.unwrap_or(4),
        hidden,
        intermediate: 2 * hidden,
        shards: a.shards.unwrap_or(2),
        size_mib: a.size_mib,
    };
    let w = sample::mlxlm::write(&a.dir, &o, a.reference.as_deref())?;
    println!(
        "wrote {} ({} tensors, {} in shards)",
        a.dir.display(),
        w.tensors,
        human_bytes(w.bytes)
    );
    if let Some(r) = &a.reference {
        println!("wrote {} (the BF16 source)", r.display());
    }
    Ok(super::EXIT_OK)
}

pub fn run(a: Args) -> Result<i32> {
    if let Some(ck) = &a.quantize {
        let s = sample::quantize::from_checkpoint(
            ck,
            &a.dir,
            bundlescope::format::PackedKind::Q4,
            a.reference.as_deref(),
        )?;
        println!(
            "wrote {} ({} tensors of {}, {} payload)",
            s.dir.display(),
            s.tensors,
            ck.display(),
            human_bytes(s.payload_bytes)
        );
        return Ok(super::EXIT_OK);
    }
    if a.format == "mlx-lm" || a.format == "mlxlm" {
        return mlx_lm(&a);
    }
    if a.bits.is_some() || a.mode.is_some() || a.mixed || a.group_size.is_some() {
        anyhow::bail!("--bits, --mode, --group-size and --mixed are for --format mlx-lm");
    }
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
            layers: a.layers.unwrap_or(4),
            experts: a.experts.unwrap_or(8),
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
            "unknown sample format {:?} (expected audio8-v2, audio8-v1, nvfp4 or mlx-lm)",
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
