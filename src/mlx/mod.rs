//! MLX, through a small `cxx` bridge to its C++ library (`bridge.rs`,
//! `bridge.cc`; `build.rs` compiles and links it when the `mlx` feature is
//! on, which it is by default).
//!
//! Every function takes borrowed slices with explicit dimensions, checks that
//! they agree, runs one small MLX graph on the chosen [`Device`] and returns
//! an owned `Vec<f32>` (row-major). MLX's exceptions come back as
//! [`MlxError::Mlx`]; nothing here aborts. Calls are serialised through one
//! lock, so any thread may call (the GUI calls from a worker).
//!
//! Built without the `mlx` feature, every function returns
//! [`MlxError::NotBuilt`], whose message says how to enable it.

mod args;
#[cfg(feature = "mlx")]
#[path = "backend.rs"]
mod backend;
#[cfg(not(feature = "mlx"))]
#[path = "stub.rs"]
mod backend;
#[cfg(feature = "mlx")]
mod bridge;

use serde::Serialize;

use args::{Arr, Data, out_code};

/// What to run the pip command with, for messages.
pub const INSTALL_HINT: &str = "./scripts/install-mlx.sh, which runs python3 -m pip install --target .pydeps \
     \"mlx[cpu]==0.32.4\" numpy (on macOS \"mlx==0.32.4\", which brings mlx-metal), \
     or set MLX_DIR to a folder with include/mlx/ and lib/libmlx.*";

/// Group size of the audio8 formats' affine scales.
pub const AFFINE_GROUP: usize = 64;
/// Inputs per E4M3 scale in NVFP4.
pub const NVFP4_GROUP: usize = 16;

/// Why an MLX call did not return a result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MlxError {
    /// This build has no MLX bridge.
    #[error(
        "this bundlescope was built without MLX; rebuild with --features mlx after installing MLX: {INSTALL_HINT}"
    )]
    NotBuilt,
    /// The operation exists in MLX only on the GPU (e.g. `gather_qmm` with a
    /// global scale), and the call would run on the CPU: decided here from
    /// the device before MLX is called; the caller falls back to
    /// dequantize + matmul.
    #[error("MLX runs {op} on the GPU only; this call would run on the cpu")]
    UnsupportedOnCpu {
        /// The operation.
        op: &'static str,
    },
    /// The inputs' lengths disagree with their dimensions (checked before MLX runs).
    #[error("{0}")]
    Shape(String),
    /// MLX raised an exception.
    #[error("MLX: {0}")]
    Mlx(String),
}

/// Where an MLX call runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Device {
    /// MLX's default device (the GPU where MLX has one, else the CPU).
    #[default]
    Default,
    /// The CPU.
    Cpu,
    /// The GPU (Metal on macOS; absent from the Linux CPU wheels).
    Gpu,
}

impl Device {
    #[cfg_attr(not(feature = "mlx"), allow(dead_code))]
    fn code(self) -> i32 {
        match self {
            Device::Default => 0,
            Device::Cpu => 1,
            Device::Gpu => 2,
        }
    }
}

/// Floating-point elements handed to MLX: f32 values, or bfloat16 / float16
/// bit patterns (cast to MLX's types in C++, never converted numerically).
#[derive(Debug, Clone, Copy)]
pub enum Floats<'a> {
    /// float32.
    F32(&'a [f32]),
    /// bfloat16 bits.
    Bf16(&'a [u16]),
    /// float16 bits.
    F16(&'a [u16]),
}

impl Floats<'_> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Floats::F32(v) => v.len(),
            Floats::Bf16(v) | Floats::F16(v) => v.len(),
        }
    }

    /// No elements?
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn data(&self) -> Data<'_> {
        match *self {
            Floats::F32(v) => Data::F32(v),
            Floats::Bf16(v) => Data::Bf16(v),
            Floats::F16(v) => Data::F16(v),
        }
    }
}

/// The element type of a result before it is widened to f32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OutDtype {
    /// float32.
    F32,
    /// bfloat16 (rounded by MLX, then widened exactly).
    Bf16,
    /// What MLX computes in when the call names no dtype (a loader's call:
    /// the scales' dtype), widened exactly.
    Native,
}

