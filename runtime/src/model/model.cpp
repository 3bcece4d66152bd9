// One sequence over shared ModelWeights: its KV cache, the committed context, the KV
// policy's region, and the steps run over them (the forward pass itself is
// ModelWeights::record_step, in model_weights.cpp). Every use of the backend holds the
// weights' step lock, so sequences sharing weights may run on different threads.
#include <algorithm>
#include <mutex>
#include <stdexcept>

#include "fafo/model.h"

namespace fafo {

namespace {

using StepLock = std::lock_guard<std::recursive_mutex>;

int32_t context_length(const ModelConfig& c, const ModelOptions& options) {
  return options.n_ctx > 0 ? options.n_ctx : std::min(c.n_ctx_train, 4096);
}

}  // namespace

Model::Model(std::shared_ptr<const GgufFile> file, std::unique_ptr<Backend> backend, const ModelOptions& options)
    : Model(std::make_shared<ModelWeights>(std::move(file), std::move(backend)), options) {}

Model::Model(std::shared_ptr<ModelWeights> weights, const ModelOptions& options) : weights_(std::move(weights)) {
  if (!weights_) throw std::invalid_argument("Model: no weights");
  n_ctx_ = context_length(weights_->config(), options);
  StepLock lock(weights_->step_mutex());
  kv_ = weights_->backend().create_kv_cache(weights_->kv_cache_shape(n_ctx_, options.kv_type));
}

Model::~Model() {
  StepLock lock(weights_->step_mutex());
  kv_.reset();
}

void Model::finish_step() {
  backend().finish_step();
  file().check_intact();  // a step that read a shrunk file's zeros is not used
}

std::vector<float> Model::forward(StepBatch& batch) {
  StepLock lock(weights_->step_mutex());
  record_step(batch);
  finish_step();
  last_step_size_ = batch.size();
  return backend().read_rows(weights_->logits(), static_cast<int64_t>(batch.logit_rows().size()));
}

std::vector<int32_t> Model::forward_argmax(StepBatch& batch) {
  StepLock lock(weights_->step_mutex());
  record_step(batch);
  backend().argmax_rows(weights_->logits());
  finish_step();
  last_step_size_ = batch.size();
  std::vector<int32_t> ids = backend().read_argmax(static_cast<int64_t>(batch.logit_rows().size()));
  for (int32_t id : ids) {
    if (id == -1) throw std::runtime_error("the model produced non-finite logits (NaN): the weights or the computation are broken");
    if (id < 0) throw std::runtime_error("every logit is -inf: the model rules out every token");
  }
  return ids;
}

TopK Model::forward_top_k(StepBatch& batch, int32_t k) {
  if (k < 1 || k > kMaxTopK)
    throw std::invalid_argument("forward_top_k: k = " + std::to_string(k) + " is outside [1, " + std::to_string(kMaxTopK) + "]");
  k = std::min(k, config().n_vocab);
  StepLock lock(weights_->step_mutex());
  record_step(batch);
  backend().top_k_rows(weights_->logits(), k);
  finish_step();
  last_step_size_ = batch.size();
  TopK top = backend().read_top_k(static_cast<int64_t>(batch.logit_rows().size()));
  for (uint8_t nan : top.has_nan)
    if (nan) throw std::runtime_error("the model produced non-finite logits (NaN): the weights or the computation are broken");
  return top;
}

void Model::record_step(StepBatch& batch) {
  if (batch.size() == 0) throw std::invalid_argument("forward: empty batch");
  file().check_intact();  // a file that changed is never read again
  if (batch.size() > kMaxStepTokens)
    throw std::invalid_argument("forward: " + std::to_string(batch.size()) + " tokens in one step (at most " +
                                std::to_string(kMaxStepTokens) + ")");
  if (n_past_ + batch.size() > n_ctx_)
    throw std::length_error("the context is full: " + std::to_string(n_past_) + " + " + std::to_string(batch.size()) +
                            " tokens exceed the context length " + std::to_string(n_ctx_));
  if (static_cast<int64_t>(batch.logit_rows().size()) > max_logit_rows())
    throw std::invalid_argument("forward: " + std::to_string(batch.logit_rows().size()) +
                                " rows want logits in one step, but the device holds at most " +
                                std::to_string(max_logit_rows()) + " rows of " + std::to_string(config().n_vocab) +
                                " logits");
  batch.set_n_past(n_past_);
  last_positions_ = batch.positions();
  if (drop_ && prompt_end_ > 0) batch.compress_all();
  kv_->set_captured_rows(policy_ ? policy_->wanted_query_rows(batch.size()) : std::vector<int32_t>{});
  weights_->record_step(batch, *kv_, tap_);
}

void Model::commit(int32_t n) {
  if (n < 0 || n > last_step_size_) throw std::invalid_argument("commit: more tokens than the last step had");
  for (int32_t i = 0; i < n; ++i) check_committed_position(i, i);
  StepLock lock(weights_->step_mutex());
  n_past_ += n;
  last_step_size_ = 0;
  kv_->append(n);
  after_commit();
}

// Lets a policy look at committed keys (by logical index) and the captured queries.
class Model::Inspector final : public KvInspector {
 public:
  explicit Inspector(Model& m) : m_(m) {}
  int32_t n_layer() const override { return m_.config().n_layer; }
  int32_t n_head() const override { return m_.config().n_head; }
  int32_t n_head_kv() const override { return m_.config().n_head_kv; }
  int32_t head_dim() const override { return m_.config().head_dim; }
  std::vector<float> keys(int32_t layer, int32_t first, int32_t count) const override {
    return m_.committed_keys(layer, first, count);
  }
  std::vector<float> captured_queries(int32_t layer) const override {
    StepLock lock(m_.weights_->step_mutex());
    return m_.kv_->captured_queries(layer);
  }

