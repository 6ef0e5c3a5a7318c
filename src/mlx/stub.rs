//! Without the bridge: every call says how to get it.

use super::args::Arr;
use super::{Device, GgufAffine, MlxError};

pub(super) struct Quantized {
    pub(super) words: Vec<u32>,
    pub(super) scales_f32: Vec<f32>,
    pub(super) scales_u8: Vec<u8>,
    pub(super) biases: Vec<f32>,
}

/// One stand-in per bridge call, with the real call's argument types, so
/// `super` compiles the same with and without MLX.
macro_rules! not_built {
    ($($name:ident($($arg:ty),*) -> $ret:ty;)*) => {$(
        #[allow(clippy::too_many_arguments)]
        pub(super) fn $name($(_: $arg),*) -> Result<$ret, MlxError> {
            Err(MlxError::NotBuilt)
        }
    )*};
}

not_built! {
    version() -> String;
    default_device() -> String;
    device_available(Device) -> ();
    quantized_matmul(Device, &Arr<'_>, &Arr<'_>, &Arr<'_>, &Arr<'_>, i32, i32, &str) -> Vec<f32>;
    dequantize(
        Device, &Arr<'_>, &Arr<'_>, &Arr<'_>, &Arr<'_>, &Arr<'_>, i32, i32, &str, u8
    ) -> Vec<f32>;
    quantize(Device, &Arr<'_>, &Arr<'_>, i32, i32, &str) -> Quantized;
    gather_qmm(
        Device, &Arr<'_>, &Arr<'_>, &Arr<'_>, &Arr<'_>, &Arr<'_>, &Arr<'_>, i32, i32, &str
    ) -> Vec<f32>;
    matmul_nt(Device, &Arr<'_>, &Arr<'_>) -> Vec<f32>;
    load_gguf_affine(&str, &[String]) -> Vec<GgufAffine>;
}