/// An affine-quantised matrix `[rows, cols]` as MLX takes it: `words` is
/// `[rows, cols * bits / 32]` uint32, `scales` and `biases` are
/// `[rows, cols / group_size]`. With `transpose=true` MLX computes
/// `x @ W.T` where `W[r][j] = scale * q + bias`.
#[derive(Debug, Clone, Copy)]
pub struct AffineWeights<'a> {
    /// Packed codes, `rows * cols * bits / 32` words.
    pub words: &'a [u32],
    /// One scale per group.
    pub scales: Floats<'a>,
    /// One bias per group (same dtype as the scales).
    pub biases: Floats<'a>,
    /// Output rows.
    pub rows: usize,
    /// Input columns.
    pub cols: usize,
    /// Bits per code (MLX affine: 2, 3, 4, 5, 6 or 8).
    pub bits: u32,
    /// Columns per scale.
    pub group_size: usize,
}

/// One NVFP4 matrix `[rows, cols]` (one expert): `words` `[rows, cols/8]`
/// uint32, eight E2M1 codes a word, low nibble first; `scales`
/// `[rows, cols/16]` E4M3 bytes.
#[derive(Debug, Clone, Copy)]
pub struct Nvfp4Weights<'a> {
    /// Packed E2M1 codes.
    pub words: &'a [u32],
    /// E4M3 group scales.
    pub scales: &'a [u8],
    /// Output rows.
    pub rows: usize,
    /// Input columns (a multiple of 16).
    pub cols: usize,
}

/// `quantize` in affine mode: words, scales and biases (f32).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AffineQuantized {
    /// `[rows, cols * bits / 32]`.
    pub words: Vec<u32>,
    /// `[rows, cols / group_size]`.
    pub scales: Vec<f32>,
    /// `[rows, cols / group_size]`.
    pub biases: Vec<f32>,
}

/// `quantize` in nvfp4 mode: words and E4M3 scale bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Nvfp4Quantized {
    /// `[rows, cols / 8]`.
    pub words: Vec<u32>,
    /// `[rows, cols / 16]`.
    pub scales: Vec<u8>,
}

/// How [`nvfp4_matmul`] computed its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Nvfp4Path {
    /// `gather_qmm` with the global scale (GPU).
    GatherQmm,
    /// `dequantize` with the global scale, then `matmul` (the CPU's way).
    DequantizeMatmul,
}

/// Is the MLX bridge compiled into this build?
pub fn available() -> bool {
    cfg!(feature = "mlx")
}

/// MLX's version string (e.g. `0.32.4`).
pub fn version() -> Result<String, MlxError> {
    backend::version()
}

/// MLX's default device: `"cpu"` or `"gpu"`.
pub fn default_device() -> Result<String, MlxError> {
    backend::default_device()
}

/// The name (`"cpu"`/`"gpu"`) of the device a call with `device` runs on.
pub fn device_name(device: Device) -> Result<String, MlxError> {
    match device {
        Device::Default => default_device(),
        Device::Cpu => Ok("cpu".into()),
        Device::Gpu => {
            backend::device_available(Device::Gpu)?;
            Ok("gpu".into())
        }
    }
}

/// `quantized_matmul(x, w, scales, biases, transpose=true, mode="affine")`:
/// `x` is `[batch, w.cols]`; returns `[batch, w.rows]` as f32.
pub fn quantized_matmul(
    device: Device,
    x: Floats<'_>,
    batch: usize,
    w: &AffineWeights<'_>,
) -> Result<Vec<f32>, MlxError> {
    check_affine(w)?;
    expect_len("x", x.len(), batch.checked_mul(w.cols))?;
    let groups = w.cols / w.group_size;
    let x = Arr::new(x.data(), &[batch, w.cols])?;
    let words = Arr::new(Data::U32(w.words), &[w.rows, w.cols * w.bits as usize / 32])?;
    let scales = Arr::new(w.scales.data(), &[w.rows, groups])?;
    let biases = Arr::new(w.biases.data(), &[w.rows, groups])?;
    let y = backend::quantized_matmul(
        device,
        &x,
        &words,
        &scales,
        &biases,
        w.group_size as i32,
        w.bits as i32,
        "affine",
    )?;
    expect_len(
        "quantized_matmul result",
        y.len(),
        batch.checked_mul(w.rows),
    )?;
    Ok(y)
}

/// The scales (and biases) of a [`ModeWeights`] matrix, as MLX takes them.
#[derive(Debug, Clone, Copy)]
pub enum ModeScales<'a> {
    /// Affine: scales and biases `[rows, cols / group_size]` in the model's
    /// float dtype.
    Affine {
        /// One scale per group.
        scales: Floats<'a>,
        /// One bias per group (same dtype).
        biases: Floats<'a>,
    },
    /// mxfp4, nvfp4, mxfp8: one E8M0 or E4M3 byte per group, no biases.
    Bytes(&'a [u8]),
}

