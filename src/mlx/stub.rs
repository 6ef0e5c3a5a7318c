//! Without the bridge: every call says how to get it.

use super::args::*;
use super::*;

pub(super) struct Quantized {
    pub(super) words: Vec<u32>,
    pub(super) scales_f32: Vec<f32>,
    pub(super) scales_u8: Vec<u8>,
    pub(super) biases: Vec<f32>,
}

pub(super) fn version() -> Result<String, MlxError> {
    Err(MlxError::NotBuilt)
}

pub(super) fn default_device() -> Result<String, MlxError> {
    Err(MlxError::NotBuilt)
}

pub(super) fn device_available(_: Device) -> Result<(), MlxError> {
    Err(MlxError::NotBuilt)
}

#[allow(clippy::too_many_arguments)]
pub(super) fn quantized_matmul(
    _: Device,
    _: &Arr<'_>,
    _: &Arr<'_>,
    _: &Arr<'_>,
    _: &Arr<'_>,
    _: i32,
    _: i32,
    _: &str,
) -> Result<Vec<f32>, MlxError> {
    Err(MlxError::NotBuilt)
}

#[allow(clippy::too_many_arguments)]
pub(super) fn dequantize(
    _: Device,
    _: &Arr<'_>,
    _: &Arr<'_>,
    _: &Arr<'_>,
    _: &Arr<'_>,
    _: &Arr<'_>,
    _: i32,
    _: i32,
    _: &str,
    _: u8,
) -> Result<Vec<f32>, MlxError> {
    Err(MlxError::NotBuilt)
}

pub(super) fn quantize(
    _: Device,
    _: &Arr<'_>,
    _: &Arr<'_>,
    _: i32,
    _: i32,
    _: &str,
) -> Result<Quantized, MlxError> {
    Err(MlxError::NotBuilt)
}

#[allow(clippy::too_many_arguments)]
pub(super) fn gather_qmm(
    _: Device,
    _: &Arr<'_>,
    _: &Arr<'_>,
    _: &Arr<'_>,
    _: &Arr<'_>,
    _: &Arr<'_>,
    _: &Arr<'_>,
    _: i32,
    _: i32,
    _: &str,
) -> Result<Vec<f32>, MlxError> {
    Err(MlxError::NotBuilt)
}

pub(super) fn matmul_nt(_: Device, _: &Arr<'_>, _: &Arr<'_>) -> Result<Vec<f32>, MlxError> {
    Err(MlxError::NotBuilt)
}
