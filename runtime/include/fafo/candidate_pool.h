// The n-gram candidate pool ("Find Out", FAFO paper appendix E and algorithms 1-2).
//
// N-grams produced by the 2D window are stored under keys: the context tokens that
// preceded them (Lookahead: the one token before; FAFO: every suffix of up to
// `lookback` tokens). Each key holds at most `per_key` n-grams, evicting the least
// recently used. Retrieval looks up the longest suffix of the committed text first
// and backs off to shorter ones until enough distinct candidates are found.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <vector>

namespace fafo {

struct PoolEntry {
  std::vector<int32_t> ngram;
  int32_t origin_step = -1;
  int32_t origin_column = -1;
  int64_t hits = 0;          // times retrieved
};

struct RetrievedCandidate {
  std::vector<int32_t> ngram;
  int32_t key_length = 0;
  int32_t origin_step = -1;
  int32_t origin_column = -1;
};

class CandidatePool {
 public:
  CandidatePool(int32_t per_key, int32_t max_key_length);

  // Stores `ngram` under every suffix of `context` up to max_key_length tokens
  // (context's last token is the one right before the n-gram). A repeated n-gram is
  // refreshed (moved to most recently used), not duplicated.
  void add(const std::vector<int32_t>& context, const std::vector<int32_t>& ngram, int32_t origin_step = -1,
           int32_t origin_column = -1);
  // Up to `count` distinct n-grams for the end of `text`, longest matching key first.
  // Retrieved entries become most recently used.
  std::vector<RetrievedCandidate> retrieve(const std::vector<int32_t>& text, int32_t count);

  // Entries under one key, most recently used first (for tests and the studio).
  std::vector<PoolEntry> entries(const std::vector<int32_t>& key) const;
  int64_t key_count() const { return static_cast<int64_t>(table_.size()); }
  int64_t ngram_count() const { return n_ngrams_; }
  int64_t lookups() const { return lookups_; }
  int64_t hits() const { return hits_; }
  int32_t per_key() const { return per_key_; }
  int32_t max_key_length() const { return max_key_length_; }
  // Every key and its entries (most recently used first); for the studio's pool view.
  const std::map<std::vector<int32_t>, std::list<PoolEntry>>& table() const { return table_; }

 private:
  void add_under(const std::vector<int32_t>& key, const std::vector<int32_t>& ngram, int32_t step, int32_t column);

  int32_t per_key_;
  int32_t max_key_length_;
  std::map<std::vector<int32_t>, std::list<PoolEntry>> table_;  // list front = most recently used
  int64_t n_ngrams_ = 0;
  int64_t lookups_ = 0;
  int64_t hits_ = 0;
};

}  // namespace fafo
