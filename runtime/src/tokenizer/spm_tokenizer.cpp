// The SentencePiece-BPE merge loop, with the same results as llama.cpp's SPM tokenizer.
//
// The text (spaces already replaced by '▁') is split into UTF-8 characters. Every
// adjacent pair whose concatenation is a vocab token goes into a priority queue keyed by
// that token's score (the leftmost pair wins a tie). The best pair is merged, the pairs
// around the merged symbol are queued, and stale queue entries (a side already merged
// away or grown) are skipped, until the queue is empty. Each remaining symbol is then
// emitted: as its token when it is one, else split back along its merge history, and a
// single character that is not a token becomes its UTF-8 bytes as <0xXX> byte tokens.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <queue>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/vocab_index.h"

namespace fafo::detail {
namespace {

// Length of the UTF-8 sequence a lead byte announces (1 for stray continuation bytes).
size_t utf8_sequence_length(uint8_t lead) {
  if (lead < 0xC0) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

class SpmSession {
 public:
  SpmSession(const VocabIndex& index, std::string_view text) : index_(index), text_(text) {}

  void run(std::vector<int32_t>& out) {
    split_characters();
    if (symbols_.empty()) return;
    for (int i = 1; i < static_cast<int>(symbols_.size()); ++i) queue_pair(i - 1, i);
    merge_all();
    for (int i = 0; i != -1; i = symbols_[static_cast<size_t>(i)].next) {
      const Symbol& s = symbols_[static_cast<size_t>(i)];
      emit(i, s.n, out);
    }
  }

 private:
  struct Symbol {
    int prev;
    int next;
    size_t offset;      // into text_
    size_t n;           // bytes; 0 once merged into its left neighbour
    int last_merge;     // newest record in merges_ where this symbol was the left side
  };
  struct Bigram {
    int left;
    int right;
    float score;
    size_t size;        // bytes of the pair when it was queued
  };
  struct BigramOrder {  // max-heap: higher score first, then the leftmost pair
    bool operator()(const Bigram& a, const Bigram& b) const {
      return a.score < b.score || (a.score == b.score && a.left > b.left);
    }
  };
  // Left symbol `left` grew from `left_n` to `n` bytes by absorbing symbol `right`.
  struct MergeRecord {
    size_t n;
    size_t left_n;
    int right;
    int previous;       // the left symbol's previous record, or -1
  };

  void split_characters() {
    size_t offset = 0;
    symbols_.reserve(text_.size());
    while (offset < text_.size()) {
      const size_t len = std::min(utf8_sequence_length(static_cast<uint8_t>(text_[offset])), text_.size() - offset);
      const int index = static_cast<int>(symbols_.size());
      offset += len;
      symbols_.push_back(Symbol{index - 1, offset == text_.size() ? -1 : index + 1, offset - len, len, -1});
    }
  }

  void queue_pair(int left, int right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols_[static_cast<size_t>(left)];
    const Symbol& r = symbols_[static_cast<size_t>(right)];
    const size_t size = l.n + r.n;
    const int32_t id = index_.find(text_.substr(l.offset, size));
    if (id < 0) return;
    queue_.push(Bigram{left, right, index_.score(id), size});
  }

  void merge_all() {
    while (!queue_.empty()) {
      const Bigram b = queue_.top();
      queue_.pop();
      Symbol& l = symbols_[static_cast<size_t>(b.left)];
      Symbol& r = symbols_[static_cast<size_t>(b.right)];
      // Stale: one side was merged away, or a side has grown since the pair was queued.
      if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;

      merges_.push_back(MergeRecord{b.size, l.n, b.right, l.last_merge});
      l.last_merge = static_cast<int>(merges_.size()) - 1;
      l.n = b.size;
      r.n = 0;
      l.next = r.next;
      if (r.next >= 0) symbols_[static_cast<size_t>(r.next)].prev = b.left;

      queue_pair(l.prev, b.left);
      queue_pair(b.left, l.next);
    }
  }

  // Emits the span of `n` bytes starting at symbol `sym`.
  void emit(int sym, size_t n, std::vector<int32_t>& out) const {
    const Symbol& s = symbols_[static_cast<size_t>(sym)];
    const std::string_view piece = text_.substr(s.offset, n);
    if (const int32_t id = index_.find(piece); id >= 0) {
      out.push_back(id);
      return;
    }
    // Merges only ever form vocab tokens, so this finds nothing in practice; kept so a
    // non-token span is split exactly along the merges that built it.
    for (int m = s.last_merge; m >= 0; m = merges_[static_cast<size_t>(m)].previous) {
      const MergeRecord& rec = merges_[static_cast<size_t>(m)];
      if (rec.n != n) continue;
      emit(sym, rec.left_n, out);
      emit(rec.right, rec.n - rec.left_n, out);
      return;
    }
    emit_bytes(piece, out);
  }

  void emit_bytes(std::string_view piece, std::vector<int32_t>& out) const {
    bool all_bytes_known = true;
    for (char c : piece) all_bytes_known = all_bytes_known && index_.byte_token(static_cast<uint8_t>(c)) >= 0;
    if (all_bytes_known) {
      for (char c : piece) out.push_back(index_.byte_token(static_cast<uint8_t>(c)));
      return;
    }
    const int32_t unk = index_.vocab().unk;
    if (unk < 0)
      throw std::runtime_error("tokenizer: the text contains a character with no token, no byte tokens "
                               "and the vocabulary has no unknown token");
    out.push_back(unk);
  }

  const VocabIndex& index_;
  std::string_view text_;
  std::vector<Symbol> symbols_;
  std::vector<MergeRecord> merges_;
  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue_;
};

}  // namespace

std::string escape_whitespace(std::string_view text) {
  static constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581
  std::string out;
  out.reserve(text.size() + text.size() / 2);
  for (char c : text) {
    if (c == ' ')
      out += kSpaceMark;
    else
      out += c;
  }
  return out;
}

void spm_tokenize(const VocabIndex& index, std::string_view escaped, std::vector<int32_t>& out) {
  SpmSession(index, escaped).run(out);
}

}  // namespace fafo::detail