/// A matrix `[rows, cols]` quantized in any of MLX's modes, as MLX-LM
/// stores it: `words` `[rows, cols * bits / 32]` uint32 (codes LSB-first
/// across each row's words), one scale per `group_size` inputs.
#[derive(Debug, Clone, Copy)]
pub struct ModeWeights<'a> {
    /// Packed codes.
    pub words: &'a [u32],
    /// Scales (and biases).
    pub scales: ModeScales<'a>,
    /// Output rows.
    pub rows: usize,
    /// Input columns.
    pub cols: usize,
    /// Bits per code.
    pub bits: u32,
    /// Inputs per scale.
    pub group_size: usize,
    /// `affine`, `mxfp4`, `nvfp4` or `mxfp8`.
    pub mode: &'a str,
}

/// `w`'s words, scales and biases (none for the float modes) as MLX takes
/// them, the shape and every length checked.
fn mode_arrays<'a>(w: &'a ModeWeights<'a>) -> Result<(Arr<'a>, Arr<'a>, Arr<'a>), MlxError> {
    if w.group_size == 0 || w.cols == 0 || !w.cols.is_multiple_of(w.group_size) {
        return Err(MlxError::Shape(format!(
            "{} columns is not a positive multiple of the group size {}",
            w.cols, w.group_size
        )));
    }
    let packed_bits = w.cols.checked_mul(w.bits as usize);
    if w.bits == 0 || packed_bits.is_none_or(|b| !b.is_multiple_of(32)) {
        return Err(MlxError::Shape(format!(
            "{} columns of {} bits do not fill whole 32-bit words",
            w.cols, w.bits
        )));
    }
    let per_row = w.cols * w.bits as usize / 32;
    let groups = w.cols / w.group_size;
    expect_len("words", w.words.len(), w.rows.checked_mul(per_row))?;
    let words = Arr::new(Data::U32(w.words), &[w.rows, per_row])?;
    let (scales, biases) = match &w.scales {
        ModeScales::Affine { scales, biases } => {
            expect_len("scales", scales.len(), w.rows.checked_mul(groups))?;
            expect_len("biases", biases.len(), w.rows.checked_mul(groups))?;
            (
                Arr::new(scales.data(), &[w.rows, groups])?,
                Arr::new(biases.data(), &[w.rows, groups])?,
            )
        }
        ModeScales::Bytes(b) => {
            expect_len("scales", b.len(), w.rows.checked_mul(groups))?;
            (Arr::new(Data::U8(b), &[w.rows, groups])?, Arr::none())
        }
    };
    Ok((words, scales, biases))
}

/// `quantized_matmul(x, w, scales, biases, transpose=true, group_size,
/// bits, mode)` for any MLX mode: `x` is `[batch, w.cols]`; returns
/// `[batch, w.rows]` as f32. (MLX 0.32.4's CPU has a kernel for every mode
/// and affine width.)
pub fn quantized_matmul_mode(
    device: Device,
    x: Floats<'_>,
    batch: usize,
    w: &ModeWeights<'_>,
) -> Result<Vec<f32>, MlxError> {
    let (words, scales, biases) = mode_arrays(w)?;
    expect_len("x", x.len(), batch.checked_mul(w.cols))?;
    let xa = Arr::new(x.data(), &[batch, w.cols])?;
    let y = backend::quantized_matmul(
        device,
        &xa,
        &words,
        &scales,
        &biases,
        w.group_size as i32,
        w.bits as i32,
        w.mode,
    )?;
    expect_len(
        "quantized_matmul result",
        y.len(),
        batch.checked_mul(w.rows),
    )?;
    Ok(y)
}

