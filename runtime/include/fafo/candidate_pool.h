// The n-gram candidate pool ("Find Out", FAFO paper appendix E and algorithms 1-2).
//
// N-grams produced by the 2D window are stored under keys: the context tokens that
// preceded them (Lookahead: the one token before; FAFO: every suffix of up to
// `lookback` tokens). Each key holds at most `per_key` n-grams, evicting the least
// recently used. Retrieval looks up the longest suffix of the committed text first
// and backs off to shorter ones until enough distinct candidates are found.
//
// For the studio and StepTrace the pool also keeps, per key and per n-gram, how often
// it supplied candidates and when it was last used, on a clock that advances with
// every retrieve() (one per decoding step), and a ring of the latest key uses so that
// a snapshot of the most recently used keys costs only what it copies.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <vector>

#include "fafo/decoding.h"

namespace fafo {

struct PoolEntry {
  std::vector<int32_t> ngram;
  int32_t origin_step = -1;
  int32_t origin_column = -1;
  int64_t hits = 0;          // times retrieved
  int64_t last_used = 0;     // clock() when it was last added, refreshed or retrieved
};

// One key's n-grams and use.
struct PoolKey {
  std::list<PoolEntry> entries;  // most recently used first
  int64_t hits = 0;              // lookups that took at least one candidate from this key
  int64_t last_used = 0;         // clock() when it was last added to or retrieved from
};

struct RetrievedCandidate {
  std::vector<int32_t> ngram;
  int32_t key_length = 0;
  int32_t origin_step = -1;
  int32_t origin_column = -1;
  CandidateSource source = CandidateSource::Window;  // the pool's: Window, or Prompt when origin_step < 0
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
  // The key's record, or nullptr.
  const PoolKey* find(const std::vector<int32_t>& key) const;
  // Up to `max_keys` keys with their n-grams, hit counts and ages (clock() - last_used):
  // first the keys the latest retrieve() took candidates from (longest first), then the
  // other keys, most recently used first, as far as the last kRecentUses key uses
  // reach. O(what it copies + kRecentUses).
  std::vector<PoolKeySnapshot> snapshot(int32_t max_keys) const;
  // Advances with every retrieve() call: ages are counted in lookups (decoding steps).
  int64_t clock() const { return clock_; }
  int64_t key_count() const { return static_cast<int64_t>(table_.size()); }
  int64_t ngram_count() const { return n_ngrams_; }
  int64_t lookups() const { return lookups_; }
  int64_t hits() const { return hits_; }
  int32_t per_key() const { return per_key_; }
  int32_t max_key_length() const { return max_key_length_; }
  // Every key and its entries (most recently used first).
  const std::map<std::vector<int32_t>, PoolKey>& table() const { return table_; }

 private:
  using Table = std::map<std::vector<int32_t>, PoolKey>;
  void add_under(const std::vector<int32_t>& key, const std::vector<int32_t>& ngram, int32_t step, int32_t column);
  // Marks the key as used now: its record, moved to the front of key_order_.
  PoolKey& touch(Table::iterator it);

  int32_t per_key_;
  int32_t max_key_length_;
  Table table_;
  // The latest key uses (pointing at table_'s own copies of the keys, which are never
  // removed: a key keeps at least one n-gram once it has one), a ring.
  static constexpr size_t kRecentUses = 1024;
  std::vector<const std::vector<int32_t>*> recent_uses_;
  size_t recent_next_ = 0;
  std::vector<const std::vector<int32_t>*> last_retrieved_;  // keys the latest retrieve() used
  int64_t clock_ = 0;
  int64_t n_ngrams_ = 0;
  int64_t lookups_ = 0;
  int64_t hits_ = 0;
};

}  // namespace fafo
