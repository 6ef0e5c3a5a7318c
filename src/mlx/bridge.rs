//! The `cxx` bridge to MLX's C++ API (`bridge.cc`). Arrays go in as borrowed
//! slices with their shapes and come back as owned vectors; every MLX
//! exception comes back as an `Err`. Only [`super`] calls these.

#[allow(clippy::too_many_arguments)]
#[cxx::bridge(namespace = "bundlescope_mlx")]
pub(super) mod ffi {
    /// One array handed to MLX. `dtype` is one of the `DTYPE_*` codes of
    /// `super`; exactly the slice that dtype names holds the elements
    /// (`u16s` holds bfloat16 or float16 bit patterns), the others are empty.
    /// `DTYPE_NONE` stands for an absent optional argument.
    struct ArrayArg<'a> {
        dtype: u8,
        shape: &'a [i32],
        f32s: &'a [f32],
        u16s: &'a [u16],
        u32s: &'a [u32],
        u8s: &'a [u8],
        i32s: &'a [i32],
    }

    /// What `quantize` returns: packed words, scales (float or E4M3 bytes,
    /// by mode) and, for affine, biases.
    struct Quantized {
        words: Vec<u32>,
        scales_f32: Vec<f32>,
        scales_u8: Vec<u8>,
        biases: Vec<f32>,
    }

    /// One quantized tensor as MLX's GGUF loader returns it: `weight`
    /// (uint32 words), `scales` and `biases` (float16 bits), found under
    /// the names `load_gguf` gives them; `found` false when it returned no
    /// such weight.
    struct GgufAffine {
        name: String,
        found: bool,
        shape: Vec<i64>,
        words: Vec<u32>,
        scales: Vec<u16>,
        biases: Vec<u16>,
    }

    unsafe extern "C++" {
        include!("bundlescope/src/mlx/bridge.h");

        /// MLX's version string, e.g. "0.32.4".
        fn version() -> String;
        /// "cpu" or "gpu": MLX's default device.
        fn default_device() -> Result<String>;
        /// Is a device of this kind (1 cpu, 2 gpu) available?
        fn device_available(device: i32) -> bool;

        /// `quantized_matmul(x, w, scales, biases, transpose=true)`, as f32.
        fn quantized_matmul(
            device: i32,
            x: &ArrayArg,
            w: &ArrayArg,
            scales: &ArrayArg,
            biases: &ArrayArg,
            group_size: i32,
            bits: i32,
            mode: &str,
        ) -> Result<Vec<f32>>;

        /// Rows `ids` of `w`, `scales` and `biases` (when present), then
        /// `dequantize(..., dtype=float32)`, then a cast to `out_dtype` and
        /// back to f32. `global_scale` is a scalar or absent.
        fn dequantize(
            device: i32,
            w: &ArrayArg,
            scales: &ArrayArg,
            biases: &ArrayArg,
            global_scale: &ArrayArg,
            ids: &ArrayArg,
            group_size: i32,
            bits: i32,
            mode: &str,
            out_dtype: u8,
        ) -> Result<Vec<f32>>;

        /// `quantize(w, group_size, bits, mode, global_scale)`.
        fn quantize(
            device: i32,
            w: &ArrayArg,
            global_scale: &ArrayArg,
            group_size: i32,
            bits: i32,
            mode: &str,
        ) -> Result<Quantized>;

        /// `gather_qmm(x, w, scales, biases, rhs_indices=rhs, transpose=true,
        /// mode, global_scale)`, as f32. MLX runs a global scale on the GPU
        /// only: on the CPU this throws "unsupported on cpu: ...".
        fn gather_qmm(
            device: i32,
            x: &ArrayArg,
            w: &ArrayArg,
            scales: &ArrayArg,
            biases: &ArrayArg,
            global_scale: &ArrayArg,
            rhs_indices: &ArrayArg,
            group_size: i32,
            bits: i32,
            mode: &str,
        ) -> Result<Vec<f32>>;

        /// `load_gguf(path)` on the CPU (every tensor of the file, as MLX
        /// loads it), then, for each of `names`, its weight, scales and
        /// biases.
        fn load_gguf_affine(path: &str, names: &[String]) -> Result<Vec<GgufAffine>>;

        /// `x @ w.T` in f32 (`x` [batch, k], `w` [n, k]).
        fn matmul_nt(device: i32, x: &ArrayArg, w: &ArrayArg) -> Result<Vec<f32>>;
    }
}