/// Rows `ids` of an affine matrix, dequantised by MLX the way the seed's
/// `embedding` does: gather the rows of words, scales and biases, then
/// `dequantize(..., dtype=float32)`, then cast to `out`. Returns
/// `[ids.len(), w.cols]` (widened to f32).
pub fn dequantize_affine_rows(
    device: Device,
    w: &AffineWeights<'_>,
    ids: &[i32],
    out: OutDtype,
) -> Result<Vec<f32>, MlxError> {
    check_affine(w)?;
    if let Some(&bad) = ids.iter().find(|&&i| i < 0 || i as usize >= w.rows) {
        return Err(MlxError::Shape(format!(
            "row id {bad} is outside 0..{}",
            w.rows
        )));
    }
    let groups = w.cols / w.group_size;
    let words = Arr::new(Data::U32(w.words), &[w.rows, w.cols * w.bits as usize / 32])?;
    let scales = Arr::new(w.scales.data(), &[w.rows, groups])?;
    let biases = Arr::new(w.biases.data(), &[w.rows, groups])?;
    let index = Arr::new(Data::I32(ids), &[ids.len()])?;
    let y = backend::dequantize(
        device,
        &words,
        &scales,
        &biases,
        &Arr::none(),
        &index,
        w.group_size as i32,
        w.bits as i32,
        "affine",
        out_code(out),
    )?;
    expect_len("dequantize result", y.len(), ids.len().checked_mul(w.cols))?;
    Ok(y)
}

/// Rows `ids` of a matrix in any MLX mode, dequantised by MLX the way an
/// MLX-LM quantized embedding looks tokens up: take the rows of words,
/// scales (and biases), then `dequantize(..., mode)`, in `out` (`Native`:
/// the loader's dtype). Returns `[ids.len(), w.cols]` widened to f32.
pub fn dequantize_mode_rows(
    device: Device,
    w: &ModeWeights<'_>,
    ids: &[i32],
    out: OutDtype,
) -> Result<Vec<f32>, MlxError> {
    if let Some(&bad) = ids.iter().find(|&&i| i < 0 || i as usize >= w.rows) {
        return Err(MlxError::Shape(format!(
            "row id {bad} is outside 0..{}",
            w.rows
        )));
    }
    let (words, scales, biases) = mode_arrays(w)?;
    let index = Arr::new(Data::I32(ids), &[ids.len()])?;
    let y = backend::dequantize(
        device,
        &words,
        &scales,
        &biases,
        &Arr::none(),
        &index,
        w.group_size as i32,
        w.bits as i32,
        w.mode,
        out_code(out),
    )?;
    expect_len("dequantize result", y.len(), ids.len().checked_mul(w.cols))?;
    Ok(y)
}

/// One NVFP4 expert dequantised by MLX:
/// `dequantize(w, scales, mode="nvfp4", group_size=16, bits=4,
/// global_scale=global_scale, dtype=float32)`. MLX takes the global scale as
/// a scalar, so stacked experts are dequantised one at a time. Returns
/// `[rows, cols]`.
pub fn dequantize_nvfp4(
    device: Device,
    w: &Nvfp4Weights<'_>,
    global_scale: Option<f32>,
) -> Result<Vec<f32>, MlxError> {
    check_nvfp4(w)?;
    let words = Arr::new(Data::U32(w.words), &[w.rows, w.cols / 8])?;
    let scales = Arr::new(Data::U8(w.scales), &[w.rows, w.cols / NVFP4_GROUP])?;
    let gs = global_scale.map(|g| [g]);
    let global = match &gs {
        Some(g) => Arr::new(Data::F32(g), &[])?,
        None => Arr::none(),
    };
    let y = backend::dequantize(
        device,
        &words,
        &scales,
        &Arr::none(),
        &global,
        &Arr::none(),
        NVFP4_GROUP as i32,
        4,
        "nvfp4",
        out_code(OutDtype::F32),
    )?;
    expect_len("dequantize result", y.len(), w.rows.checked_mul(w.cols))?;
    Ok(y)
}

/// `quantize(w, group_size, bits, mode="affine")` of an f32 `[rows, cols]`.
pub fn quantize_affine(
    device: Device,
    w: &[f32],
    rows: usize,
    cols: usize,
    group_size: usize,
    bits: u32,
) -> Result<AffineQuantized, MlxError> {
    expect_len("w", w.len(), rows.checked_mul(cols))?;
    let a = Arr::new(Data::F32(w), &[rows, cols])?;
    let q = backend::quantize(
        device,
        &a,
        &Arr::none(),
        group_size as i32,
        bits as i32,
        "affine",
    )?;
    Ok(AffineQuantized {
        words: q.words,
        scales: q.scales_f32,
        biases: q.biases,
    })
}

