#include "backend/vulkan/step_encoder.h"

#include <algorithm>
#include <stdexcept>

#include "backend/vulkan/command_sequence.h"
#include "backend/vulkan/context.h"
#include "backend/vulkan/descriptor_cache.h"
#include "backend/vulkan/rope_tables.h"

namespace fafo::vulkan {

StepEncoder::StepEncoder(const Context& context, DescriptorCache& descriptors)
    : context_(context), descriptors_(descriptors), replay_(context) {}

void StepEncoder::set_replay(bool on) {
  replay_on_ = on;
  if (!on) replay_.clear();
}

StepEncoder::~StepEncoder() = default;

void StepEncoder::reserve(int32_t capacity) {
  const uint64_t T = static_cast<uint64_t>(StepBatch::kMaxTokens);
  const uint64_t mask_words = (T + 31) / 32;
  step_info_.ensure(context_, descriptors_,
                    (kHeaderWords + T + T * mask_words + static_cast<uint64_t>(capacity)) * sizeof(uint32_t));
  tokens_.ensure(context_, descriptors_, T * sizeof(int32_t));
}

void StepEncoder::begin(const StepBatch& batch, const std::vector<int32_t>* order) {
  batch_ = &batch;
  gathered_rows_.clear();
  rope_key_.reset();
  const uint32_t T = static_cast<uint32_t>(batch.size());
  mask_words_ = (T + 31) / 32;
  // step_info: [header][T prefix flags][T x mask_words masks][n_past logical order]
  std::vector<uint32_t> info(kHeaderWords + T + static_cast<size_t>(T) * mask_words_, 0);
  info[0] = static_cast<uint32_t>(batch.n_past());
  part_keys_ = n_parts_ = 0;
  uint32_t* flags = info.data() + kHeaderWords;
  uint32_t* masks = flags + T;
  for (uint32_t i = 0; i < T; ++i) {
    flags[i] = batch.prefix(static_cast<int32_t>(i)) == PrefixView::Compressed ? 1u : 0u;
    for (uint32_t j = 0; j <= i; ++j)
      if (batch.sees(static_cast<int32_t>(i), static_cast<int32_t>(j))) masks[i * mask_words_ + j / 32] |= 1u << (j % 32);
  }
  step_info_.get().upload(info.data(), info.size() * sizeof(uint32_t));
  use_order_ = order != nullptr && batch.n_past() > 0;
  if (use_order_) {
    if (static_cast<int32_t>(order->size()) < batch.n_past())
      throw std::invalid_argument("the KV cache's logical order is shorter than n_past");
    step_info_.get().upload(order->data(), static_cast<size_t>(batch.n_past()) * sizeof(int32_t),
                            info.size() * sizeof(uint32_t));
  }
  tokens_.get().upload(batch.tokens().data(), batch.tokens().size() * sizeof(int32_t));
  seq_ = std::make_unique<CommandSequence>(context_, descriptors_);
  seq_->set_profiler(profiler_);
}

void StepEncoder::set_split(uint32_t part_keys, uint32_t n_parts) {
  if (part_keys_ == part_keys && n_parts_ == n_parts) return;
  if (part_keys_ != 0) throw std::logic_error("attention: one split of the keys per step");
  const uint32_t words[2] = {part_keys, n_parts};
  step_info_.get().upload(words, sizeof words, sizeof(uint32_t));
  part_keys_ = part_keys;
  n_parts_ = n_parts;
}

void StepEncoder::finish(std::chrono::milliseconds timeout) {
  if (!seq_) throw std::logic_error("finish_step without begin_step");
  std::unique_ptr<CommandSequence> seq = std::move(seq_);
  const bool replayed =
      replay_on_ ? seq->submit_and_wait(replay_, descriptors_.generation(), timeout) : (seq->submit_and_wait(timeout), false);
  ++steps_;
  replayed_ += replayed ? 1 : 0;
  gathered_rows_.clear();
}

void StepEncoder::abandon() { seq_.reset(); }

CommandSequence& StepEncoder::commands() {
  if (!seq_) throw std::logic_error("a kernel was issued outside begin_step/finish_step");
  return *seq_;
}

const StepBatch& StepEncoder::batch() const {
  if (!batch_) throw std::logic_error("the step batch was used before the first begin_step");
  return *batch_;
}

uint32_t StepEncoder::rows_of(const Activation& a) const {
  auto it = gathered_rows_.find(a.id);
  return it != gathered_rows_.end() ? it->second : static_cast<uint32_t>(batch_->size());
}

void StepEncoder::set_rows(const Activation& out, uint32_t rows) {
  if (rows != static_cast<uint32_t>(batch_->size())) gathered_rows_[out.id] = rows;
}

const Buffer& StepEncoder::rope_table(const RopeParams& p) {
  const auto key = std::make_tuple(p.n_dims, p.freq_base, p.freq_scale, p.freq_factors);
  if (rope_key_) {
    if (*rope_key_ != key) throw std::logic_error("rope: one RoPE configuration per step");
    return rope_table_.get();
  }
  const int32_t half = p.n_dims / 2;
  const std::vector<float> table = rope_cos_sin(p, batch_->positions());
  const size_t need = std::max<size_t>(1, static_cast<size_t>(StepBatch::kMaxTokens) * static_cast<size_t>(half) * 2);
  Buffer& table_buffer = rope_table_.ensure(context_, descriptors_, need * sizeof(float));
  if (!table.empty()) table_buffer.upload(table.data(), table.size() * sizeof(float));
  rope_key_ = key;
  return table_buffer;
}

}  // namespace fafo::vulkan
