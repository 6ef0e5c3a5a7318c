//! The bundle model every format builds: the format kind, precisions and
//! layouts, the tensor index, payload files and provenance. Plain data; the
//! parsing lives in each format's folder and the byte access in
//! [`super::payload`].

use std::path::PathBuf;

use serde::Serialize;

use crate::finding::Finding;

/// The bundle formats bundlescope knows of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum FormatKind {
    /// `audio8-mixed-bundle-v1`.
    #[serde(rename = "audio8-mixed-bundle-v1")]
    Audio8V1,
    /// `audio8-mixed-bundle-v2` (adds `q3_full8`).
    #[serde(rename = "audio8-mixed-bundle-v2")]
    Audio8V2,
    /// The calibrated GPTQ-Q4 bundle (audio8 payload plus a provenance block).
    #[serde(rename = "gptq-q4-calibrated")]
    GptqQ4,
    /// `audio8-gptq-q4-calibrated-v1`: a calibrated GPTQ-Q4 overlay, read
    /// as docs/provenance.md documents it (format/gptq).
    #[serde(rename = "audio8-gptq-q4-calibrated-v1")]
    GptqQ4Calibrated,
    /// `A8MOD001`, the native bundle.
    #[serde(rename = "A8MOD001")]
    Native,
    /// The mlx-nvfp4 `stacked-global-scale` MoE artifact.
    #[serde(rename = "mlx-nvfp4")]
    Nvfp4,
    /// A GGUF file (llama.cpp), or the split parts of one.
    #[serde(rename = "gguf")]
    Gguf,
    /// An MLX-LM quantized checkpoint (`config.json` with a quantization
    /// block, safetensors shards).
    #[serde(rename = "mlx-lm")]
    MlxLm,
    /// A plain safetensors checkpoint (a folder of shards, or one file).
    #[serde(rename = "safetensors")]
    Safetensors,
    /// A folder whose manifest.json could not be parsed, so no format can be
    /// told: the bundle holds only the `manifest.parse` finding.
    #[serde(rename = "unknown")]
    Unknown,
}

impl FormatKind {
    /// The name used in reports and the UI.
    pub fn name(self) -> &'static str {
        match self {
            FormatKind::Audio8V1 => "audio8-mixed-bundle-v1",
            FormatKind::Audio8V2 => "audio8-mixed-bundle-v2",
            FormatKind::GptqQ4 => "gptq-q4-calibrated",
            FormatKind::GptqQ4Calibrated => super::gptq::FORMAT,
            FormatKind::Native => "A8MOD001",
            FormatKind::Nvfp4 => "mlx-nvfp4",
            FormatKind::Gguf => "gguf",
            FormatKind::MlxLm => "mlx-lm",
            FormatKind::Safetensors => "safetensors",
            FormatKind::Unknown => "unknown",
        }
    }

    /// A short label for the top bar.
    pub fn short(self) -> &'static str {
        match self {
            FormatKind::Audio8V1 => "audio8 v1",
            FormatKind::Audio8V2 => "audio8 v2",
            FormatKind::GptqQ4 => "GPTQ-Q4",
            FormatKind::GptqQ4Calibrated => "GPTQ-Q4 overlay",
            FormatKind::Native => "A8MOD001",
            FormatKind::Nvfp4 => "mlx-nvfp4",
            FormatKind::Gguf => "GGUF",
            FormatKind::MlxLm => "MLX-LM",
            FormatKind::Safetensors => "safetensors",
            FormatKind::Unknown => "unknown format",
        }
    }
}

/// Precision of a tensor record, as the manifest names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Precision {
    /// Dense (`original`): BF16, F16 or F32 values.
    Original,
    /// Legacy seven-level 3-bit codes.
    Q3,
    /// Full eight-level 3-bit codes (v2 only).
    Q3Full8,
    /// Fifteen-level 4-bit codes.
    Q4,
    /// NVFP4 E2M1 codes, 8 per U32 word (mlx-nvfp4 expert weights).
    Nvfp4,
    /// E4M3 group scales (mlx-nvfp4 expert scales).
    E4m3,
    /// A ggml tensor type of a GGUF file.
    Gguf(super::gguf::GgmlType),
    /// MLX quantized weight codes (MLX-LM checkpoints): mode and bits.
    Mlx(QuantMode, u8),
    /// E8M0 (power-of-two) group scales of the MX modes.
    E8m0,
    /// Anything else the manifest says (always a finding).
    Other(String),
}

