//! The real calls: one lock, arguments to the bridge's structs,
//! exceptions to errors.

use std::sync::Mutex;

use super::args::*;
use super::bridge::ffi;
use super::*;

/// MLX's default device and stream are process-wide; one call at a time.
static LOCK: Mutex<()> = Mutex::new(());

fn locked<T>(f: impl FnOnce() -> Result<T, cxx::Exception>) -> Result<T, MlxError> {
    let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    // Which operations a device lacks is decided before calling (see
    // `super::gather_qmm_nvfp4`), so every exception here is MLX's own.
    f().map_err(|e| MlxError::Mlx(e.what().to_string()))
}

fn arg<'a>(a: &'a Arr<'a>) -> ffi::ArrayArg<'a> {
    let mut out = ffi::ArrayArg {
        dtype: DTYPE_NONE,
        shape: &a.shape,
        f32s: &[],
        u16s: &[],
        u32s: &[],
        u8s: &[],
        i32s: &[],
    };
    match a.data {
        Data::None => {}
        Data::F32(v) => (out.dtype, out.f32s) = (DTYPE_F32, v),
        Data::Bf16(v) => (out.dtype, out.u16s) = (DTYPE_BF16, v),
        Data::F16(v) => (out.dtype, out.u16s) = (DTYPE_F16, v),
        Data::U32(v) => (out.dtype, out.u32s) = (DTYPE_U32, v),
        Data::U8(v) => (out.dtype, out.u8s) = (DTYPE_U8, v),
        Data::I32(v) => (out.dtype, out.i32s) = (DTYPE_I32, v),
    }
    out
}

pub(super) fn version() -> Result<String, MlxError> {
    locked(|| Ok(ffi::version()))
}

pub(super) fn default_device() -> Result<String, MlxError> {
    locked(ffi::default_device)
}

pub(super) fn device_available(device: Device) -> Result<(), MlxError> {
    if locked(|| Ok(ffi::device_available(device.code())))? {
        Ok(())
    } else {
        Err(MlxError::Mlx(
            "no GPU device: this MLX build runs on the cpu only".into(),
        ))
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) fn quantized_matmul(
    device: Device,
    x: &Arr<'_>,
    w: &Arr<'_>,
    scales: &Arr<'_>,
    biases: &Arr<'_>,
    group_size: i32,
    bits: i32,
    mode: &str,
) -> Result<Vec<f32>, MlxError> {
    locked(|| {
        ffi::quantized_matmul(
            device.code(),
            &arg(x),
            &arg(w),
            &arg(scales),
            &arg(biases),
            group_size,
            bits,
            mode,
        )
    })
}

#[allow(clippy::too_many_arguments)]
pub(super) fn dequantize(
    device: Device,
    w: &Arr<'_>,
    scales: &Arr<'_>,
    biases: &Arr<'_>,
    global_scale: &Arr<'_>,
    ids: &Arr<'_>,
    group_size: i32,
    bits: i32,
    mode: &str,
    out_dtype: u8,
) -> Result<Vec<f32>, MlxError> {
    locked(|| {
        ffi::dequantize(
            device.code(),
            &arg(w),
            &arg(scales),
            &arg(biases),
            &arg(global_scale),
            &arg(ids),
            group_size,
            bits,
            mode,
            out_dtype,
        )
    })
}

pub(super) struct Quantized {
    pub(super) words: Vec<u32>,
    pub(super) scales_f32: Vec<f32>,
    pub(super) scales_u8: Vec<u8>,
    pub(super) biases: Vec<f32>,
}

pub(super) fn quantize(
    device: Device,
    w: &Arr<'_>,
    global_scale: &Arr<'_>,
    group_size: i32,
    bits: i32,
    mode: &str,
) -> Result<Quantized, MlxError> {
    let q = locked(|| {
        ffi::quantize(
            device.code(),
            &arg(w),
            &arg(global_scale),
            group_size,
            bits,
            mode,
        )
    })?;
    Ok(Quantized {
        words: q.words,
        scales_f32: q.scales_f32,
        scales_u8: q.scales_u8,
        biases: q.biases,
    })
}

#[allow(clippy::too_many_arguments)]
pub(super) fn gather_qmm(
    device: Device,
    x: &Arr<'_>,
    w: &Arr<'_>,
    scales: &Arr<'_>,
    biases: &Arr<'_>,
    global_scale: &Arr<'_>,
    rhs_indices: &Arr<'_>,
    group_size: i32,
    bits: i32,
    mode: &str,
) -> Result<Vec<f32>, MlxError> {
    locked(|| {
        ffi::gather_qmm(
            device.code(),
            &arg(x),
            &arg(w),
            &arg(scales),
            &arg(biases),
            &arg(global_scale),
            &arg(rhs_indices),
            group_size,
            bits,
            mode,
        )
    })
}

pub(super) fn load_gguf_affine(path: &str, names: &[String]) -> Result<Vec<GgufAffine>, MlxError> {
    let got = locked(|| ffi::load_gguf_affine(path, names))?;
    Ok(got
        .into_iter()
        .map(|t| GgufAffine {
            name: t.name,
            found: t.found,
            shape: t.shape,
            words: t.words,
            scales: t.scales,
            biases: t.biases,
        })
        .collect())
}

pub(super) fn matmul_nt(device: Device, x: &Arr<'_>, w: &Arr<'_>) -> Result<Vec<f32>, MlxError> {
    locked(|| ffi::matmul_nt(device.code(), &arg(x), &arg(w)))
}
