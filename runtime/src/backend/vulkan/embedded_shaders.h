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
}  // namespace shaders

}  // namespace fafo::vulkan
