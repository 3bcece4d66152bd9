// SPIR-V modules compiled from shaders/*.comp at build time and embedded in the
// library (cmake/vulkan.cmake: fafo_add_shader; cmake/embed_spirv.cmake). One symbol
// per variant: a shader source compiled with a given set of #defines.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fafo::vulkan {

struct EmbeddedShader {
  const char* name;
  const uint32_t* words;  // SPIR-V, host byte order
  size_t word_count;
};

namespace shaders {
extern const EmbeddedShader rms_norm;       // shaders/rms_norm.comp
extern const EmbeddedShader matmul_f32_t1;  // shaders/matmul_f32.comp, TILE_T=1 (mat-vec)
extern const EmbeddedShader matmul_f32_t4;  // shaders/matmul_f32.comp, TILE_T=4
extern const EmbeddedShader rope;               // shaders/rope.comp
extern const EmbeddedShader rope_store;         // shaders/rope_store.comp (fp32 cache)
extern const EmbeddedShader rope_store_kv_f16;  // shaders/rope_store.comp (fp16 cache)
extern const EmbeddedShader elementwise;        // shaders/elementwise.comp (add, bias, swiglu)
extern const EmbeddedShader attention;          // shaders/attention.comp (fp32 KV cache)
extern const EmbeddedShader attention_kv_f16;   // shaders/attention.comp, KV_F16=1
extern const EmbeddedShader attention_kv_f16_storage16;  // KV_F16=1 STORAGE16=1 (16-bit storage)
// The same three with SERIAL=1 (one invocation per part, head and row: CPU devices).
extern const EmbeddedShader attention_serial;
extern const EmbeddedShader attention_serial_kv_f16;
extern const EmbeddedShader attention_serial_kv_f16_storage16;
extern const EmbeddedShader probe_half_storage;  // shaders/probe_half_storage.comp
extern const EmbeddedShader kv_store;           // shaders/kv_store.comp (fp32 cache)
extern const EmbeddedShader kv_store_f16;       // shaders/kv_store.comp (fp16 cache)
extern const EmbeddedShader attention_combine;  // shaders/attention_combine.comp
extern const EmbeddedShader kv_permute;         // shaders/kv_permute.comp
extern const EmbeddedShader argmax;             // shaders/argmax.comp
extern const EmbeddedShader top_k;              // shaders/top_k.comp
}  // namespace shaders

// The weight kernels (weight_kernels.h): shaders/matmul.comp and shaders/embed.comp, one
// variant per weight format: weight_matmul_<format>_t<tile> (split rows, tile = tokens
// per tile), weight_matmul_<format>_rows (whole rows) and weight_embed_<format>; the
// defines of each are in runtime/CMakeLists.txt.
// X(symbol part, TensorType enumerator) for every format, in one place.
#define FAFO_VULKAN_WEIGHT_FORMATS(X)                                                   \
  X(f32, F32) X(f16, F16) X(bf16, BF16) X(q8_0, Q8_0) X(q4_0, Q4_0) X(q4_1, Q4_1) \
      X(q5_0, Q5_0) X(q5_1, Q5_1) X(q2_k, Q2_K) X(q3_k, Q3_K) X(q4_k, Q4_K)         \
          X(q5_k, Q5_K) X(q6_k, Q6_K)
#define FAFO_VULKAN_DECLARE_WEIGHT_SHADERS(format, TYPE)                                  \
  extern const EmbeddedShader weight_matmul_##format##_t1, weight_matmul_##format##_t2,   \
      weight_matmul_##format##_t4, weight_matmul_##format##_t8, weight_matmul_##format##_t16, \
      weight_matmul_##format##_t32, weight_matmul_##format##_rows, weight_embed_##format;
namespace shaders {
FAFO_VULKAN_WEIGHT_FORMATS(FAFO_VULKAN_DECLARE_WEIGHT_SHADERS)
}  // namespace shaders

}  // namespace fafo::vulkan