impl Precision {
    /// Parses the manifest's `precision` string.
    pub fn parse(s: &str) -> Self {
        match s {
            "original" => Precision::Original,
            "q3" => Precision::Q3,
            "q3_full8" => Precision::Q3Full8,
            "q4" => Precision::Q4,
            other => Precision::Other(other.to_string()),
        }
    }

    /// The manifest spelling.
    pub fn as_str(&self) -> &str {
        match self {
            Precision::Original => "original",
            Precision::Q3 => "q3",
            Precision::Q3Full8 => "q3_full8",
            Precision::Q4 => "q4",
            Precision::Nvfp4 => "nvfp4",
            Precision::E4m3 => "e4m3",
            Precision::Gguf(t) => t.name(),
            Precision::Mlx(mode, bits) => mode.label(*bits),
            Precision::E8m0 => "e8m0",
            Precision::Other(s) => s,
        }
    }

    /// The packed code layout, for packed precisions.
    pub fn packed(&self) -> Option<PackedKind> {
        match self {
            Precision::Q3 => Some(PackedKind::Q3),
            Precision::Q3Full8 => Some(PackedKind::Q3Full8),
            Precision::Q4 => Some(PackedKind::Q4),
            _ => None,
        }
    }
}

impl Serialize for Precision {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// MLX's quantization modes (`mx.quantize(..., mode=...)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum QuantMode {
    /// `scale * q + bias`, 2..=8 bits, scales and biases in the model's dtype.
    Affine,
    /// E2M1 codes, E8M0 scales, group 32.
    Mxfp4,
    /// E2M1 codes, E4M3 scales, group 16 (optional global scale).
    Nvfp4,
    /// E4M3 codes, E8M0 scales, group 32.
    Mxfp8,
}

impl QuantMode {
    /// Parses MLX's spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "affine" => QuantMode::Affine,
            "mxfp4" => QuantMode::Mxfp4,
            "nvfp4" => QuantMode::Nvfp4,
            "mxfp8" => QuantMode::Mxfp8,
            _ => return None,
        })
    }

    /// MLX's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            QuantMode::Affine => "affine",
            QuantMode::Mxfp4 => "mxfp4",
            QuantMode::Nvfp4 => "nvfp4",
            QuantMode::Mxfp8 => "mxfp8",
        }
    }

    /// The precision label of a tensor quantized in this mode with `bits`.
    pub fn label(self, bits: u8) -> &'static str {
        match (self, bits) {
            (QuantMode::Affine, 2) => "affine2",
            (QuantMode::Affine, 3) => "affine3",
            (QuantMode::Affine, 4) => "affine4",
            (QuantMode::Affine, 5) => "affine5",
            (QuantMode::Affine, 6) => "affine6",
            (QuantMode::Affine, 8) => "affine8",
            (QuantMode::Affine, _) => "affine",
            (m, _) => m.as_str(),
        }
    }

    /// Bits and group size a mode has when the config does not say (MLX's defaults).
    pub fn defaults(self) -> (u8, u64) {
        match self {
            QuantMode::Affine => (4, 64),
            QuantMode::Mxfp4 => (4, 32),
            QuantMode::Nvfp4 => (4, 16),
            QuantMode::Mxfp8 => (8, 32),
        }
    }

    /// The only bits and group size a float mode allows (`None` for affine).
    pub fn fixed(self) -> Option<(u8, u64)> {
        (self != QuantMode::Affine).then(|| self.defaults())
    }

    /// The scale encoding of a float mode (`None` for affine: model dtype).
    pub fn scale_kind(self) -> Option<ScaleKind> {
        match self {
            QuantMode::Affine => None,
            QuantMode::Mxfp4 | QuantMode::Mxfp8 => Some(ScaleKind::E8m0),
            QuantMode::Nvfp4 => Some(ScaleKind::E4m3),
        }
    }
}

