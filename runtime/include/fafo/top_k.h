// The k best logits of each row: what a sampling step reads back from the backend
// instead of whole rows of n_vocab logits (Backend::top_k_rows, Sequence::forward_top_k).
// Order: larger logit first; equal logits (-0.0 equals +0.0) by lower token id first,
// the order Sampler sorts candidates in, so sampling from a row's top k draws exactly
// what sampling from the whole row draws whenever top-k sampling keeps at most k.
#pragma once

#include <cstdint>
#include <vector>

namespace fafo {

// The largest k a backend computes on the device (the Vulkan kernel keeps the k
// candidates of a row in 8 KiB of shared memory). Larger k read whole rows.
inline constexpr int32_t kMaxTopK = 1024;

struct TopK {
  int32_t k = 0;                 // candidates per row
  std::vector<int32_t> ids;      // rows x k, best first
  std::vector<float> values;     // rows x k, the logits of ids (bit for bit)
  std::vector<uint8_t> has_nan;  // per row: 1 if the row holds a NaN (its ids/values are then unspecified)

  int64_t rows() const { return static_cast<int64_t>(has_nan.size()); }
  const int32_t* row_ids(int64_t r) const { return ids.data() + r * k; }
  const float* row_values(int64_t r) const { return values.data() + r * k; }
};

// The k best of x[0..n) into ids[0..k) and values[0..k) (k <= n). Returns false, leaving
// the outputs unspecified, when x holds a NaN. The host reference for every backend.
bool top_k_row(const float* x, int32_t n, int32_t k, int32_t* ids, float* values);

}  // namespace fafo