/// `quantize(w, group_size=16, bits=4, mode="nvfp4", global_scale)` of an
/// f32 `[rows, cols]`.
pub fn quantize_nvfp4(
    device: Device,
    w: &[f32],
    rows: usize,
    cols: usize,
    global_scale: Option<f32>,
) -> Result<Nvfp4Quantized, MlxError> {
    expect_len("w", w.len(), rows.checked_mul(cols))?;
    let a = Arr::new(Data::F32(w), &[rows, cols])?;
    let gs = global_scale.map(|g| [g]);
    let global = match &gs {
        Some(g) => Arr::new(Data::F32(g), &[])?,
        None => Arr::none(),
    };
    let q = backend::quantize(device, &a, &global, NVFP4_GROUP as i32, 4, "nvfp4")?;
    Ok(Nvfp4Quantized {
        words: q.words,
        scales: q.scales_u8,
    })
}

/// `gather_qmm(x, w, scales, rhs_indices=[expert], transpose=true,
/// mode="nvfp4", global_scale=global_scales)` over stacked experts:
/// `words` `[experts, rows, cols/8]`, `scales` `[experts, rows, cols/16]`,
/// `global_scales` `[experts]`, `x` `[batch, cols]`; returns
/// `[batch, rows]`. MLX runs this on the GPU only:
/// on the CPU it is [`MlxError::UnsupportedOnCpu`] (see [`nvfp4_matmul`]).
#[allow(clippy::too_many_arguments)]
pub fn gather_qmm_nvfp4(
    device: Device,
    x: &[f32],
    batch: usize,
    words: &[u32],
    scales: &[u8],
    global_scales: &[f32],
    rows: usize,
    cols: usize,
    expert: usize,
) -> Result<Vec<f32>, MlxError> {
    let experts = global_scales.len();
    check_nvfp4_dims(rows, cols)?;
    if expert >= experts {
        return Err(MlxError::Shape(format!(
            "expert {expert} is outside 0..{experts}"
        )));
    }
    expect_len("x", x.len(), batch.checked_mul(cols))?;
    if device_name(device)? == "cpu" {
        return Err(MlxError::UnsupportedOnCpu {
            op: "gather_qmm with a global scale",
        });
    }
    let xa = Arr::new(Data::F32(x), &[1, batch, cols])?;
    let wa = Arr::new(Data::U32(words), &[experts, rows, cols / 8])?;
    let sa = Arr::new(Data::U8(scales), &[experts, rows, cols / NVFP4_GROUP])?;
    let ga = Arr::new(Data::F32(global_scales), &[experts])?;
    let idx = [expert as i32];
    let ia = Arr::new(Data::I32(&idx), &[1])?;
    let y = backend::gather_qmm(
        device,
        &xa,
        &wa,
        &sa,
        &Arr::none(),
        &ga,
        &ia,
        NVFP4_GROUP as i32,
        4,
        "nvfp4",
    )?;
    expect_len("gather_qmm result", y.len(), batch.checked_mul(rows))?;
    Ok(y)
}

/// `x @ W.T` for expert `expert` of stacked NVFP4 weights (as
/// [`gather_qmm_nvfp4`]): `gather_qmm` where MLX can, else (the CPU)
/// `dequantize` of that expert with its global scale followed by `matmul`.
#[allow(clippy::too_many_arguments)]
pub fn nvfp4_matmul(
    device: Device,
    x: &[f32],
    batch: usize,
    words: &[u32],
    scales: &[u8],
    global_scales: &[f32],
    rows: usize,
    cols: usize,
    expert: usize,
) -> Result<(Vec<f32>, Nvfp4Path), MlxError> {
    match gather_qmm_nvfp4(
        device,
        x,
        batch,
        words,
        scales,
        global_scales,
        rows,
        cols,
        expert,
    ) {
        Ok(y) => return Ok((y, Nvfp4Path::GatherQmm)),
        Err(MlxError::UnsupportedOnCpu { .. }) => {}
        Err(e) => return Err(e),
    }
    let (wl, sl) = (rows * cols / 8, rows * cols / NVFP4_GROUP);
    let one = Nvfp4Weights {
        words: words
            .get(expert * wl..(expert + 1) * wl)
            .ok_or_else(|| MlxError::Shape("words are shorter than the experts".into()))?,
        scales: scales
            .get(expert * sl..(expert + 1) * sl)
            .ok_or_else(|| MlxError::Shape("scales are shorter than the experts".into()))?,
        rows,
        cols,
    };
    let global = global_scales
        .get(expert)
        .copied()
        .ok_or_else(|| MlxError::Shape(format!("expert {expert} has no global scale")))?;
    let w = dequantize_nvfp4(device, &one, Some(global))?;
    let y = matmul_nt(device, x, batch, &w, rows, cols)?;
    Ok((y, Nvfp4Path::DequantizeMatmul))
}