/// How a float mode's U8 scales are encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScaleKind {
    /// `2^(b - 127)`, 0xFF is NaN.
    E8m0,
    /// FP8 E4M3 (bias 7, no infinities), 0x7F/0xFF are NaN.
    E4m3,
}

/// The three packed code grids of the audio8 formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PackedKind {
    /// 3 bits, codes 0..=6, zero 3.
    Q3,
    /// 3 bits, codes 0..=7, zero 4.
    Q3Full8,
    /// 4 bits, codes 0..=14, zero 7.
    Q4,
}

impl PackedKind {
    /// Bits per stored code.
    pub fn bits(self) -> u32 {
        match self {
            PackedKind::Q3 | PackedKind::Q3Full8 => 3,
            PackedKind::Q4 => 4,
        }
    }

    /// The zero point `z`: value = scale * (code - z).
    pub fn zero(self) -> i32 {
        match self {
            PackedKind::Q3 => 3,
            PackedKind::Q3Full8 => 4,
            PackedKind::Q4 => 7,
        }
    }

    /// Largest code a valid tensor may store.
    pub fn max_code(self) -> u8 {
        match self {
            PackedKind::Q3 => 6,
            PackedKind::Q3Full8 => 7,
            PackedKind::Q4 => 14,
        }
    }

    /// The precision this grid belongs to.
    pub fn precision(self) -> Precision {
        match self {
            PackedKind::Q3 => Precision::Q3,
            PackedKind::Q3Full8 => Precision::Q3Full8,
            PackedKind::Q4 => Precision::Q4,
        }
    }
}

/// Element type of a dense tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DenseDtype {
    /// bfloat16, little-endian.
    Bf16,
    /// IEEE half, little-endian.
    F16,
    /// IEEE single, little-endian.
    F32,
    /// IEEE double, little-endian (safetensors `F64`).
    F64,
    /// 8-bit float E4M3 "fn" (bias 7, no infinities, NaN 0x7F/0xFF):
    /// safetensors `F8_E4M3`, PyTorch's `float8_e4m3fn`.
    F8E4m3,
    /// 8-bit float E5M2 (bias 15, IEEE-like: ±inf 0x7C/0xFC, NaN
    /// 0x7D-0x7F/0xFD-0xFF): safetensors `F8_E5M2`, the top byte of an F16.
    F8E5m2,
    /// A little-endian integer, or BOOL (safetensors `I8` … `U64`, `BOOL`):
    /// each value is the integer read as f64 (exact up to 2^53, beyond that
    /// rounded to nearest, as numpy's `astype(float64)`); a BOOL byte is 1
    /// when nonzero, else 0. Always finite.
    Int(IntDtype),
}

/// The integer (and BOOL) dtypes of a safetensors checkpoint's dense
/// tensors ([`DenseDtype::Int`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IntDtype {
    /// Signed 8-bit.
    I8,
    /// Unsigned 8-bit.
    U8,
    /// Signed 16-bit.
    I16,
    /// Unsigned 16-bit.
    U16,
    /// Signed 32-bit.
    I32,
    /// Unsigned 32-bit.
    U32,
    /// Signed 64-bit.
    I64,
    /// Unsigned 64-bit.
    U64,
    /// One byte: true (1) when nonzero, else false (0).
    Bool,
}

impl IntDtype {
    /// Every integer dtype, in the order above.
    pub const ALL: [IntDtype; 9] = [
        IntDtype::I8,
        IntDtype::U8,
        IntDtype::I16,
        IntDtype::U16,
        IntDtype::I32,
        IntDtype::U32,
        IntDtype::I64,
        IntDtype::U64,
        IntDtype::Bool,
    ];

