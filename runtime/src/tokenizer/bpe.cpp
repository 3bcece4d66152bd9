// Byte-level BPE merging by merge rank.
//
// A word's characters (of its GPT-2 byte encoding) start as symbols in a linked list.
// Every adjacent pair with a merge rank goes into a priority queue (lowest rank first,
// then leftmost). The best pair is merged; a queued pair is stale when the texts of its
// two symbols no longer concatenate to the text it was queued with. New pairs around a
// merged symbol are queued until the queue is empty.
#include "tokenizer/bpe.h"

#include <queue>

#include "tokenizer/unicode.h"

namespace fafo::detail {
namespace {

struct Symbol {
  int prev;
  int next;
  size_t offset;  // into the encoded word
  size_t n;       // bytes; 0 once merged into its left neighbour
};

struct Pair {
  int left;
  int right;
  int32_t rank;
  size_t size;  // bytes of left + right when queued
};

struct PairOrder {  // priority_queue is a max-heap: "less" means worse
  bool operator()(const Pair& a, const Pair& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

}  // namespace

BpeModel::BpeModel(const VocabIndex& index) : index_(index) {
  const std::vector<std::string>& merges = index.vocab().merges;
  ranks_.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string& m = merges[i];
    const size_t space = m.find(' ', 1);
    if (space == std::string::npos) continue;
    ranks_.emplace(m, static_cast<int32_t>(i));
  }
}

int32_t BpeModel::rank(std::string_view left, std::string_view right, std::string& key) const {
  key.assign(left);
  key += ' ';
  key.append(right);
  const auto it = ranks_.find(key);
  return it == ranks_.end() ? -1 : it->second;
}

void BpeModel::tokenize_word(std::string_view word, bool ignore_merges, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  const std::string encoded = byte_encode(word);
  if (ignore_merges) {
    if (const int32_t id = index_.find(encoded); id >= 0) {
      out.push_back(id);
      return;
    }
  }

  std::vector<Symbol> symbols;
  symbols.reserve(encoded.size());
  for (size_t offset = 0; offset < encoded.size();) {
    const size_t len = std::min(utf8_lead_length(static_cast<uint8_t>(encoded[offset])), encoded.size() - offset);
    const int i = static_cast<int>(symbols.size());
    symbols.push_back(Symbol{i - 1, offset + len == encoded.size() ? -1 : i + 1, offset, len});
    offset += len;
  }

  const std::string_view text(encoded);
  std::string key;
  std::priority_queue<Pair, std::vector<Pair>, PairOrder> queue;
  const auto queue_pair = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[static_cast<size_t>(left)];
    const Symbol& r = symbols[static_cast<size_t>(right)];
    const int32_t rk = rank(text.substr(l.offset, l.n), text.substr(r.offset, r.n), key);
    if (rk >= 0) queue.push(Pair{left, right, rk, l.n + r.n});
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) queue_pair(i - 1, i);

  while (!queue.empty()) {
    const Pair p = queue.top();
    queue.pop();
    Symbol& l = symbols[static_cast<size_t>(p.left)];
    Symbol& r = symbols[static_cast<size_t>(p.right)];
    // Stale: a side was merged away, or is no longer adjacent with the same texts. The
    // symbols are contiguous spans of one string, so adjacency and total size suffice.
    if (l.n == 0 || r.n == 0 || l.next != p.right || l.n + r.n != p.size) continue;
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[static_cast<size_t>(r.next)].prev = p.left;
    queue_pair(l.prev, p.left);
    queue_pair(p.left, l.next);
  }

  for (int i = 0; i >= 0; i = symbols[static_cast<size_t>(i)].next) {
    const Symbol& s = symbols[static_cast<size_t>(i)];
    const std::string_view piece = text.substr(s.offset, s.n);
    if (const int32_t id = index_.find(piece); id >= 0) {
      out.push_back(id);
      continue;
    }
    for (char c : piece)
      if (const int32_t id = index_.find(std::string_view(&c, 1)); id >= 0) out.push_back(id);
  }
}

}  // namespace fafo::detail
