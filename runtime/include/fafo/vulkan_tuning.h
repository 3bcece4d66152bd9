// The Vulkan backend's tuning of its products (docs/vulkan.md "Tuning"), for `fafo tune`.
// Available in every build: without the Vulkan backend, or for another backend, there
// is nothing to tune.
#pragma once

#include <string>
#include <vector>

namespace fafo {

class Backend;

// Measures now the product shapes the backend's steps have run that have no kept choice
// yet, and returns one line per choice it holds ("Q4_K 4096x14336 split-rows t1 subgroup
// int8: 4 rows per workgroup (default 4), 1.00x; 1: 0.81 ms (spread 1.02) ..."). Empty for
// another backend or a Vulkan backend without tuning.
std::vector<std::string> vulkan_tune_now(Backend& backend);
// The file a Vulkan backend keeps its choices in ("" when it keeps none).
std::string vulkan_tuning_file(const Backend& backend);

}  // namespace fafo