    /// Parses a safetensors header dtype.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|d| d.as_str() == s)
    }

    /// Bytes per element.
    pub fn size(self) -> u64 {
        match self {
            IntDtype::I8 | IntDtype::U8 | IntDtype::Bool => 1,
            IntDtype::I16 | IntDtype::U16 => 2,
            IntDtype::I32 | IntDtype::U32 => 4,
            IntDtype::I64 | IntDtype::U64 => 8,
        }
    }

    /// The safetensors spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            IntDtype::I8 => "I8",
            IntDtype::U8 => "U8",
            IntDtype::I16 => "I16",
            IntDtype::U16 => "U16",
            IntDtype::I32 => "I32",
            IntDtype::U32 => "U32",
            IntDtype::I64 => "I64",
            IntDtype::U64 => "U64",
            IntDtype::Bool => "BOOL",
        }
    }

    /// The value of one element (its [`IntDtype::size`] little-endian
    /// bytes, which `unit` must hold) as f64: exact up to 2^53 in
    /// magnitude, beyond that rounded to nearest (ties to even).
    #[inline]
    pub fn to_f64(self, unit: &[u8]) -> f64 {
        match self {
            IntDtype::I8 => f64::from(unit[0] as i8),
            IntDtype::U8 => f64::from(unit[0]),
            IntDtype::Bool => f64::from(u8::from(unit[0] != 0)),
            IntDtype::I16 => f64::from(i16::from_le_bytes([unit[0], unit[1]])),
            IntDtype::U16 => f64::from(u16::from_le_bytes([unit[0], unit[1]])),
            IntDtype::I32 => f64::from(i32::from_le_bytes([unit[0], unit[1], unit[2], unit[3]])),
            IntDtype::U32 => f64::from(u32::from_le_bytes([unit[0], unit[1], unit[2], unit[3]])),
            IntDtype::I64 => i64::from_le_bytes(eight(unit)) as f64,
            IntDtype::U64 => u64::from_le_bytes(eight(unit)) as f64,
        }
    }

    /// The value of one element rounded once to the nearest f32 (ties to
    /// even), as numpy's `astype(float32)` converts it: an I64 or U64 is
    /// rounded straight from the integer, not through f64 (which could
    /// round twice).
    #[inline]
    pub fn to_f32(self, unit: &[u8]) -> f32 {
        match self {
            IntDtype::I64 => i64::from_le_bytes(eight(unit)) as f32,
            IntDtype::U64 => u64::from_le_bytes(eight(unit)) as f32,
            IntDtype::I32 => i32::from_le_bytes([unit[0], unit[1], unit[2], unit[3]]) as f32,
            IntDtype::U32 => u32::from_le_bytes([unit[0], unit[1], unit[2], unit[3]]) as f32,
            // Every 8- and 16-bit value is an f32 exactly.
            _ => self.to_f64(unit) as f32,
        }
    }
}

/// The first eight bytes of `unit`.
#[inline]
fn eight(unit: &[u8]) -> [u8; 8] {
    let mut b = [0u8; 8];
    b.copy_from_slice(&unit[..8]);
    b
}

impl DenseDtype {
    /// Parses the manifest's `source_dtype`, or the dtype of MLX affine
    /// scales and biases: BF16, F16 or F32 only (the dtypes those formats
    /// allow there; [`DenseDtype::parse_safetensors`] takes every dtype
    /// bundlescope decodes).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "BF16" => Some(DenseDtype::Bf16),
            "F16" => Some(DenseDtype::F16),
            "F32" => Some(DenseDtype::F32),
            _ => None,
        }
    }

    /// Parses a safetensors header dtype whose values bundlescope decodes:
    /// [`DenseDtype::parse`]'s, plus F64, F8_E4M3, F8_E5M2, the integers
    /// (I8, U8, I16, U16, I32, U32, I64, U64) and BOOL. The others
    /// (F8_E8M0, F4, F6_*) are listed and size-checked only.
    pub fn parse_safetensors(s: &str) -> Option<Self> {
        match s {
            "F64" => Some(DenseDtype::F64),
            "F8_E4M3" => Some(DenseDtype::F8E4m3),
            "F8_E5M2" => Some(DenseDtype::F8E5m2),
            _ => Self::parse(s).or_else(|| IntDtype::parse(s).map(DenseDtype::Int)),
        }
    }

    /// Bytes per element.
    pub fn size(self) -> u64 {
        match self {
            DenseDtype::F8E4m3 | DenseDtype::F8E5m2 => 1,
            DenseDtype::Bf16 | DenseDtype::F16 => 2,
            DenseDtype::F32 => 4,
            DenseDtype::F64 => 8,
            DenseDtype::Int(t) => t.size(),
        }
    }

    /// The manifest (or safetensors header) spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            DenseDtype::Bf16 => "BF16",
            DenseDtype::F16 => "F16",
            DenseDtype::F32 => "F32",
            DenseDtype::F64 => "F64",
            DenseDtype::F8E4m3 => "F8_E4M3",
            DenseDtype::F8E5m2 => "F8_E5M2",
            DenseDtype::Int(t) => t.as_str(),
        }
    }
}

