// bundlescope's bridge to MLX's C++ API. Every function builds MLX arrays
// from borrowed Rust slices (MLX copies them), runs one small graph on the
// chosen device, evaluates it and copies the f32 result into a Rust Vec.
// Errors are C++ exceptions, which cxx turns into Rust `Err`s.

#include "bundlescope/src/mlx/bridge.h"

#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bundlescope/src/mlx/bridge.rs.h"
#include "mlx/array.h"
#include "mlx/device.h"
#include "mlx/io.h"
#include "mlx/ops.h"
#include "mlx/transforms.h"
#include "mlx/version.h"

namespace mx = mlx::core;

namespace bundlescope_mlx {
namespace {

// Keep in step with the DTYPE_* constants of src/mlx/mod.rs.
constexpr uint8_t DTYPE_NONE = 0;
constexpr uint8_t DTYPE_F32 = 1;
constexpr uint8_t DTYPE_BF16 = 2;
constexpr uint8_t DTYPE_F16 = 3;
constexpr uint8_t DTYPE_U32 = 4;
constexpr uint8_t DTYPE_U8 = 5;
constexpr uint8_t DTYPE_I32 = 6;

// 0 = MLX's default device, 1 = cpu, 2 = gpu.
mx::StreamOrDevice device_of(int32_t device) {
  switch (device) {
    case 0:
      return {};
    case 1:
      return mx::Device(mx::Device::cpu);
    case 2: {
      mx::Device gpu(mx::Device::gpu);
      if (!mx::is_available(gpu)) {
        throw std::runtime_error("no GPU device: this MLX build runs on the cpu only");
      }
      return gpu;
    }
    default:
      throw std::invalid_argument("unknown device code " + std::to_string(device));
  }
}

bool on_cpu(int32_t device) {
  if (device == 1) return true;
  if (device == 2) return false;
  return mx::default_device() == mx::Device::cpu;
}

template <typename T>
mx::array from_slice(rust::Slice<const T> data, const mx::Shape& shape, mx::Dtype dtype,
                     size_t count, const char* what) {
  if (data.size() != count) {
    throw std::invalid_argument(std::string("array of ") + what + ": shape holds " +
                                std::to_string(count) + " elements, " +
                                std::to_string(data.size()) + " given");
  }
  return mx::array(data.data(), shape, dtype);
}

mx::array make(const ArrayArg& a) {
  mx::Shape shape;
  size_t count = 1;
  for (int32_t d : a.shape) {
    if (d < 0) throw std::invalid_argument("negative dimension in a shape");
    shape.push_back(d);
    count *= static_cast<size_t>(d);
  }
  switch (a.dtype) {
    case DTYPE_F32:
      return from_slice(a.f32s, shape, mx::float32, count, "float32");
    case DTYPE_BF16:
      // Bit patterns in, bfloat16 out: a view, not a numeric conversion.
      return mx::view(from_slice(a.u16s, shape, mx::uint16, count, "bfloat16"), mx::bfloat16);
    case DTYPE_F16:
      return mx::view(from_slice(a.u16s, shape, mx::uint16, count, "float16"), mx::float16);
    case DTYPE_U32:
      return from_slice(a.u32s, shape, mx::uint32, count, "uint32");
    case DTYPE_U8:
      return from_slice(a.u8s, shape, mx::uint8, count, "uint8");
    case DTYPE_I32:
      return from_slice(a.i32s, shape, mx::int32, count, "int32");
    default:
      throw std::invalid_argument("unknown dtype code " + std::to_string(a.dtype));
  }
}

std::optional<mx::array> optional(const ArrayArg& a) {
  if (a.dtype == DTYPE_NONE) return std::nullopt;
  return make(a);
}

mx::Dtype dtype_of(uint8_t code) {
  switch (code) {
    case DTYPE_F32:
      return mx::float32;
    case DTYPE_BF16:
      return mx::bfloat16;
    case DTYPE_F16:
      return mx::float16;
    default:
      throw std::invalid_argument("unsupported output dtype code " + std::to_string(code));
  }
}

// Evaluates `y` as f32 and copies it out, row-major.
rust::Vec<float> to_vec(const mx::array& y, const mx::StreamOrDevice& s) {
  mx::array out = mx::contiguous(mx::flatten(mx::astype(y, mx::float32, s), s), false, s);
  mx::eval({out});
  rust::Vec<float> v;
  v.reserve(out.size());
  const float* p = out.data<float>();
  for (size_t i = 0; i < out.size(); ++i) v.push_back(p[i]);
  return v;
}

template <typename T>
rust::Vec<T> copy_out(const mx::array& a, mx::Dtype dtype, const mx::StreamOrDevice& s) {
  mx::array out = mx::contiguous(mx::flatten(a, s), false, s);
  if (out.dtype() != dtype) throw std::runtime_error("MLX returned an unexpected dtype");
  mx::eval({out});
  rust::Vec<T> v;
  v.reserve(out.size());
  const T* p = out.data<T>();
  for (size_t i = 0; i < out.size(); ++i) v.push_back(p[i]);
  return v;
}

}  // namespace

rust::String version() { return rust::String(mx::version()); }

rust::String default_device() {
  return rust::String(mx::default_device() == mx::Device::cpu ? "cpu" : "gpu");
}

bool device_available(int32_t device) {
  if (device == 1) return mx::is_available(mx::Device(mx::Device::cpu));
  if (device == 2) return mx::is_available(mx::Device(mx::Device::gpu));
  return true;
}

rust::Vec<float> quantized_matmul(int32_t device, const ArrayArg& x, const ArrayArg& w,
                                  const ArrayArg& scales, const ArrayArg& biases,
                                  int32_t group_size, int32_t bits, rust::Str mode) {
  auto s = device_of(device);
  auto y = mx::quantized_matmul(make(x), make(w), make(scales), optional(biases),
                                /*transpose=*/true, group_size, bits, std::string(mode), s);
  return to_vec(y, s);
}

rust::Vec<float> dequantize(int32_t device, const ArrayArg& w, const ArrayArg& scales,
                            const ArrayArg& biases, const ArrayArg& global_scale,
                            const ArrayArg& ids, int32_t group_size, int32_t bits,
                            rust::Str mode, uint8_t out_dtype) {
  auto s = device_of(device);
  mx::array words = make(w);
  mx::array sc = make(scales);
  std::optional<mx::array> bi = optional(biases);
  if (ids.dtype != DTYPE_NONE) {
    mx::array index = make(ids);
    words = mx::take(words, index, 0, s);
    sc = mx::take(sc, index, 0, s);
    if (bi) bi = mx::take(*bi, index, 0, s);
  }
  // DTYPE_NONE: the dtype MLX picks when the call gives none (the scales'
  // dtype), as a loader's call does; widened to float32 exactly.
  std::optional<mx::Dtype> dt;
  if (out_dtype != DTYPE_NONE) dt = mx::float32;
  auto y = mx::dequantize(words, sc, bi, group_size, bits, std::string(mode),
                          optional(global_scale), dt, s);
  auto out = out_dtype == DTYPE_NONE ? mx::float32 : dtype_of(out_dtype);
  return to_vec(mx::astype(y, out, s), s);
}

Quantized quantize(int32_t device, const ArrayArg& w, const ArrayArg& global_scale,
                   int32_t group_size, int32_t bits, rust::Str mode) {
  auto s = device_of(device);
  auto parts = mx::quantize(make(w), group_size, bits, std::string(mode),
                            optional(global_scale), s);
  if (parts.size() < 2) throw std::runtime_error("quantize returned fewer than 2 arrays");
  Quantized q;
  q.words = copy_out<uint32_t>(parts[0], mx::uint32, s);
  if (parts[1].dtype() == mx::uint8) {
    q.scales_u8 = copy_out<uint8_t>(parts[1], mx::uint8, s);
  } else {
    q.scales_f32 = to_vec(parts[1], s);
  }
  if (parts.size() > 2) q.biases = to_vec(parts[2], s);
  return q;
}

rust::Vec<float> gather_qmm(int32_t device, const ArrayArg& x, const ArrayArg& w,
                            const ArrayArg& scales, const ArrayArg& biases,
                            const ArrayArg& global_scale, const ArrayArg& rhs_indices,
                            int32_t group_size, int32_t bits, rust::Str mode) {
  auto gs = optional(global_scale);
  if (gs && on_cpu(device)) {
    throw std::runtime_error(
        "unsupported on cpu: MLX runs gather_qmm with a global_scale on the GPU only");
  }
  auto s = device_of(device);
  auto y = mx::gather_qmm(make(x), make(w), make(scales), optional(biases), std::nullopt,
                          optional(rhs_indices), /*transpose=*/true, group_size, bits,
                          std::string(mode), gs, /*sorted_indices=*/false, s);
  return to_vec(y, s);
}

rust::Vec<GgufAffine> load_gguf_affine(rust::Str path, rust::Slice<const rust::String> names) {
  mx::StreamOrDevice cpu = mx::Device(mx::Device::cpu);
  auto loaded = mx::load_gguf(std::string(path), cpu);
  auto& arrays = loaded.first;
  rust::Vec<GgufAffine> out;
  for (const rust::String& n : names) {
    std::string name(n);
    GgufAffine t;
    t.name = n;
    t.found = false;
    auto w = arrays.find(name);
    // load_gguf files a quantized tensor's scales and biases under its name
    // less its last 7 characters (".weight") plus ".scales" / ".biases".
    std::string stem = name.size() >= 7 ? name.substr(0, name.size() - 7) : name;
    auto s = arrays.find(stem + ".scales");
    auto b = arrays.find(stem + ".biases");
    if (w != arrays.end() && s != arrays.end() && b != arrays.end()) {
      if (w->second.dtype() != mx::uint32 || s->second.dtype() != mx::float16 ||
          b->second.dtype() != mx::float16) {
        throw std::runtime_error("load_gguf returned " + name +
                                 " in unexpected dtypes (not uint32 words, float16 scales and biases)");
      }
      t.found = true;
      for (int d : w->second.shape()) t.shape.push_back(d);
      t.words = copy_out<uint32_t>(w->second, mx::uint32, cpu);
      t.scales = copy_out<uint16_t>(mx::view(s->second, mx::uint16, cpu), mx::uint16, cpu);
      t.biases = copy_out<uint16_t>(mx::view(b->second, mx::uint16, cpu), mx::uint16, cpu);
    }
    out.push_back(std::move(t));
  }
  return out;
}

rust::Vec<float> matmul_nt(int32_t device, const ArrayArg& x, const ArrayArg& w) {
  auto s = device_of(device);
  auto y = mx::matmul(make(x), mx::transpose(make(w), s), s);
  return to_vec(y, s);
}

}  // namespace bundlescope_mlx
