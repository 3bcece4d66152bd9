// One sequence over a shared StepRunner: its KV cache, the committed context, the KV
// policy's region, and the steps run over them (the forward pass itself is
// StepRunner::record_step, in step_runner.cpp). Every use of the backend holds the
// runner's step lock, so sequences sharing weights may run on different threads.
#include <algorithm>
#include <cstddef>
#include <mutex>
#include <stdexcept>

#include "fafo/sequence.h"
#include "fafo/step_joiner.h"

namespace fafo {

namespace {

using StepLock = std::lock_guard<std::recursive_mutex>;

// -c, else the trained context up to 4096.
int32_t context_length(const ModelConfig& c, const SequenceOptions& options) {
  if (options.n_ctx > 0) return options.n_ctx;
  return std::min(c.n_ctx_train, 4096);
}

}  // namespace

Sequence::Sequence(std::shared_ptr<const GgufFile> file, std::unique_ptr<Backend> backend, const SequenceOptions& options)
    : Sequence(std::make_shared<StepRunner>(std::move(file), std::move(backend)), options) {}

Sequence::Sequence(std::shared_ptr<StepRunner> runner, const SequenceOptions& options) : runner_(std::move(runner)) {
  if (!runner_) throw std::invalid_argument("Sequence: no step runner");
  n_ctx_ = context_length(runner_->config(), options);
  ring_step_ = std::max(options.ring_step, 0);
  StepLock lock(runner_->step_mutex());
  const ModelWeights& w = runner_->weights();
  for (int32_t d = 0; d < w.n_devices(); ++d)  // each device holds its layers' part of the cache
    kvs_.push_back(w.backend(d).create_kv_cache(w.kv_cache_shape(n_ctx_, options.kv_type, d, options.ring_step)));
  runner_->use_context(n_ctx_);  // last: a sequence that fails to open holds no RoPE factors
}

Sequence::~Sequence() {
  StepLock lock(runner_->step_mutex());
  runner_->release_context(n_ctx_);
  kvs_.clear();
}

std::vector<float> Sequence::forward(StepBatch& batch) {
  StepRequest request{&batch, StepWant::Logits};
  run(request);
  return std::move(request.logits);
}

std::vector<int32_t> Sequence::forward_argmax(StepBatch& batch) {
  StepRequest request{&batch, StepWant::Argmax};
  run(request);
  return std::move(request.ids);
}

TopK Sequence::forward_top_k(StepBatch& batch, int32_t k) {
  StepRequest request{&batch, StepWant::TopK, k};
  run(request);
  return std::move(request.top);
}

void Sequence::run(StepRequest& request) {
  if (joiner_ && joins_steps())
    joiner_->run(*this, request);
  else
    forward_joined({{this, &request}});
  if (request.error) std::rethrow_exception(request.error);
}

void Sequence::prepare_step(StepRequest& request) {
  StepBatch& batch = *request.batch;
  if (request.want == StepWant::TopK) {
    if (request.k < 1 || request.k > kMaxTopK)
      throw std::invalid_argument("forward_top_k: k = " + std::to_string(request.k) + " is outside [1, " +
                                  std::to_string(kMaxTopK) + "]");
    request.k = std::min(request.k, config().n_vocab);
  }
  if (batch.size() == 0) throw std::invalid_argument("forward: empty batch");
  if (batch.n_segments() != 1) throw std::invalid_argument("forward: a joined batch (use Sequence::forward_joined)");
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
  int32_t min_position = n_past_;
  for (int32_t p : batch.positions()) min_position = std::min(min_position, p);
  for (const auto& kv : kvs_) kv->check_rings(n_past_, batch.size(), min_position);  // this part alone fails
  batch.set_n_past(n_past_);
  last_positions_ = batch.positions();
  if (drop_ && prompt_end_ > 0) batch.compress_all();
  const std::vector<int32_t> captured = policy_ ? policy_->wanted_query_rows(batch.size()) : std::vector<int32_t>{};
  for (const auto& kv : kvs_) kv->set_captured_rows(captured);
}

void Sequence::forward_joined(const std::vector<std::pair<Sequence*, StepRequest*>>& parts) {
  if (parts.empty()) return;
  StepRunner& runner = *parts[0].first->runner_;
  for (size_t a = 0; a < parts.size(); ++a) {
    if (parts[a].first->runner_.get() != &runner)
      throw std::invalid_argument("forward_joined: the sequences run on different step runners (weights)");
    for (size_t b = 0; b < a; ++b)
      if (parts[a].first == parts[b].first) throw std::invalid_argument("forward_joined: a sequence twice in one step");
    if (parts.size() > 1 && parts[a].first->tap_)
      throw std::invalid_argument("forward_joined: a sequence with an attention input tap steps alone");
  }
  Backend& backend = runner.backend();
  StepLock lock(runner.step_mutex());
  // Each sequence's own checks: a part that fails them gets its error, the rest run.
  std::vector<std::pair<Sequence*, StepRequest*>> ready;
  int64_t logit_rows = 0, tokens = 0;
  for (const auto& [model, request] : parts) {
    request->error = nullptr;
    try {
      model->prepare_step(*request);
      ready.emplace_back(model, request);
      logit_rows += static_cast<int64_t>(request->batch->logit_rows().size());
      tokens += request->batch->size();
    } catch (...) {
      request->error = std::current_exception();
    }
  }
  if (ready.empty()) return;
  try {
    const int32_t max_sequences = runner.capabilities().max_step_sequences;
    if (ready.size() > static_cast<size_t>(max_sequences))
      throw std::invalid_argument("forward_joined: the " + backend.name() + " backend computes at most " +
                                  std::to_string(max_sequences) + " sequences in one step");
    if (tokens > kMaxStepTokens || logit_rows > runner.max_logit_rows())
      throw std::invalid_argument("forward_joined: " + std::to_string(tokens) + " tokens and " + std::to_string(logit_rows) +
                                  " logit rows in one step (at most " + std::to_string(kMaxStepTokens) + " and " +
                                  std::to_string(runner.max_logit_rows()) + ")");
    std::vector<std::vector<KvCache*>> caches;  // each part's cache on each device
    std::vector<const StepBatch*> batches;
    bool want_logits = false, want_ids = false;
    int32_t top_k = 0;
    for (const auto& [model, request] : ready) {
      caches.push_back(model->device_caches());
      batches.push_back(request->batch);
      want_logits |= request->want == StepWant::Logits;
      want_ids |= request->want == StepWant::Argmax;
      if (request->want == StepWant::TopK) top_k = std::max(top_k, request->k);
    }
    StepBatch joined;
    if (ready.size() > 1) joined = StepBatch::join(batches);
    const StepBatch& step = ready.size() > 1 ? joined : *batches[0];
    runner.record_step(step, caches, ready.size() == 1 ? ready[0].first->tap_ : AttentionInputTap{});
    if (want_ids) backend.argmax_rows(runner.logits());
    if (top_k > 0) backend.top_k_rows(runner.logits(), top_k);
    backend.finish_step();
    runner.file().check_intact();  // a step that read a shrunk file's zeros is not used
    const int64_t n_rows = static_cast<int64_t>(step.logit_rows().size());
    const std::vector<float> logits = want_logits ? backend.read_rows(runner.logits(), n_rows) : std::vector<float>{};
    const std::vector<int32_t> ids = want_ids ? backend.read_argmax(n_rows) : std::vector<int32_t>{};
    const TopK top = top_k > 0 ? backend.read_top_k(n_rows) : TopK{};
    // Each part's rows, in order.
    const size_t n_vocab = static_cast<size_t>(runner.config().n_vocab);
    size_t row = 0;
    for (const auto& [model, request] : ready) {
      model->last_step_size_ = request->batch->size();
      const size_t rows = request->batch->logit_rows().size();
      try {
        switch (request->want) {
          case StepWant::Logits:
            request->logits.assign(logits.begin() + static_cast<std::ptrdiff_t>(row * n_vocab),
                                   logits.begin() + static_cast<std::ptrdiff_t>((row + rows) * n_vocab));
            break;
          case StepWant::Argmax:
            request->ids.assign(ids.begin() + static_cast<std::ptrdiff_t>(row), ids.begin() + static_cast<std::ptrdiff_t>(row + rows));
            for (int32_t id : request->ids) {
              if (id == -1)
                throw std::runtime_error("the model produced non-finite logits (NaN): the weights or the computation are broken");
              if (id < 0) throw std::runtime_error("every logit is -inf: the model rules out every token");
            }
            break;
          case StepWant::TopK: {
            TopK& mine = request->top;
            mine = TopK{};
            mine.k = request->k;
            for (size_t r = row; r < row + rows; ++r) {
              const int64_t at = static_cast<int64_t>(r);
              mine.ids.insert(mine.ids.end(), top.row_ids(at), top.row_ids(at) + request->k);
              mine.values.insert(mine.values.end(), top.row_values(at), top.row_values(at) + request->k);
              mine.has_nan.push_back(top.has_nan[r]);
              if (top.has_nan[r])
                throw std::runtime_error("the model produced non-finite logits (NaN): the weights or the computation are broken");
            }
            break;
          }
        }
      } catch (...) {
        request->error = std::current_exception();
      }
      row += rows;
    }
  } catch (...) {
    for (const auto& [model, request] : ready) request->error = std::current_exception();
  }
}

void Sequence::commit(int32_t n) {
  if (n < 0 || n > last_step_size_) throw std::invalid_argument("commit: more tokens than the last step had");
  for (int32_t i = 0; i < n; ++i) check_committed_position(i, i);
  StepLock lock(runner_->step_mutex());
  n_past_ += n;
  last_step_size_ = 0;
  for (const auto& kv : kvs_) kv->append(n);
  after_commit();
}

// Lets a policy look at committed keys (by logical index) and the captured queries.
class Sequence::Inspector final : public KvInspector {
 public:
  explicit Inspector(Sequence& m) : m_(m) {}
  int32_t n_layer() const override { return m_.config().n_layer; }
  int32_t n_head() const override { return m_.config().n_head; }
  int32_t n_head_kv() const override { return m_.config().n_head_kv; }
  int32_t head_dim() const override { return m_.config().head_dim; }
  float attention_scale() const override { return m_.config().attention_scale(); }
  float attention_softcap() const override { return m_.config().attn_softcap; }
  bool global_layer(int32_t layer) const override { return m_.config().window_of(layer) == 0; }
  std::vector<float> keys(int32_t layer, int32_t first, int32_t count) const override {
    return m_.committed_keys(layer, first, count);
  }
  std::vector<float> captured_queries(int32_t layer) const override {
    StepLock lock(m_.runner_->step_mutex());
    const auto [kv, local] = m_.cache_of(layer);
    return kv.captured_queries(local);
  }