/// One Q4_0/Q4_1/Q8_0 (or Q4_K) tensor as MLX's GGUF loader
/// (`mlx::core::load_gguf`, behind `mx.load("x.gguf")`) returns it: affine
/// uint32 words (4 or 8 bits, groups of 32) with float16 scales and
/// biases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GgufAffine {
    /// The tensor's name in the file.
    pub name: String,
    /// Whether the loader returned a weight, scales and biases for it.
    pub found: bool,
    /// The words' shape (MLX order).
    pub shape: Vec<i64>,
    /// Packed codes, LSB first.
    pub words: Vec<u32>,
    /// float16 bits, one per group of 32.
    pub scales: Vec<u16>,
    /// float16 bits, one per group of 32.
    pub biases: Vec<u16>,
}

/// `mlx::core::load_gguf(path)` on the CPU, and the weight, scales and
/// biases it returns for each of `names`. MLX's loader reads the whole file
/// (through gguflib, which opens it read-write and checks no bounds) and
/// copies every tensor: callers hand it a private copy of a file they have
/// validated and sized (see `spotcheck`).
pub fn load_gguf_affine(
    path: &std::path::Path,
    names: &[String],
) -> Result<Vec<GgufAffine>, MlxError> {
    let path = path
        .to_str()
        .ok_or_else(|| MlxError::Shape(format!("{} is not UTF-8", path.display())))?;
    backend::load_gguf_affine(path, names)
}

/// `x @ w.T` in f32: `x` `[batch, k]`, `w` `[n, k]`; returns `[batch, n]`.
pub fn matmul_nt(
    device: Device,
    x: &[f32],
    batch: usize,
    w: &[f32],
    n: usize,
    k: usize,
) -> Result<Vec<f32>, MlxError> {
    expect_len("x", x.len(), batch.checked_mul(k))?;
    expect_len("w", w.len(), n.checked_mul(k))?;
    let xa = Arr::new(Data::F32(x), &[batch, k])?;
    let wa = Arr::new(Data::F32(w), &[n, k])?;
    let y = backend::matmul_nt(device, &xa, &wa)?;
    expect_len("matmul result", y.len(), batch.checked_mul(n))?;
    Ok(y)
}

fn check_affine(w: &AffineWeights<'_>) -> Result<(), MlxError> {
    if w.group_size == 0 || w.cols == 0 || !w.cols.is_multiple_of(w.group_size) {
        return Err(MlxError::Shape(format!(
            "{} columns is not a positive multiple of the group size {}",
            w.cols, w.group_size
        )));
    }
    let packed_bits = w.cols.checked_mul(w.bits as usize);
    if w.bits == 0 || packed_bits.is_none_or(|b| !b.is_multiple_of(32)) {
        return Err(MlxError::Shape(format!(
            "{} columns of {} bits do not fill whole 32-bit words",
            w.cols, w.bits
        )));
    }
    let groups = w.cols / w.group_size;
    expect_len(
        "words",
        w.words.len(),
        w.rows.checked_mul(w.cols * w.bits as usize / 32),
    )?;
    expect_len("scales", w.scales.len(), w.rows.checked_mul(groups))?;
    expect_len("biases", w.biases.len(), w.rows.checked_mul(groups))?;
    Ok(())
}

fn check_nvfp4_dims(rows: usize, cols: usize) -> Result<(), MlxError> {
    if rows == 0 || cols == 0 || !cols.is_multiple_of(NVFP4_GROUP) {
        return Err(MlxError::Shape(format!(
            "an NVFP4 matrix needs rows > 0 and columns a positive multiple of 16, got {rows}×{cols}"
        )));
    }
    Ok(())
}

fn check_nvfp4(w: &Nvfp4Weights<'_>) -> Result<(), MlxError> {
    check_nvfp4_dims(w.rows, w.cols)?;
    expect_len("words", w.words.len(), w.rows.checked_mul(w.cols / 8))?;
    expect_len(
        "scales",
        w.scales.len(),
        w.rows.checked_mul(w.cols / NVFP4_GROUP),
    )?;
    Ok(())
}

fn expect_len(what: &str, have: usize, want: Option<usize>) -> Result<(), MlxError> {
    match want {
        Some(w) if w == have => Ok(()),
        Some(w) => Err(MlxError::Shape(format!(
            "{what}: {w} elements expected, {have} given"
        ))),
        None => Err(MlxError::Shape(format!("{what}: size overflows"))),
    }
}

#[cfg(test)]
mod tests;