 private:
  Model& m_;
};

void Model::after_commit() {
  ++steps_;
  if (!policy_) return;
  Inspector inspector(*this);
  const KvPolicyEvent event{KvPolicyEvent::Committed, n_past_, prompt_end_, steps_};
  if (auto chosen = policy_->choose(event, inspector)) kv_->select(*chosen);
}

void Model::end_prefill() {
  StepLock lock(weights_->step_mutex());
  prompt_end_ = n_past_;
  if (!policy_) return;
  Inspector inspector(*this);
  const KvPolicyEvent event{KvPolicyEvent::Prefilled, n_past_, prompt_end_, steps_};
  if (auto chosen = policy_->choose(event, inspector)) kv_->select(*chosen);
}

std::unique_ptr<KvInspector> Model::inspector() { return std::make_unique<Inspector>(*this); }

void Model::set_kv_policy(std::unique_ptr<KvPolicy> policy, bool drop) {
  StepLock lock(weights_->step_mutex());
  policy_ = std::move(policy);
  drop_ = drop && policy_;
  kv_->reset_layout(policy_ ? policy_->budget() : 0, policy_ ? policy_->dense_layers() : 0, n_past_);
  if (policy_ && n_past_ > 0) end_prefill();
}

std::vector<float> Model::committed_keys(int32_t layer, int32_t first, int32_t count) {
  if (layer < 0 || layer >= config().n_layer || first < 0 || count < 0 || first + count > n_past_)
    throw std::out_of_range("committed_keys: outside the committed context");
  std::vector<int32_t> slots;
  for (int32_t l = first; l < first + count; ++l) slots.push_back(kv_->layout().physical_of(l));
  StepLock lock(weights_->step_mutex());
  std::vector<float> stored = kv_->read_keys(layer, slots);
  if (!config().mla()) return stored;
  return weights_->recover_keys(layer, stored, first, count);
}

void Model::check_committed_position(int32_t row, int32_t k) const {
  // An MLA model's cache holds no positions: a committed entry's is its logical index.
  if (config().mla() && (row >= static_cast<int32_t>(last_positions_.size()) ||
                         last_positions_[static_cast<size_t>(row)] != n_past_ + k))
    throw std::logic_error("an MLA model commits a step's token only at the position that continues the context: row " +
                           std::to_string(row) + " is at position " +
                           (row < static_cast<int32_t>(last_positions_.size())
                                ? std::to_string(last_positions_[static_cast<size_t>(row)])
                                : std::string("(none)")) +
                           ", committed as entry " + std::to_string(n_past_ + k));
}

void Model::set_attention_input_tap(AttentionInputTap tap) {
  if (tap)
    if (const std::string why = weights_->why_no_attention_input_tap(); !why.empty()) throw std::invalid_argument(why);
  tap_ = std::move(tap);
}

void Model::commit_rows(const std::vector<int32_t>& rows) {
  std::vector<std::pair<int32_t, int32_t>> moves;
  for (size_t k = 0; k < rows.size(); ++k) {
    const int32_t row = rows[k];
    if (row < 0 || row >= last_step_size_) throw std::invalid_argument("commit_rows: row outside the last step");
    if (k > 0 && row <= rows[k - 1]) throw std::invalid_argument("commit_rows: rows must be increasing");
    check_committed_position(row, static_cast<int32_t>(k));
    if (row != static_cast<int32_t>(k)) moves.emplace_back(n_past_ + row, n_past_ + static_cast<int32_t>(k));
  }
  StepLock lock(weights_->step_mutex());
  if (!moves.empty()) kv_->move_slots(moves);
  n_past_ += static_cast<int32_t>(rows.size());
  last_step_size_ = 0;
  kv_->append(static_cast<int32_t>(rows.size()));
  after_commit();
}

void Model::truncate(int32_t n) {
  if (n < 0 || n > n_past_) throw std::invalid_argument("truncate: beyond the committed context");
  StepLock lock(weights_->step_mutex());
  kv_->truncate(n);
  n_past_ = n;
  if (prompt_end_ > n) prompt_end_ = n;
  if (n == 0) steps_ = 0;
}

}  // namespace fafo
