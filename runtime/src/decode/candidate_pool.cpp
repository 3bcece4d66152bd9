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

PoolKey& CandidatePool::touch(Table::iterator it) {
  PoolKey& k = it->second;
  k.last_used = clock_;
  if (recent_uses_.size() < kRecentUses) {
    recent_uses_.push_back(&it->first);
  } else {
    recent_uses_[recent_next_] = &it->first;
    recent_next_ = (recent_next_ + 1) % kRecentUses;
  }
  return k;
}

void CandidatePool::add_under(const std::vector<int32_t>& key, const std::vector<int32_t>& ngram, int32_t step,
                              int32_t column) {
  std::list<PoolEntry>& entries = touch(table_.try_emplace(key).first).entries;
  for (auto e = entries.begin(); e != entries.end(); ++e)
    if (e->ngram == ngram) {  // refresh: most recently used, newest origin
      e->origin_step = step;
      e->origin_column = column;
      e->last_used = clock_;
      entries.splice(entries.begin(), entries, e);
      return;
    }
  entries.push_front(PoolEntry{ngram, step, column, 0, clock_});
  ++n_ngrams_;
  if (static_cast<int32_t>(entries.size()) > per_key_) {
    entries.pop_back();  // least recently used
    --n_ngrams_;
  }
}

std::vector<RetrievedCandidate> CandidatePool::retrieve(const std::vector<int32_t>& text, int32_t count) {
  ++clock_;
  last_retrieved_.clear();
  std::vector<RetrievedCandidate> out;
  if (count <= 0 || text.empty()) return out;
  ++lookups_;
  std::set<std::vector<int32_t>> seen;
  const size_t longest = std::min(text.size(), static_cast<size_t>(max_key_length_));
  for (size_t len = longest; len >= 1 && static_cast<int32_t>(out.size()) < count; --len) {
    const std::vector<int32_t> key(text.end() - static_cast<std::ptrdiff_t>(len), text.end());
    auto found = table_.find(key);
    if (found == table_.end()) continue;
    std::list<PoolEntry>& entries = found->second.entries;
    std::vector<std::list<PoolEntry>::iterator> used;
    for (auto it = entries.begin(); it != entries.end() && static_cast<int32_t>(out.size()) < count; ++it) {
      if (!seen.insert(it->ngram).second) continue;
      ++it->hits;
      it->last_used = clock_;
      out.push_back({it->ngram, static_cast<int32_t>(len), it->origin_step, it->origin_column,
                     it->origin_step < 0 ? CandidateSource::Prompt : CandidateSource::Window});
      used.push_back(it);
    }
    if (used.empty()) continue;
    ++touch(found).hits;
    last_retrieved_.push_back(&found->first);
    // Retrieved entries become most recently used (keeping their relative order).
    for (auto u = used.rbegin(); u != used.rend(); ++u) entries.splice(entries.begin(), entries, *u);
  }
  if (!out.empty()) ++hits_;
  return out;
}

std::vector<PoolEntry> CandidatePool::entries(const std::vector<int32_t>& key) const {
  const PoolKey* k = find(key);
  if (!k) return {};
  return std::vector<PoolEntry>(k->entries.begin(), k->entries.end());
}

const PoolKey* CandidatePool::find(const std::vector<int32_t>& key) const {
  auto found = table_.find(key);
  return found == table_.end() ? nullptr : &found->second;
}

std::vector<PoolKeySnapshot> CandidatePool::snapshot(int32_t max_keys) const {
  std::vector<PoolKeySnapshot> out;
  if (max_keys <= 0) return out;
  std::vector<const std::vector<int32_t>*> taken;
  auto take = [&](const std::vector<int32_t>* key, bool retrieved) {
    taken.push_back(key);
    const PoolKey& k = table_.find(*key)->second;
    PoolKeySnapshot s;
    s.key = *key;
    s.hits = k.hits;
    s.age = clock_ - k.last_used;
    s.retrieved = retrieved;
    s.ngrams.reserve(k.entries.size());
    for (const PoolEntry& e : k.entries)
      s.ngrams.push_back({e.ngram, e.origin_step, e.origin_column, e.hits, clock_ - e.last_used});
    out.push_back(std::move(s));
  };
  for (const std::vector<int32_t>* key : last_retrieved_)
    if (static_cast<int32_t>(out.size()) < max_keys) take(key, true);
  // The ring from the newest use back; a key used several times is taken once.
  const size_t n = recent_uses_.size();
  for (size_t i = 0; i < n && static_cast<int32_t>(out.size()) < max_keys; ++i) {
    const std::vector<int32_t>* key = recent_uses_[(recent_next_ + n - 1 - i) % n];
    if (std::find(taken.begin(), taken.end(), key) == taken.end()) take(key, false);
  }
  return out;
}

}  // namespace fafo
