//! The ggml tensor types a GGUF file may name: their numbers (as in
//! llama.cpp's `ggml.h` and gguf-py's `GGMLQuantizationType`), names, block
//! sizes and bytes per block. Numbers ggml retired (4, 5, 31–33, 36–38) are
//! unknown here, as they are to today's loaders. Where gguf-py and ggml
//! disagree, ggml (the loader that runs the file) wins: Q8_1 is 36 bytes
//! (two F16s and 32 int8, `block_q8_1` in ggml-common.h), not gguf-py
//! 0.19's 40; Q2_0 (42) is in ggml.h and not yet in gguf-py.
//! tests/gguf_llamacpp.rs holds this table against ggml's own, printed by
//! the llama.cpp build of scripts/make-llamacpp-gguf.sh.

use serde::Serialize;

macro_rules! ggml_types {
    ($( $v:ident = $n:literal, $name:literal, $block:literal, $bytes:expr, $decoded:literal ;)*) => {
        /// A ggml tensor type.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[allow(non_camel_case_types)]
        pub enum GgmlType {
            $(
                #[doc = $name]
                $v,
            )*
        }

        impl GgmlType {
            /// Every known type, in number order.
            pub const ALL: &[GgmlType] = &[$(GgmlType::$v),*];

            /// The type of number `n`, if ggml knows it today.
            pub fn from_u32(n: u32) -> Option<Self> {
                match n {
                    $( $n => Some(GgmlType::$v), )*
                    _ => None,
                }
            }

            /// The type's number in the file.
            pub fn number(self) -> u32 {
                match self { $( GgmlType::$v => $n, )* }
            }

            /// The name ggml and gguf-py give it (`Q4_K`).
            pub fn name(self) -> &'static str {
                match self { $( GgmlType::$v => $name, )* }
            }

            /// Elements per block.
            pub fn block_size(self) -> u64 {
                match self { $( GgmlType::$v => $block, )* }
            }

            /// Bytes per block.
            pub fn type_size(self) -> u64 {
                match self { $( GgmlType::$v => $bytes, )* }
            }

            /// Whether bundlescope decodes it into codes, scales and values.
            pub fn decoded(self) -> bool {
                match self { $( GgmlType::$v => $decoded, )* }
            }
        }
    };
}

const QK_K: u64 = 256;

ggml_types! {
    F32 = 0, "F32", 1, 4, true;
    F16 = 1, "F16", 1, 2, true;
    Q4_0 = 2, "Q4_0", 32, 2 + 16, true;
    Q4_1 = 3, "Q4_1", 32, 2 + 2 + 16, true;
    Q5_0 = 6, "Q5_0", 32, 2 + 4 + 16, true;
    Q5_1 = 7, "Q5_1", 32, 2 + 2 + 4 + 16, true;
    Q8_0 = 8, "Q8_0", 32, 2 + 32, true;
    Q8_1 = 9, "Q8_1", 32, 2 + 2 + 32, false;
    Q2_K = 10, "Q2_K", 256, 2 + 2 + QK_K / 16 + QK_K / 4, true;
    Q3_K = 11, "Q3_K", 256, 2 + QK_K / 4 + QK_K / 8 + 12, true;
    Q4_K = 12, "Q4_K", 256, 2 + 2 + QK_K / 2 + 12, true;
    Q5_K = 13, "Q5_K", 256, 2 + 2 + QK_K / 2 + QK_K / 8 + 12, true;
    Q6_K = 14, "Q6_K", 256, 2 + QK_K / 2 + QK_K / 4 + QK_K / 16, true;
    Q8_K = 15, "Q8_K", 256, 4 + QK_K + QK_K / 8, true;
    IQ2_XXS = 16, "IQ2_XXS", 256, 2 + QK_K / 4, false;
    IQ2_XS = 17, "IQ2_XS", 256, 2 + QK_K / 4 + QK_K / 32, false;
    IQ3_XXS = 18, "IQ3_XXS", 256, 2 + QK_K / 4 + QK_K / 8, false;
    IQ1_S = 19, "IQ1_S", 256, 2 + QK_K / 8 + QK_K / 16, false;
    IQ4_NL = 20, "IQ4_NL", 32, 2 + 16, false;
    IQ3_S = 21, "IQ3_S", 256, 2 + QK_K / 4 + QK_K / 8 + QK_K / 32 + 4, false;
    IQ2_S = 22, "IQ2_S", 256, 2 + QK_K / 4 + QK_K / 16, false;
    IQ4_XS = 23, "IQ4_XS", 256, 2 + 2 + QK_K / 2 + QK_K / 64, false;
    I8 = 24, "I8", 1, 1, true;
    I16 = 25, "I16", 1, 2, true;
    I32 = 26, "I32", 1, 4, true;
    I64 = 27, "I64", 1, 8, true;
    F64 = 28, "F64", 1, 8, true;
    IQ1_M = 29, "IQ1_M", 256, QK_K / 8 + QK_K / 16 + QK_K / 32, false;
    BF16 = 30, "BF16", 1, 2, true;
    TQ1_0 = 34, "TQ1_0", 256, 2 + 4 * 13, false;
    TQ2_0 = 35, "TQ2_0", 256, 2 + 64, false;
    MXFP4 = 39, "MXFP4", 32, 1 + 16, true;
    NVFP4 = 40, "NVFP4", 64, 4 + 32, true;
    Q1_0 = 41, "Q1_0", 128, 2 + 16, false;
    Q2_0 = 42, "Q2_0", 64, 2 + 16, false;
}

impl GgmlType {
    /// F32, F16, BF16 or F64: one value per element, checked for
    /// finiteness.
    pub fn is_float(self) -> bool {
        matches!(
            self,
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 | GgmlType::F64
        )
    }

    /// The integer types (I8, I16, I32, I64) as the dense dtype whose
    /// values they hold.
    pub fn int_dtype(self) -> Option<crate::format::IntDtype> {
        use crate::format::IntDtype as I;
        match self {
            GgmlType::I8 => Some(I::I8),
            GgmlType::I16 => Some(I::I16),
            GgmlType::I32 => Some(I::I32),
            GgmlType::I64 => Some(I::I64),
            _ => None,
        }
    }

    /// One value per element, no blocks (the floats and the integers):
    /// decoded as dense values, not as codes and scales.
    pub fn is_dense(self) -> bool {
        self.is_float() || self.int_dtype().is_some()
    }
}

impl Serialize for GgmlType {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_round_trip_and_retired_ones_are_unknown() {
        for &t in GgmlType::ALL {
            assert_eq!(GgmlType::from_u32(t.number()), Some(t));
            assert!(t.type_size() > 0 && t.block_size() > 0);
        }
        for n in [4, 5, 31, 32, 33, 36, 37, 38, 43, 1000] {
            assert_eq!(GgmlType::from_u32(n), None, "{n}");
        }
        assert_eq!(GgmlType::ALL.len(), 35);
        assert_eq!(GgmlType::Q8_1.type_size(), 36);
        assert_eq!(GgmlType::Q6_K.type_size(), 210);
        assert_eq!(GgmlType::Q4_K.type_size(), 144);
    }
}