/// The validated byte layout of a tensor: only tensors whose metadata passed
/// every check get one, and only those are scanned and decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// `count` dense values of `dtype`.
    Dense {
        /// Element type.
        dtype: DenseDtype,
        /// Number of elements.
        count: u64,
    },
    /// Packed codes followed by F16 scales.
    Packed {
        /// The code grid.
        kind: PackedKind,
        /// Rows of the matrix.
        rows: u64,
        /// Columns of the matrix (a multiple of 64).
        cols: u64,
    },
    /// Stacked NVFP4 expert weights: U32 `[experts, rows, cols/8]`.
    Fp4 {
        /// Experts stacked in the tensor.
        experts: u64,
        /// Output rows per expert.
        rows: u64,
        /// Input columns per expert (a multiple of 16).
        cols: u64,
    },
    /// Stacked E4M3 scales: U8 `[experts, rows, groups]`, one per 16 inputs.
    E4m3 {
        /// Experts stacked in the tensor.
        experts: u64,
        /// Output rows per expert.
        rows: u64,
        /// Scales per row.
        groups: u64,
    },
    /// One F32 global scale per expert: `[experts]`.
    GlobalScale {
        /// Experts.
        experts: u64,
    },
    /// A GGUF tensor: `rows` rows (the product of `ne[1..]`) of `cols`
    /// (`ne[0]`) elements of a ggml type, in blocks along each row.
    Gguf {
        /// The ggml type.
        ty: super::gguf::GgmlType,
        /// Rows: the product of `ne[1..]`.
        rows: u64,
        /// Elements per row: `ne[0]`, a multiple of the type's block size.
        cols: u64,
    },
    /// MLX quantized codes: U32 `[experts, rows, cols * bits / 32]`
    /// (`experts` 1 for an unstacked module), LSB-first across each row's words.
    MlxCodes {
        /// The mode.
        mode: QuantMode,
        /// Bits per code.
        bits: u8,
        /// Inputs per scale.
        group: u64,
        /// Stacked experts (1 when not stacked).
        experts: u64,
        /// Output rows per expert.
        rows: u64,
        /// Input columns.
        cols: u64,
    },
    /// U8 group scales of a float mode: `[experts, rows, groups]`.
    MlxScales {
        /// E8M0 or E4M3.
        kind: ScaleKind,
        /// Stacked experts (1 when not stacked).
        experts: u64,
        /// Scales per expert.
        per_expert: u64,
    },
    /// Affine scales or biases: `count` values of `dtype` that must be finite.
    MlxParams {
        /// Element type (the model's).
        dtype: DenseDtype,
        /// Number of values.
        count: u64,
    },
}

impl Layout {
    /// Bytes of codes in a packed layout (0 for dense).
    pub fn codes_bytes(&self) -> u64 {
        match *self {
            Layout::Dense { .. }
            | Layout::Fp4 { .. }
            | Layout::E4m3 { .. }
            | Layout::GlobalScale { .. }
            | Layout::Gguf { .. } => 0,
            Layout::MlxCodes { .. } | Layout::MlxScales { .. } | Layout::MlxParams { .. } => 0,
            Layout::Packed { kind, rows, cols } => rows * (cols * u64::from(kind.bits()) / 8),
        }
    }

    /// Bytes of one packed row.
    pub fn row_bytes(&self) -> u64 {
        match *self {
            Layout::Dense { .. }
            | Layout::Fp4 { .. }
            | Layout::E4m3 { .. }
            | Layout::GlobalScale { .. }
            | Layout::Gguf { .. } => 0,
            Layout::MlxCodes { .. } | Layout::MlxScales { .. } | Layout::MlxParams { .. } => 0,
            Layout::Packed { kind, cols, .. } => cols * u64::from(kind.bits()) / 8,
        }
    }

