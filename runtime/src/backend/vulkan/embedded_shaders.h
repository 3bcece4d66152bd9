// SPIR-V modules compiled from shaders/*.comp at build time and embedded in the
// library (cmake/vulkan.cmake: fafo_add_shader, fafo_embed_shaders). One symbol
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
// The same three with GROUPED=1 (a workgroup per part, KV head and tile of rows: GPUs).
extern const EmbeddedShader attention_grouped;
extern const EmbeddedShader attention_grouped_kv_f16;
extern const EmbeddedShader attention_grouped_kv_f16_storage16;
extern const EmbeddedShader probe_half_storage;  // shaders/probe_half_storage.comp
extern const EmbeddedShader kv_store;           // shaders/kv_store.comp (fp32 cache)
extern const EmbeddedShader kv_store_f16;       // shaders/kv_store.comp (fp16 cache)
// The block caches (KV_Q8_0=1, KV_Q4_0=1; shaders/kv_blocks.glsl): store, rope_store, attention.
extern const EmbeddedShader kv_store_q8_0;
extern const EmbeddedShader kv_store_q4_0;
extern const EmbeddedShader rope_store_kv_q8_0;
extern const EmbeddedShader rope_store_kv_q4_0;
extern const EmbeddedShader attention_kv_q8_0;
extern const EmbeddedShader attention_kv_q4_0;
extern const EmbeddedShader attention_serial_kv_q8_0;
extern const EmbeddedShader attention_serial_kv_q4_0;
extern const EmbeddedShader attention_grouped_kv_q8_0;
extern const EmbeddedShader attention_grouped_kv_q4_0;
// shaders/latent_expand.comp: keys (ROPE=1) and values from an fp32 or fp16 (KV_F16=1) latent cache.
extern const EmbeddedShader latent_expand_keys;
extern const EmbeddedShader latent_expand_keys_kv_f16;
extern const EmbeddedShader latent_expand_values;
extern const EmbeddedShader latent_expand_values_kv_f16;
extern const EmbeddedShader attention_combine;  // shaders/attention_combine.comp
extern const EmbeddedShader attention_combine_q8;  // QUANT=1: the output rounded for an integer product too
extern const EmbeddedShader kv_permute;         // shaders/kv_permute.comp
extern const EmbeddedShader argmax;             // shaders/argmax.comp
extern const EmbeddedShader scatter_add;        // shaders/scatter_add.comp
extern const EmbeddedShader top_k;              // shaders/top_k.comp
extern const EmbeddedShader quantize;           // shaders/quantize.comp
extern const EmbeddedShader quantize_norm;      // shaders/quantize.comp, NORM=1
}  // namespace shaders

// The weight kernels' variants (weight_kernels.h) are declared by the table generated
// with them: backend/vulkan/weight_shader_table.h.

}  // namespace fafo::vulkan
