// The C++ half of bundlescope's MLX bridge (see bridge.rs for the contract).
#pragma once

#include <cstdint>

#include "rust/cxx.h"

namespace bundlescope_mlx {

struct ArrayArg;
struct Quantized;
struct GgufAffine;

rust::String version();
rust::String default_device();
bool device_available(int32_t device);

rust::Vec<float> quantized_matmul(int32_t device, const ArrayArg& x, const ArrayArg& w,
                                  const ArrayArg& scales, const ArrayArg& biases,
                                  int32_t group_size, int32_t bits, rust::Str mode);

rust::Vec<float> dequantize(int32_t device, const ArrayArg& w, const ArrayArg& scales,
                            const ArrayArg& biases, const ArrayArg& global_scale,
                            const ArrayArg& ids, int32_t group_size, int32_t bits,
                            rust::Str mode, uint8_t out_dtype);

Quantized quantize(int32_t device, const ArrayArg& w, const ArrayArg& global_scale,
                   int32_t group_size, int32_t bits, rust::Str mode);

rust::Vec<float> gather_qmm(int32_t device, const ArrayArg& x, const ArrayArg& w,
                            const ArrayArg& scales, const ArrayArg& biases,
                            const ArrayArg& global_scale, const ArrayArg& rhs_indices,
                            int32_t group_size, int32_t bits, rust::Str mode);

rust::Vec<GgufAffine> load_gguf_affine(rust::Str path, rust::Slice<const rust::String> names);

rust::Vec<float> matmul_nt(int32_t device, const ArrayArg& x, const ArrayArg& w);

}  // namespace bundlescope_mlx
