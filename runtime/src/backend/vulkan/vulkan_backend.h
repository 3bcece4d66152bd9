// The Vulkan backend: the whole forward pass as compute shaders on one Vulkan device.
//
// Memory: weights are uploaded once (through staging when device memory is not
// host-visible); a weight larger than maxStorageBufferRange is split by rows into
// several buffers that the kernels visit one after another. Vectors (norm gains,
// biases) are stored as F32. Activations and the KV cache (backend/vulkan/
// vulkan_kv_cache.h: f32 or f16, one K and one V buffer per layer) live in device
// memory. Everything allocated is counted against the device's memory heap
// (backend/vulkan/allocator.h), so a model that does not fit fails at load time with
// the sizes in the message; buffers are placed in a few large blocks of device memory
// (backend/vulkan/memory_pool.h). An MLA model's cache holds latents of per-layer
// widths; latent_attention recovers a layer's keys (RoPE after the up-projection) and
// values into fp32 buffers of the cache (shaders/latent_expand.comp) and runs the same
// attention kernel over them.
//
// A step (backend/vulkan/step_encoder.h): begin_step() writes the step's tokens, masks
// and KV view into small host-visible buffers; every kernel call records into one
// command buffer; finish_step() submits it once and waits. Pipelines are created when
// the backend is, and the weight kernels' for a model's formats before its weights are
// uploaded (Backend::prepare_weights), each a wait reported to fafo/progress.h;
// descriptor sets are created the first time a (pipeline, buffers) combination is
// used and reused by every later step.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "backend/vulkan/context.h"
#include "backend/vulkan/kernels.h"
#include "backend/vulkan/weight_kernels.h"
#include "fafo/backend.h"

namespace fafo::vulkan {

struct VulkanBackendOptions {
  // "" = the best device (discrete, then integrated, then any); a number = that index
  // in `fafo devices` order; otherwise a case-insensitive part of the device name.
  std::string device;
  // Enable the Khronos validation layer (also with FAFO_VULKAN_VALIDATION=1 in the
  // environment); its messages go to validation_log.
  bool validation = false;
  std::shared_ptr<ValidationLog> validation_log;
  // The largest buffer the backend makes; 0 = the device's maxStorageBufferRange. A
  // smaller value behaves as a device with that range would (tests: row splitting and
  // the logit-row cap on small models).
  uint64_t max_buffer_bytes = 0;
  // Optional features to use, as FAFO_VULKAN_FEATURES words; nullopt = that variable, or all.
  std::optional<std::string> features;
  // Fuse the attention projections, RoPE and the KV store (BackendFusions::fuses_qkv); off:
  // the separate kernels, which give the same bits (tests compare the two).
  bool fuse_qkv = true;
  // Fuse each RMSNorm into the product that reads it (BackendFusions::matmul_norm and
  // matmul_swiglu_norm) in steps of up to 8 tokens; off: the two kernels, the same bits.
  // nullopt: FAFO_VULKAN_FUSE_NORM (0 or 1) where set, else on GPUs and off on CPU devices.
  std::optional<bool> fuse_norm;
  // Submit a step whose commands equal an earlier step's from that step's command
  // buffer instead of recording it again (StepEncoder); off: record every step.
  bool replay = true;
  // Integer products for weights in every block format but Q2_K and the codebook ones:
  // the activations rounded to 8 bits (Kernels::quantize_rows) and multiplied as the CUDA backend does, bit for bit
  // where the device fuses multiply-adds (within BackendNumerics::rounded_matmul_tolerance
  // of the reference). nullopt: FAFO_VULKAN_INT8 (0 or 1) where set, else on GPUs and off
  // on CPU devices.
  std::optional<bool> int8_products;
  // Integer products of steps over 8 tokens in matrix tiles (shaders/matmul_tiles.comp:
  // the same bits): Auto with the cooperative-matrix instructions where the device has
  // them, Off, or Loops (their plain-loop form on any device: tests). nullopt:
  // FAFO_VULKAN_TILES (0 = Off, 1 = Auto, loops = Loops) where set, else Auto.
  std::optional<MatrixTilesUse> matrix_tiles;
  // How attention spreads over invocations (Kernels::AttentionArgs::Mapping; every one
  // gives the same bits). nullopt: FAFO_VULKAN_ATTENTION (workgroup, serial or grouped)
  // where set, else the device's default (serial on CPU devices; on GPUs grouped for steps
  // of several rows, workgroup for one).
  std::optional<Kernels::AttentionArgs::Mapping> attention;
  // Tune the products' rows per workgroup for this device (backend/vulkan/
  // matmul_tuning.h): each product shape the kept choices lack is measured at the end of
  // the step that first ran it (with a progress line), and the choice kept in the cache
  // folder. nullopt: FAFO_VULKAN_TUNE (0 = off, 1 = on, again = measure every shape again)
  // where set, else on GPUs and off on CPU devices.
  std::optional<bool> tune;
  bool tune_again = false;  // with tune: as FAFO_VULKAN_TUNE=again
  // Where the choices are kept: "" = default_cache_dir(), "off" = not kept (measured
  // again in every process).
  std::string tuning_dir;
};

std::unique_ptr<Backend> make_backend(const VulkanBackendOptions& options);

// Steps a Vulkan backend has finished, and how many of them it replayed; {0, 0} for
// another backend.
struct ReplayCounts {
  uint64_t steps = 0, replayed = 0;
};
ReplayCounts replay_counts(const Backend& backend);

// Its tuning (fafo/vulkan_tuning.h's vulkan_tune_now and vulkan_tuning_file): the
// products tuned now, and the tuning file; nothing and "" for another backend.
std::vector<std::string> tune_now(Backend& backend);
std::string tuning_file(const Backend& backend);

// Resolves a --device string to an index in enumeration order; throws
// std::runtime_error listing the devices when nothing matches (vulkan_registration.cpp).
int resolve_device(const std::string& device);

}  // namespace fafo::vulkan