    /// Number of F16 scales in a packed layout (0 for dense).
    pub fn scale_count(&self) -> u64 {
        match *self {
            Layout::Dense { .. }
            | Layout::Fp4 { .. }
            | Layout::E4m3 { .. }
            | Layout::GlobalScale { .. }
            | Layout::Gguf { .. } => 0,
            Layout::MlxCodes { .. } | Layout::MlxScales { .. } | Layout::MlxParams { .. } => 0,
            Layout::Packed { rows, cols, .. } => rows * (cols / 64),
        }
    }

    /// Number of stacked experts, for the NVFP4 expert layouts.
    pub fn experts(&self) -> Option<u64> {
        match *self {
            Layout::Fp4 { experts, .. }
            | Layout::E4m3 { experts, .. }
            | Layout::GlobalScale { experts } => Some(experts),
            _ => None,
        }
    }
}

/// One row of the tensor index.
#[derive(Debug, Clone, Serialize)]
pub struct TensorInfo {
    /// Tensor (or alias) name.
    pub name: String,
    /// Precision as the manifest names it (the target's, for an alias).
    pub precision: Precision,
    /// Shape, where it is a list of non-negative integers.
    pub shape: Option<Vec<u64>>,
    /// Source dtype of dense tensors; `F16` scales are implied for packed ones.
    pub source_dtype: Option<String>,
    /// The record's `encoding`.
    #[serde(skip)]
    pub encoding: Option<String>,
    /// Byte offset in the payload.
    pub offset: Option<u64>,
    /// Payload bytes of the record.
    pub bytes: Option<u64>,
    /// Bytes the loaded tensor occupies (the seed's `nbytes`); 0 for aliases.
    pub resident_bytes: Option<u64>,
    /// For an alias, the tensor it shares memory with.
    pub alias_of: Option<String>,
    /// The file holding the bytes (index into [`Bundle::files`]).
    #[serde(skip)]
    pub file: usize,
    /// The validated layout; `None` when the metadata is broken.
    #[serde(skip)]
    pub layout: Option<Layout>,
    /// The record exactly as the manifest has it, for the detail panel.
    #[serde(skip)]
    pub record: serde_json::Value,
    /// The quantization of the MLX-LM module it belongs to (weight,
    /// scales, biases and global scale share one).
    #[serde(skip)]
    pub quant: Option<std::sync::Arc<QuantNote>>,
}

/// An MLX-LM module's quantization as resolved from the config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuantNote {
    /// Mode.
    pub mode: QuantMode,
    /// Bits per code.
    pub bits: u8,
    /// Inputs per scale.
    pub group_size: u64,
    /// Where the parameters come from: `its entry quantization["…"]` or
    /// `the global quantization block` (one text shared by every module
    /// the global block covers).
    pub from: std::sync::Arc<str>,
}

impl QuantNote {
    /// Whether a per-module entry of the config set it.
    pub fn from_entry(&self) -> bool {
        self.from.starts_with("its entry")
    }

    /// As the detail panel shows it.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "mode": self.mode.as_str(), "bits": self.bits, "group_size": self.group_size,
            "from": &*self.from,
        })
    }
}

impl TensorInfo {
    /// The quantization of an MLX-LM module's tensors, if any.
    pub fn quantization(&self) -> Option<&QuantNote> {
        self.quant.as_deref()
    }

    /// Number of parameters (product of the shape), if the shape is known and fits.
    pub fn parameters(&self) -> Option<u64> {
        let shape = self.shape.as_ref()?;
        shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d))
    }

    /// `[rows, cols]` as text, e.g. `151936×3584`.
    pub fn shape_text(&self) -> String {
        match &self.shape {
            Some(s) => s.iter().map(u64::to_string).collect::<Vec<_>>().join("×"),
            None => "?".to_string(),
        }
    }

    /// Byte range `[offset, offset + bytes)` in its file, when both are known and fit.
    pub fn range(&self) -> Option<(u64, u64)> {
        let offset = self.offset?;
        Some((offset, offset.checked_add(self.bytes?)?))
    }
}

/// A file whose bytes are hashed and scanned.
#[derive(Debug, Clone, Serialize)]
pub struct PayloadFile {
    /// File name as the manifest gives it.
    pub name: String,
    /// Where it is on disk.
    #[serde(skip)]
    pub path: PathBuf,
    /// Length the manifest claims.
    pub expected_bytes: Option<u64>,
    /// SHA-256 the manifest claims (lower-case hex).
    pub expected_sha256: Option<String>,
}

