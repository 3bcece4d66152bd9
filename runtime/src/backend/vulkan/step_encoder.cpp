#include "backend/vulkan/step_encoder.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "backend/vulkan/command_sequence.h"
#include "backend/vulkan/context.h"
#include "backend/vulkan/descriptor_cache.h"
#include "backend/vulkan/rope_tables.h"

namespace fafo::vulkan {

StepEncoder::StepEncoder(const Context& context, DescriptorCache& descriptors)
    : context_(context), descriptors_(descriptors), rope_tables_(kMaxRopeTables), replay_(context) {}

void StepEncoder::set_replay(bool on) {
  replay_on_ = on;
  if (!on) replay_.clear();
}

StepEncoder::~StepEncoder() = default;

void StepEncoder::reserve(int32_t capacity) {
  capacity_ = std::max(capacity_, capacity);
  const uint64_t T = static_cast<uint64_t>(StepBatch::kMaxTokens);
  const uint64_t mask_words = (T + 31) / 32;
  // Header, flags, masks, positions, the region's entries and the order (both at most
  // the capacity).
  info_bytes_ = std::max<uint64_t>(
      info_bytes_, (kHeaderWords + 2 * T + T * mask_words + 2 * static_cast<uint64_t>(capacity)) * sizeof(uint32_t));
  if (parts_.empty()) parts_.resize(1);
  for (Part& part : parts_) part.info.ensure(context_, descriptors_, info_bytes_);
  tokens_.ensure(context_, descriptors_, T * sizeof(int32_t));
}

const StepEncoder::Part& StepEncoder::part_at(int32_t part) const {
  if (part < 0 || static_cast<size_t>(part) >= std::max<size_t>(in_use_, 1) || static_cast<size_t>(part) >= parts_.size())
    throw std::out_of_range("step_info: the step has no part " + std::to_string(part));
  return parts_[static_cast<size_t>(part)];
}

void StepEncoder::begin(const StepBatch& batch, std::span<const KvLayout* const> layouts) {
  const int32_t n_parts = batch.n_segments();
  if (static_cast<int32_t>(layouts.size()) != n_parts)
    throw std::invalid_argument("begin_step: " + std::to_string(layouts.size()) + " KV caches for a step of " +
                                std::to_string(n_parts) + " sequences");
  if (n_parts > kMaxParts)
    throw std::invalid_argument("a Vulkan step joins at most " + std::to_string(kMaxParts) + " sequences, not " +
                                std::to_string(n_parts));
  batch_ = &batch;
  gathered_rows_.clear();
  for (RopeTable& table : rope_tables_) table.key.reset();
  if (parts_.size() < static_cast<size_t>(n_parts)) {
    parts_.resize(static_cast<size_t>(n_parts));
    for (Part& part : parts_) part.info.ensure(context_, descriptors_, info_bytes_);
  }
  in_use_ = static_cast<size_t>(n_parts);
  for (int32_t s = 0; s < n_parts; ++s) {
    const StepSegment seg = batch.segment(s);
    Part& part = parts_[static_cast<size_t>(s)];
    const uint32_t T = static_cast<uint32_t>(seg.size);
    part.rows = T;
    part.mask_words = (T + 31) / 32;
    part.part_keys = part.n_parts = 0;
    const KvLayout* layout = layouts[static_cast<size_t>(s)];
    part.region_words = layout ? static_cast<uint32_t>(std::clamp(layout->region_size(), 0, capacity_)) : 0u;
    // step_info: [header][T prefix flags][T x mask_words masks][T positions][region
    // entries][n_past logical order], the part's rows counted from its first.
    std::vector<uint32_t> info(kHeaderWords + 2 * T + static_cast<size_t>(T) * part.mask_words + part.region_words, 0);
    info[0] = static_cast<uint32_t>(seg.n_past);
    info[3] = static_cast<uint32_t>(seg.first);
    uint32_t* flags = info.data() + kHeaderWords;
    uint32_t* masks = flags + T;
    uint32_t* positions = masks + static_cast<size_t>(T) * part.mask_words;
    uint32_t* region = positions + T;
    for (uint32_t i = 0; i < T; ++i) {
      const int32_t row = seg.first + static_cast<int32_t>(i);
      flags[i] = batch.prefix(row) == PrefixView::Compressed ? 1u : 0u;
      positions[i] = static_cast<uint32_t>(batch.positions()[static_cast<size_t>(row)]);
      for (uint32_t j = 0; j <= i; ++j)
        if (batch.sees(row, seg.first + static_cast<int32_t>(j))) masks[i * part.mask_words + j / 32] |= 1u << (j % 32);
    }
    // A region slot's position is the logical index of the entry it holds.
    const int32_t in_region = layout ? std::min<int32_t>(layout->region_count(), static_cast<int32_t>(part.region_words)) : 0;
    for (int32_t k = 0; k < in_region; ++k) region[k] = static_cast<uint32_t>(layout->logical_of(k));
    if (info.size() * sizeof(uint32_t) + static_cast<uint64_t>(seg.n_past) * sizeof(uint32_t) > info_bytes_)
      throw std::logic_error("begin_step: the step inputs were not sized for this step (StepEncoder::reserve)");
    Buffer& buffer = part.info.get();
    buffer.upload(info.data(), info.size() * sizeof(uint32_t));
    const std::vector<int32_t>* order = layout && !layout->is_identity() ? &layout->full_order() : nullptr;
    part.use_order = order != nullptr && seg.n_past > 0;
    if (part.use_order) {
      if (static_cast<int32_t>(order->size()) < seg.n_past)
        throw std::invalid_argument("the KV cache's logical order is shorter than n_past");
      buffer.upload(order->data(), static_cast<size_t>(seg.n_past) * sizeof(int32_t), info.size() * sizeof(uint32_t));
    }
  }
  tokens_.get().upload(batch.tokens().data(), batch.tokens().size() * sizeof(int32_t));
  seq_ = std::make_unique<CommandSequence>(context_, descriptors_);
  seq_->set_profiler(profiler_);
}

void StepEncoder::set_split(int32_t part_index, uint32_t part_keys, uint32_t n_parts) {
  part_at(part_index);  // throws for a part the step does not have
  Part& part = parts_[static_cast<size_t>(part_index)];
  if (part.part_keys == part_keys && part.n_parts == n_parts) return;
  if (part.part_keys != 0) throw std::logic_error("attention: one split of the keys per step");
  const uint32_t words[2] = {part_keys, n_parts};
  part.info.get().upload(words, sizeof words, sizeof(uint32_t));
  part.part_keys = part_keys;
  part.n_parts = n_parts;
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

void StepEncoder::flush(std::chrono::milliseconds timeout) {
  if (!seq_) throw std::logic_error("sync_step without begin_step");
  std::unique_ptr<CommandSequence> seq = std::move(seq_);
  // Not through the replay cache: a mixture-of-experts step is one part per layer, more
  // than the cache keeps, so none would be replayed. steps() counts whole steps.
  seq->mark_part_of_step();
  seq->submit_and_wait(timeout);
  seq_ = std::make_unique<CommandSequence>(context_, descriptors_);
  seq_->set_profiler(profiler_);
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
  if (rows != static_cast<uint32_t>(batch_->size()))
    gathered_rows_[out.id] = rows;
  else
    gathered_rows_.erase(out.id);  // a buffer a gather shortened earlier in the step holds the batch's rows again
}

const Buffer& StepEncoder::rope_table(const RopeParams& p) {
  RopeKey key = std::make_tuple(p.n_dims, p.freq_base, p.freq_scale, p.freq_factors, p.attn_factor);
  RopeTable* free_table = nullptr;
  for (RopeTable& table : rope_tables_) {
    if (table.key && *table.key == key) return table.buffer.get();
    if (!table.key && !free_table) free_table = &table;
  }
  if (!free_table)
    throw std::logic_error("rope: more than " + std::to_string(kMaxRopeTables) + " RoPE configurations in one step");
  const int32_t half = p.n_dims / 2;
  const std::vector<float> table = rope_cos_sin(p, batch_->positions());
  const size_t need = std::max<size_t>(1, static_cast<size_t>(StepBatch::kMaxTokens) * static_cast<size_t>(half) * 2);
  Buffer& table_buffer = free_table->buffer.ensure(context_, descriptors_, need * sizeof(float));
  if (!table.empty()) table_buffer.upload(table.data(), table.size() * sizeof(float));
  free_table->key = std::move(key);
  return table_buffer;
}

}  // namespace fafo::vulkan