 private:
  Sequence& m_;
};

void Sequence::after_commit() {
  ++steps_;
  if (!policy_) return;
  Inspector inspector(*this);
  const KvPolicyEvent event{KvPolicyEvent::Committed, n_past_, prompt_end_, steps_};
  if (auto chosen = policy_->choose(event, inspector))
    for (const auto& kv : kvs_) kv->select(*chosen);
}

void Sequence::end_prefill() {
  StepLock lock(runner_->step_mutex());
  prompt_end_ = n_past_;
  if (!policy_) return;
  Inspector inspector(*this);
  const KvPolicyEvent event{KvPolicyEvent::Prefilled, n_past_, prompt_end_, steps_};
  if (auto chosen = policy_->choose(event, inspector))
    for (const auto& kv : kvs_) kv->select(*chosen);
}

std::unique_ptr<KvInspector> Sequence::inspector() { return std::make_unique<Inspector>(*this); }

void Sequence::set_kv_policy(std::unique_ptr<KvPolicy> policy, bool drop) {
  StepLock lock(runner_->step_mutex());
  policy_ = std::move(policy);
  drop_ = drop && policy_;
  // Dense layers count from the model's first: a later device's cache starts at its own.
  const ModelWeights& w = runner_->weights();
  for (int32_t d = 0; d < w.n_devices(); ++d) {
    const int32_t dense = policy_ ? std::max(0, policy_->dense_layers() - w.first_layer(d)) : 0;
    kvs_[static_cast<size_t>(d)]->reset_layout(policy_ ? policy_->budget() : 0, dense, n_past_);
  }
  if (policy_ && n_past_ > 0) end_prefill();
}

std::vector<float> Sequence::committed_keys(int32_t layer, int32_t first, int32_t count) {
  if (layer < 0 || layer >= config().n_layer || first < 0 || count < 0 || first + count > n_past_)
    throw std::out_of_range("committed_keys: outside the committed context");
  StepLock lock(runner_->step_mutex());
  const auto [kv, local] = cache_of(layer);
  // A ring (a sliding-window layer's) holds its entries by logical index, and only the last ones.
  const int32_t ring = kv.shape().ring(local);
  if (ring > 0 && count > 0 && first < kv.rings_end() - ring)
    throw std::out_of_range("committed_keys: layer " + std::to_string(layer) + " is a sliding-window layer whose ring " +
                            "holds only entries " + std::to_string(kv.rings_end() - ring) + " on");
  std::vector<int32_t> slots;
  for (int32_t l = first; l < first + count; ++l) slots.push_back(ring > 0 ? l : kv_layout().physical_of(l));
  std::vector<float> stored = kv.read_keys(local, slots);
  if (!config().mla()) return stored;
  return runner_->recover_keys(layer, stored, first, count);
}

std::vector<KvCache*> Sequence::device_caches() const {
  std::vector<KvCache*> caches;
  for (const auto& kv : kvs_) caches.push_back(kv.get());
  return caches;
}

std::pair<KvCache&, int32_t> Sequence::cache_of(int32_t layer) const {
  const ModelWeights& w = runner_->weights();
  const int32_t d = w.device_of(layer);
  return {*kvs_[static_cast<size_t>(d)], layer - w.first_layer(d)};
}

void Sequence::check_committed_position(int32_t row, int32_t k) const {
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

void Sequence::set_attention_input_tap(AttentionInputTap tap) {
  if (tap)
    if (const std::string why = runner_->why_no_attention_input_tap(); !why.empty()) throw std::invalid_argument(why);
  tap_ = std::move(tap);
}

void Sequence::commit_rows(const std::vector<int32_t>& rows) {
  std::vector<std::pair<int32_t, int32_t>> moves;
  for (size_t k = 0; k < rows.size(); ++k) {
    const int32_t row = rows[k];
    if (row < 0 || row >= last_step_size_) throw std::invalid_argument("commit_rows: row outside the last step");
    if (k > 0 && row <= rows[k - 1]) throw std::invalid_argument("commit_rows: rows must be increasing");
    check_committed_position(row, static_cast<int32_t>(k));
    if (row != static_cast<int32_t>(k)) moves.emplace_back(n_past_ + row, n_past_ + static_cast<int32_t>(k));
  }
  StepLock lock(runner_->step_mutex());
  if (!moves.empty())
    for (const auto& kv : kvs_) kv->move_slots(moves);
  n_past_ += static_cast<int32_t>(rows.size());
  last_step_size_ = 0;
  for (const auto& kv : kvs_) kv->append(static_cast<int32_t>(rows.size()));
  after_commit();
}

int32_t Sequence::reusable(int32_t n) const {
  n = std::clamp(n, 0, n_past_);
  for (const auto& kv : kvs_) n = std::min(n, kv->reusable(n));
  return n;
}

void Sequence::truncate(int32_t n) {
  if (n < 0 || n > n_past_) throw std::invalid_argument("truncate: beyond the committed context");
  StepLock lock(runner_->step_mutex());
  for (const auto& kv : kvs_)
    if (kv->reusable(n) < n) kv->truncate(n);  // throws, naming why, before anything changes
  for (const auto& kv : kvs_) kv->truncate(n);
  n_past_ = n;
  if (prompt_end_ > n) prompt_end_ = n;
  if (n == 0) steps_ = 0;
}

}  // namespace fafo
