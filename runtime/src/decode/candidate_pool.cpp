#include "fafo/candidate_pool.h"

#include <algorithm>
#include <set>
#include <stdexcept>

namespace fafo {

CandidatePool::CandidatePool(int32_t per_key, int32_t max_key_length) : per_key_(per_key), max_key_length_(max_key_length) {
  if (per_key <= 0 || max_key_length <= 0) throw std::invalid_argument("CandidatePool: per_key and max_key_length must be positive");
}

void CandidatePool::add(const std::vector<int32_t>& context, const std::vector<int32_t>& ngram, int32_t origin_step,
                        int32_t origin_column) {
  if (context.empty() || ngram.empty()) return;
  const size_t longest = std::min(context.size(), static_cast<size_t>(max_key_length_));
  for (size_t len = 1; len <= longest; ++len)
    add_under(std::vector<int32_t>(context.end() - static_cast<std::ptrdiff_t>(len), context.end()), ngram, origin_step,
              origin_column);
}

void CandidatePool::add_under(const std::vector<int32_t>& key, const std::vector<int32_t>& ngram, int32_t step,
                              int32_t column) {
  std::list<PoolEntry>& entries = table_[key];
  for (auto it = entries.begin(); it != entries.end(); ++it)
    if (it->ngram == ngram) {  // refresh: most recently used, newest origin
      it->origin_step = step;
      it->origin_column = column;
      entries.splice(entries.begin(), entries, it);
      return;
    }
  entries.push_front(PoolEntry{ngram, step, column, 0});
  ++n_ngrams_;
  if (static_cast<int32_t>(entries.size()) > per_key_) {
    entries.pop_back();  // least recently used
    --n_ngrams_;
  }
}

std::vector<RetrievedCandidate> CandidatePool::retrieve(const std::vector<int32_t>& text, int32_t count) {
  std::vector<RetrievedCandidate> out;
  if (count <= 0 || text.empty()) return out;
  ++lookups_;
  std::set<std::vector<int32_t>> seen;
  const size_t longest = std::min(text.size(), static_cast<size_t>(max_key_length_));
  for (size_t len = longest; len >= 1 && static_cast<int32_t>(out.size()) < count; --len) {
    const std::vector<int32_t> key(text.end() - static_cast<std::ptrdiff_t>(len), text.end());
    auto found = table_.find(key);
    if (found == table_.end()) continue;
    std::list<PoolEntry>& entries = found->second;
    std::vector<std::list<PoolEntry>::iterator> used;
    for (auto it = entries.begin(); it != entries.end() && static_cast<int32_t>(out.size()) < count; ++it) {
      if (!seen.insert(it->ngram).second) continue;
      ++it->hits;
      out.push_back({it->ngram, static_cast<int32_t>(len), it->origin_step, it->origin_column});
      used.push_back(it);
    }
    // Retrieved entries become most recently used (keeping their relative order).
    for (auto u = used.rbegin(); u != used.rend(); ++u) entries.splice(entries.begin(), entries, *u);
  }
  if (!out.empty()) ++hits_;
  return out;
}

std::vector<PoolEntry> CandidatePool::entries(const std::vector<int32_t>& key) const {
  auto found = table_.find(key);
  if (found == table_.end()) return {};
  return std::vector<PoolEntry>(found->second.begin(), found->second.end());
}

}  // namespace fafo
