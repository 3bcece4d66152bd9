// StepBatch: what one forward pass computes. Prefill (causal chunks of the prompt),
// plain decoding (the one input token) and the multi-token steps of Jacobi, Lookahead
// and FAFO (the input token, candidate chains and the 2D window, each with its own
// mask; laid out by StepLayout in runtime/src/decode/step_layout.h) are all a StepBatch
// of T tokens.
//
// Token i of the batch has a RoPE position, sees a view of the committed KV prefix
// (FULL: every committed entry; COMPRESSED: only the compressed region the model's
// KV policy keeps, see fafo/kv_layout.h, except in the policy's dense layers, where it
// sees every entry; FAFO's fumble rows use it), and sees the batch tokens j <= i whose
// bit is set in its row of the in-step mask. Its key and value are written to KV slot
// `n_past + i` for the duration of the step; committing the step makes some of them
// part of the cache: Sequence::commit(n) the first n tokens, Sequence::commit_rows the listed
// rows (the input and a verified chain), moved into place after the prefix.
//
// A joined batch (StepBatch::join) is one step over several sequences on shared
// weights: each part's rows follow the previous part's, keep their own n_past and see
// only rows of their own part; a backend computes part s over the s-th KV cache it is
// given (Backend::begin_step). Its rows get the bits they get alone (backends are
// T-invariant across parts as across rows).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <vector>

namespace fafo {

// Which committed KV entries a batch token attends.
enum class PrefixView : uint8_t { Full, Compressed };

// The rows of one sequence in a step: rows [first, first + size), whose KV slots start
// at n_past (the sequence's committed entries).
struct StepSegment {
  int32_t first = 0;
  int32_t size = 0;
  int32_t n_past = 0;
};

class StepBatch {
 public:
  // A causal batch: token i sees tokens 0..i of the batch, positions n_past..n_past+T-1.
  static StepBatch causal(const std::vector<int32_t>& tokens, int32_t n_past, bool logits_for_all = false);

  // An empty batch for custom masks; add tokens one by one.
  StepBatch() = default;
  // One step over several sequences: the parts' rows in order, part s's rows seeing
  // only part s's rows, its n_past kept, its logit rows in order after the previous
  // part's. Throws std::length_error past kMaxTokens rows, std::invalid_argument for no
  // part or an empty one.
  static StepBatch join(const std::vector<const StepBatch*>& parts);

  // Adds a token at `pos` that sees the batch tokens listed in `sees` (all < its index,
  // itself is always seen). Returns its index. (Not for a joined batch.)
  int32_t add(int32_t token, int32_t pos, const std::vector<int32_t>& sees, bool wants_logits,
              PrefixView prefix = PrefixView::Full);

  int32_t size() const { return static_cast<int32_t>(tokens_.size()); }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  const std::vector<int32_t>& positions() const { return positions_; }
  // Does batch token i see batch token j (j <= i)?
  bool sees(int32_t i, int32_t j) const {
    return (mask_[static_cast<size_t>(i) * words_per_row() + static_cast<size_t>(j) / 64] >> (j % 64)) & 1u;
  }
  PrefixView prefix(int32_t i) const { return prefixes_[static_cast<size_t>(i)]; }
  // Makes every token see only the compressed region of the prefix (lossy KV dropping).
  void compress_all() { prefixes_.assign(prefixes_.size(), PrefixView::Compressed); }
  // Rows whose logits the step returns, in increasing order.
  const std::vector<int32_t>& logit_rows() const { return logit_rows_; }
  // Committed KV entries before the step (the cache length; the model sets it when it
  // runs the step). FULL tokens see all of them; the step's own KV slots start here.
  // A joined batch of several parts has one per part: std::logic_error here (use
  // segment()).
  int32_t n_past() const {
    if (segments_.size() > 1) throw std::logic_error("StepBatch::n_past: a joined batch has one per part (segment)");
    return segments_.empty() ? n_past_ : segments_[0].n_past;
  }
  void set_n_past(int32_t n) { n_past_ = n; }

  // The sequences the step computes for: 1 for a batch made by causal() or add(), the
  // number of parts for a joined one.
  int32_t n_segments() const { return segments_.empty() ? 1 : static_cast<int32_t>(segments_.size()); }
  StepSegment segment(int32_t s) const {
    return segments_.empty() ? StepSegment{0, size(), n_past_} : segments_[static_cast<size_t>(s)];
  }
  // The part row i belongs to.
  int32_t segment_of(int32_t i) const {
    return segments_.empty() ? 0 : row_segment_[static_cast<size_t>(i)];
  }
  // The KV slot row i's key and value go to in its part's cache (n_past + its index in
  // the part), and that part's committed entries.
  int32_t slot_of(int32_t i) const {
    const StepSegment seg = segment(segment_of(i));
    return seg.n_past + i - seg.first;
  }
  int32_t n_past_of(int32_t i) const { return segment(segment_of(i)).n_past; }

  static constexpr int32_t kMaxTokens = 1024;

 private:
  size_t words_per_row() const { return kMaxTokens / 64; }

  std::vector<int32_t> tokens_;
  std::vector<int32_t> positions_;
  std::vector<PrefixView> prefixes_;
  std::vector<uint64_t> mask_;  // T rows of kMaxTokens bits
  std::vector<int32_t> logit_rows_;
  int32_t n_past_ = 0;
  std::vector<StepSegment> segments_;  // empty: one sequence, rows [0, size) at n_past_
  std::vector<int32_t> row_segment_;   // a joined batch's part of each row
};

}  // namespace fafo
