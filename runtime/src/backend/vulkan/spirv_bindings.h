// What a compute shader may write: read from its SPIR-V, so that a CommandSequence puts
// barriers only between commands that depend on each other.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace fafo::vulkan {

// For bindings 0..n_buffers-1 of descriptor set 0: whether the shader may write the
// buffer bound there. A binding is read-only when its variable, or every member of its
// block, is decorated NonWritable (GLSL `readonly`), or when the shader does not
// declare it at all; anything the parser does not understand counts as written.
std::vector<bool> spirv_written_bindings(const uint32_t* words, size_t word_count, uint32_t n_buffers);

}  // namespace fafo::vulkan
