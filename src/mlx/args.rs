//! The arguments of one MLX call as the bridge takes them: elements with a
//! dtype code shared with `bridge.cc`, and a shape in MLX's int32.

use super::{MlxError, OutDtype};

// Dtype codes shared with bridge.cc.
#[cfg_attr(not(feature = "mlx"), allow(dead_code))]
pub(super) const DTYPE_NONE: u8 = 0;
pub(super) const DTYPE_F32: u8 = 1;
pub(super) const DTYPE_BF16: u8 = 2;
#[cfg_attr(not(feature = "mlx"), allow(dead_code))]
pub(super) const DTYPE_F16: u8 = 3;
#[cfg_attr(not(feature = "mlx"), allow(dead_code))]
pub(super) const DTYPE_U32: u8 = 4;
#[cfg_attr(not(feature = "mlx"), allow(dead_code))]
pub(super) const DTYPE_U8: u8 = 5;
#[cfg_attr(not(feature = "mlx"), allow(dead_code))]
pub(super) const DTYPE_I32: u8 = 6;

/// The bridge's dtype code of a result dtype.
pub(super) fn out_code(d: OutDtype) -> u8 {
    match d {
        OutDtype::F32 => DTYPE_F32,
        OutDtype::Bf16 => DTYPE_BF16,
        OutDtype::Native => DTYPE_NONE,
    }
}

/// Elements of one array argument.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "mlx"), allow(dead_code))]
pub(super) enum Data<'a> {
    None,
    F32(&'a [f32]),
    Bf16(&'a [u16]),
    F16(&'a [u16]),
    U32(&'a [u32]),
    U8(&'a [u8]),
    I32(&'a [i32]),
}

/// One array argument: elements and shape (MLX's int32 dimensions).
#[derive(Debug, Clone)]
#[cfg_attr(not(feature = "mlx"), allow(dead_code))]
pub(super) struct Arr<'a> {
    pub(super) data: Data<'a>,
    pub(super) shape: Vec<i32>,
}

impl<'a> Arr<'a> {
    /// An argument of `shape`; a dimension beyond int32 is refused.
    pub(super) fn new(data: Data<'a>, shape: &[usize]) -> Result<Self, MlxError> {
        let shape = shape
            .iter()
            .map(|&d| {
                i32::try_from(d)
                    .map_err(|_| MlxError::Shape(format!("dimension {d} exceeds MLX's int32")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { data, shape })
    }

    /// An absent optional argument.
    pub(super) fn none() -> Self {
        Self {
            data: Data::None,
            shape: Vec::new(),
        }
    }
}