/// Provenance facts a person wants to see beside the verdict.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Provenance {
    /// `format` string exactly as written.
    pub format: Option<String>,
    /// `source_revision`.
    pub source_revision: Option<String>,
    /// `profile`.
    pub profile: Option<String>,
    /// `external_assets_not_included["config.json"].sha256`.
    pub expected_config_sha256: Option<String>,
    /// SHA-256 of manifest.json as read (of a GGUF's header bytes).
    pub manifest_sha256: String,
    /// The file `manifest_sha256` hashes, relative to the bundle's folder,
    /// when it is a file of its own (an audio8 manifest.json, a
    /// checkpoint's config.json or index; not a GGUF's header). Set by
    /// [`crate::format::open`].
    #[serde(skip)]
    pub manifest_file: Option<String>,
    /// A calibrated GPTQ-Q4 overlay's `provenance` block as declared.
    #[serde(skip)]
    pub calibrated: Option<std::sync::Arc<super::gptq::Declared>>,
    /// What the audit measured of that block (the report's `provenance`
    /// carries its fields; set by the report, never by a format parser).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub gptq: Option<Box<super::gptq::ProvenanceReport>>,
    /// A GGUF file's header metadata.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gguf: Option<std::sync::Arc<super::gguf::Metadata>>,
    /// Further facts a format shows in the Summary, in order (MLX-LM: the
    /// config's architecture, size and quantization block).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra: Vec<(String, String)>,
}

/// An opened bundle: everything learned from the manifest, before any payload
/// byte is read.
#[derive(Debug, Clone)]
pub struct Bundle {
    /// The bundle folder.
    pub dir: PathBuf,
    /// Its manifest.
    pub manifest_path: PathBuf,
    /// The manifest's bytes, hashed once at open.
    pub manifest_bytes: Vec<u8>,
    /// Which format it is.
    pub format: FormatKind,
    /// The tensor index, aliases last.
    pub tensors: Vec<TensorInfo>,
    /// Files to hash and scan.
    pub files: Vec<PayloadFile>,
    /// Provenance facts.
    pub provenance: Provenance,
    /// Findings from the manifest alone.
    pub findings: Vec<Finding>,
}

impl Bundle {
    /// Index of the tensor called `name`.
    pub fn find(&self, name: &str) -> Option<usize> {
        self.tensors.iter().position(|t| t.name == name)
    }

    /// Whether `t` is the U32 `weight` of an MLX quantized module (its
    /// `scales` beside it) in a checkpoint with no quantization block to
    /// decode it: its packed codes are listed as stored, not decoded, and
    /// not read as integers either.
    pub fn unannounced_codes(&self, t: &TensorInfo) -> bool {
        t.layout.is_none()
            && self.format == FormatKind::Safetensors
            && t.source_dtype.as_deref() == Some("U32")
            && t.name
                .strip_suffix(".weight")
                .is_some_and(|p| self.find(&format!("{p}.scales")).is_some())
    }

    /// The dtype of `t` when `t` has no layout only because bundlescope
    /// lists and size-checks tensors of that dtype without decoding their
    /// values (a safetensors or MLX-LM checkpoint's F8_E8M0, F4 or F6
    /// tensor), rather than because its metadata is broken: its dtype is
    /// one safetensors defines, it is not an alias, and no finding of the
    /// bundle names it.
    pub fn undecoded_dtype<'t>(&self, t: &'t TensorInfo) -> Option<&'t str> {
        if t.layout.is_some()
            || t.alias_of.is_some()
            || !matches!(self.format, FormatKind::Safetensors | FormatKind::MlxLm)
        {
            return None;
        }
        let dtype = t.source_dtype.as_deref()?;
        let listed = super::safetensors::dtype_bits(dtype).is_some()
            && DenseDtype::parse_safetensors(dtype).is_none();
        let named = self
            .findings
            .iter()
            .any(|f| f.tensor.as_deref() == Some(t.name.as_str()));
        (listed && !named).then_some(dtype)
    }
}
