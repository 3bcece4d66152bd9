// pool_view(): the candidate pool's most recently used keys after a step.
#include <algorithm>

#include "view_models.h"

namespace fafo::studio {

PoolView pool_view(const StepTrace& t) {
  PoolView v;
  v.step = t.step;
  v.keys = t.pool_keys;
  v.ngrams = t.pool_ngrams;
  v.lookups = t.pool_lookups;
  v.hits = t.pool_hits;
  v.hit_rate = t.pool_lookups ? static_cast<double>(t.pool_hits) / static_cast<double>(t.pool_lookups) : 0.0;
  std::vector<const CandidateTrace*> tried;
  for (const CandidateTrace& c : t.candidates)
    if (!c.padding) tried.push_back(&c);
  v.tried = static_cast<int32_t>(tried.size());
  std::vector<uint8_t> found(tried.size(), 0);
  for (const PoolKeySnapshot& k : t.pool_snapshot) {
    PoolKeyRow row;
    row.key = k.key;
    row.hits = k.hits;
    row.age = k.age;
    row.retrieved = k.retrieved;
    for (const PoolNgramSnapshot& n : k.ngrams) {
      PoolNgramRow r;
      r.tokens = n.tokens;
      r.hits = n.hits;
      r.age = n.age;
      r.origin_step = n.origin_step;
      r.origin_column = n.origin_column;
      r.lru_rank = static_cast<int32_t>(row.ngrams.size());
      for (size_t i = 0; i < tried.size(); ++i) {
        // A candidate retrieved under this key: same tokens, from a key of this length
        // that this step's lookup used.
        if (!k.retrieved || tried[i]->tokens != n.tokens || tried[i]->key_length != static_cast<int32_t>(k.key.size()))
          continue;
        r.tried_match = tried[i]->match_length;
        row.supplied = true;
        found[i] = 1;
      }
      row.ngrams.push_back(std::move(r));
    }
    v.rows.push_back(std::move(row));
  }
  v.tried_in_snapshot = static_cast<int32_t>(std::count(found.begin(), found.end(), 1));
  return v;
}

}  // namespace fafo::studio
