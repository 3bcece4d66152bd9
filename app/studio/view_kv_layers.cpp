// kv_layers_view(): the KV cache per layer after a step.
#include <algorithm>
#include <unordered_set>

#include "view_models.h"

namespace fafo::studio {

KvLayersView kv_layers_view(const StepTrace& t, const StepTrace* previous, int32_t max_blocks) {
  const KvMapView map = kv_map_view(t, previous);
  KvLayersView v;
  v.step = t.step;
  v.context = map.context;
  v.layers = t.kv_layers;
  v.dense_layers = std::clamp(t.kv_dense_layers, 0, std::max(t.kv_layers, 0));
  v.kv_type = t.kv_type;
  v.bytes_per_token = t.kv_bytes_per_token;
  v.has_region = !t.kv_region.empty();
  v.swaps = t.kv_swaps;

  const int32_t extent = static_cast<int32_t>(map.in_region.size());
  max_blocks = std::max(max_blocks, 1);
  v.block = std::max<int32_t>(1, (extent + max_blocks - 1) / max_blocks);
  std::vector<uint8_t> entered(map.in_region.size(), 0);
  for (int32_t e : map.entered)
    if (e >= 0 && e < extent) entered[static_cast<size_t>(e)] = 1;
  for (int32_t first = 0; first < extent; first += v.block) {
    KvBlock b;
    b.first = first;
    b.count = std::min(v.block, extent - first);
    for (int32_t e = first; e < first + b.count; ++e) {
      b.in_region += map.in_region[static_cast<size_t>(e)];
      b.entered += entered[static_cast<size_t>(e)];
    }
    v.blocks.push_back(b);
  }

  // What the fumble rows of a (non-dense) layer read, block by block.
  std::vector<KvCell> shared;
  for (const KvBlock& b : v.blocks)
    shared.push_back(!v.has_region   ? KvCell::Dense
                     : b.entered     ? KvCell::Entered
                     : b.in_region   ? KvCell::Region
                                     : KvCell::Rest);
  const int32_t n_rows = std::max(v.layers, 1);
  for (int32_t l = 0; l < n_rows; ++l) {
    KvLayerRow row;
    row.layer = l;
    row.dense = v.layers > 0 && l < v.dense_layers;
    row.cells = shared;
    if (row.dense)
      for (KvCell& c : row.cells) c = KvCell::Dense;
    // A window layer: the blocks wholly before the window of the step's last position.
    row.window = v.layers > 0 && static_cast<size_t>(l) < t.kv_windows.size() ? t.kv_windows[static_cast<size_t>(l)] : 0;
    row.ring = v.layers > 0 && static_cast<size_t>(l) < t.kv_rings.size() ? t.kv_rings[static_cast<size_t>(l)] : 0;
    if (row.window > 0)
      for (size_t b = 0; b < v.blocks.size(); ++b)
        if (v.blocks[b].first + v.blocks[b].count <= v.context - row.window) row.cells[b] = KvCell::OutsideWindow;
    v.rows.push_back(std::move(row));
  }

  v.slots = t.kv_region;
  std::unordered_set<int32_t> before;
  if (previous) before.insert(previous->kv_region.begin(), previous->kv_region.end());
  for (int32_t e : t.kv_region) v.slot_swapped.push_back(before.count(e) ? 0 : 1);
  return v;
}

}  // namespace fafo::studio
