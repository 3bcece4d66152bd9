#include "fafo/step_trace_json.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "fafo/step_batch.h"

namespace fafo {

using nlohmann::json;

namespace {

// Checked readers: a number that is not an integer of the type's range is an error
// (nlohmann's get<int> converts a float such as 1e300 with undefined behaviour).
template <class T>
T integer(const json& v) {
  if (!v.is_number_integer()) throw std::invalid_argument(std::string("expected an integer, not ") + v.type_name());
  if (v.is_number_unsigned() ? v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<T>::max())
                             : v.get<int64_t>() < std::numeric_limits<T>::min() || v.get<int64_t>() > std::numeric_limits<T>::max())
    throw std::invalid_argument("an integer is out of range");
  return static_cast<T>(v.is_number_unsigned() ? static_cast<int64_t>(v.get<uint64_t>()) : v.get<int64_t>());
}

std::vector<int32_t> ints(const json& v) {
  if (!v.is_array()) throw std::invalid_argument(std::string("expected a list of integers, not ") + v.type_name());
  std::vector<int32_t> out;
  out.reserve(v.size());
  for (const json& x : v) out.push_back(integer<int32_t>(x));
  return out;
}

std::vector<std::vector<int32_t>> int_rows(const json& v) {
  if (!v.is_array()) throw std::invalid_argument(std::string("expected a list of lists of integers, not ") + v.type_name());
  std::vector<std::vector<int32_t>> out;
  for (const json& row : v) out.push_back(ints(row));
  return out;
}

// An optional integer field.
int32_t integer_or(const json& obj, const char* key, int32_t fallback) {
  return obj.contains(key) ? integer<int32_t>(obj.at(key)) : fallback;
}

json pool_snapshot_to_json(const std::vector<PoolKeySnapshot>& keys) {
  json out = json::array();
  for (const PoolKeySnapshot& k : keys) {
    json ngrams = json::array();
    for (const PoolNgramSnapshot& n : k.ngrams)
      ngrams.push_back({{"tokens", n.tokens},
                        {"origin_step", n.origin_step},
                        {"origin_column", n.origin_column},
                        {"hits", n.hits},
                        {"age", n.age}});
    out.push_back({{"key", k.key}, {"hits", k.hits}, {"age", k.age}, {"retrieved", k.retrieved}, {"ngrams", ngrams}});
  }
  return out;
}

std::vector<PoolKeySnapshot> pool_snapshot_from_json(const json& j) {
  std::vector<PoolKeySnapshot> out;
  for (const json& k : j) {
    PoolKeySnapshot s;
    s.key = ints(k.at("key"));
    s.hits = integer<int64_t>(k.at("hits"));
    s.age = integer<int64_t>(k.at("age"));
    s.retrieved = k.value("retrieved", false);
    for (const json& n : k.at("ngrams"))
      s.ngrams.push_back({ints(n.at("tokens")), integer<int32_t>(n.at("origin_step")),
                          integer<int32_t>(n.at("origin_column")), integer<int64_t>(n.at("hits")), integer<int64_t>(n.at("age"))});
    out.push_back(std::move(s));
  }
  return out;
}

// A candidate's source; traces written before sources were recorded have none: the
// pool's, by its origin.
CandidateSource source_of(const json& c) {
  if (c.contains("source")) return parse_candidate_source(c.at("source").get<std::string>());
  return integer<int32_t>(c.at("origin_step")) < 0 ? CandidateSource::Prompt : CandidateSource::Window;
}

}  // namespace

json step_trace_to_json(const StepTrace& t) {
  json candidates = json::array();
  for (const CandidateTrace& c : t.candidates)
    candidates.push_back({{"tokens", c.tokens},
                          {"key_length", c.key_length},
                          {"match_length", c.match_length},
                          {"origin_step", c.origin_step},
                          {"origin_column", c.origin_column},
                          {"padding", c.padding},
                          {"source", candidate_source_name(c.source)}});
  json sources = json::array();
  for (const TokenSource& s : t.accepted_sources)
    sources.push_back({{"kind", s.kind == TokenSource::Candidate ? "candidate" : "plain"},
                       {"origin_step", s.origin_step},
                       {"origin_column", s.origin_column},
                       {"source", candidate_source_name(s.source)}});
  json pool = {{"keys", t.pool_keys}, {"ngrams", t.pool_ngrams}, {"lookups", t.pool_lookups}, {"hits", t.pool_hits}};
  if (!t.pool_snapshot.empty()) pool["snapshot"] = pool_snapshot_to_json(t.pool_snapshot);
  json kv = {{"region", t.kv_region}, {"swaps", t.kv_swaps}};
  if (t.kv_layers > 0) {
    kv["layers"] = t.kv_layers;
    kv["dense_layers"] = t.kv_dense_layers;
  }
  if (!t.kv_type.empty()) {
    kv["type"] = t.kv_type;
    kv["bytes_per_token"] = t.kv_bytes_per_token;
  }
  if (!t.kv_windows.empty()) kv["windows"] = t.kv_windows;
  if (!t.kv_rings.empty()) kv["rings"] = t.kv_rings;
  return {{"step", t.step},
          {"strategy", strategy_name(t.strategy)},
          {"auto_choice", t.auto_choice},
          {"n_past", t.n_past},
          {"batch_size", t.batch_size},
          {"window_before", t.window_before},
          {"window_after", t.window_after},
          {"new_guesses", t.new_guesses},
          {"candidates", candidates},
          {"accepted", t.accepted},
          {"accepted_sources", sources},
          {"kv", kv},
          {"pool", pool},
          {"ms", {{"build", t.build_ms}, {"forward", t.forward_ms}, {"verify", t.verify_ms}}}};
}

namespace {

// What a step can hold: a recording that claims more is damaged or hostile, and the
// studio's panels would size their drawings by it.
constexpr int32_t kMaxContext = 1 << 24;
constexpr int32_t kMaxLayers = 4096;
constexpr size_t kMaxListLength = 1 << 16;

void check_length(size_t n, const char* what) {
  if (n > kMaxListLength)
    throw std::invalid_argument(std::string(what) + " has " + std::to_string(n) + " items, more than a step can hold");
}

// Throws std::invalid_argument naming the field that a real step could not have.
void check_step_trace(const StepTrace& t) {
  if (t.step < 0) throw std::invalid_argument("step is negative");
  if (t.n_past < 0 || t.n_past > kMaxContext) throw std::invalid_argument("n_past is outside [0, 2^24]");
  // The prefill (step 0) holds the whole prompt, fed in chunks; a decoding step, one batch.
  const int32_t most = t.step == 0 ? kMaxContext : StepBatch::kMaxTokens;
  if (t.batch_size < 0 || t.batch_size > most)
    throw std::invalid_argument("batch_size is outside [0, " + std::to_string(most) + "]" + (t.step == 0 ? " (the prompt)" : ""));
  if (t.kv_layers < 0 || t.kv_layers > kMaxLayers) throw std::invalid_argument("kv.layers is outside [0, 4096]");
  if (t.kv_dense_layers < 0 || t.kv_dense_layers > t.kv_layers)
    throw std::invalid_argument("kv.dense_layers is outside [0, kv.layers]");
  if (t.kv_swaps < 0) throw std::invalid_argument("kv.swaps is negative");
  if (t.kv_bytes_per_token < 0) throw std::invalid_argument("kv.bytes_per_token is negative");
  if (t.kv_windows.size() > static_cast<size_t>(kMaxLayers)) throw std::invalid_argument("kv.windows has more than 4096 layers");
  for (int32_t w : t.kv_windows)
    if (w < 0) throw std::invalid_argument("kv.windows holds a negative window");
  if (t.kv_rings.size() > static_cast<size_t>(kMaxLayers)) throw std::invalid_argument("kv.rings has more than 4096 layers");
  for (int32_t r : t.kv_rings)
    if (r < 0) throw std::invalid_argument("kv.rings holds a negative ring");
  check_length(t.kv_region.size(), "kv.region");
  const int64_t context_after = static_cast<int64_t>(t.n_past) + t.batch_size + 1;
  for (int32_t e : t.kv_region)
    if (e < 0 || e >= context_after)
      throw std::invalid_argument("kv.region holds entry " + std::to_string(e) + ", outside the context of the step");
  for (const auto* rows : {&t.window_before, &t.window_after}) {
    check_length(rows->size(), "a window");
    for (const std::vector<int32_t>& row : *rows) check_length(row.size(), "a window row");
  }
  check_length(t.new_guesses.size(), "new_guesses");
  check_length(t.candidates.size(), "candidates");
  for (const CandidateTrace& c : t.candidates) check_length(c.tokens.size(), "a candidate");
  check_length(t.accepted.size(), "accepted");
  if (t.accepted_sources.size() > t.accepted.size())
    throw std::invalid_argument("accepted_sources has more items than accepted");
  check_length(t.pool_snapshot.size(), "pool.snapshot");
  for (const PoolKeySnapshot& k : t.pool_snapshot) {
    check_length(k.key.size(), "a pool key");
    check_length(k.ngrams.size(), "a pool key's n-grams");
  }
  for (double ms : {t.build_ms, t.forward_ms, t.verify_ms})
    if (!std::isfinite(ms) || ms < 0) throw std::invalid_argument("a time in ms is not a finite non-negative number");
}

}  // namespace

StepTrace step_trace_from_json(const json& j) {
  StepTrace t;
  t.step = integer<int32_t>(j.at("step"));
  t.strategy = parse_strategy(j.at("strategy").get<std::string>());
  t.auto_choice = j.value("auto_choice", std::string());
  t.n_past = integer<int32_t>(j.at("n_past"));
  t.batch_size = integer<int32_t>(j.at("batch_size"));
  t.window_before = int_rows(j.at("window_before"));
  t.window_after = int_rows(j.at("window_after"));
  t.new_guesses = ints(j.at("new_guesses"));
  for (const json& c : j.at("candidates"))
    t.candidates.push_back({ints(c.at("tokens")), integer<int32_t>(c.at("key_length")),
                            integer<int32_t>(c.at("match_length")), integer<int32_t>(c.at("origin_step")),
                            integer<int32_t>(c.at("origin_column")), c.at("padding").get<bool>(),
                            source_of(c)});
  t.accepted = ints(j.at("accepted"));
  for (const json& s : j.at("accepted_sources")) {
    TokenSource src;
    src.kind = s.at("kind").get<std::string>() == "candidate" ? TokenSource::Candidate : TokenSource::Plain;
    src.origin_step = integer<int32_t>(s.at("origin_step"));
    src.origin_column = integer<int32_t>(s.at("origin_column"));
    src.source = source_of(s);
    t.accepted_sources.push_back(src);
  }
  if (j.contains("kv")) {
    t.kv_region = ints(j.at("kv").at("region"));
    t.kv_swaps = integer<int64_t>(j.at("kv").at("swaps"));
    t.kv_layers = integer_or(j.at("kv"), "layers", 0);
    t.kv_dense_layers = integer_or(j.at("kv"), "dense_layers", 0);
    const json& kv = j.at("kv");  // (type, bytes_per_token and windows: not in traces of earlier versions)
    if (kv.contains("type")) {
      t.kv_type = kv.at("type").get<std::string>();
      t.kv_bytes_per_token = integer<int64_t>(kv.at("bytes_per_token"));
    }
    if (kv.contains("windows")) t.kv_windows = ints(kv.at("windows"));
    if (kv.contains("rings")) t.kv_rings = ints(kv.at("rings"));
  }
  const json& pool = j.at("pool");
  t.pool_keys = integer<int64_t>(pool.at("keys"));
  t.pool_ngrams = integer<int64_t>(pool.at("ngrams"));
  t.pool_lookups = integer<int64_t>(pool.at("lookups"));
  t.pool_hits = integer<int64_t>(pool.at("hits"));
  if (pool.contains("snapshot")) t.pool_snapshot = pool_snapshot_from_json(pool.at("snapshot"));
  const json& ms = j.at("ms");
  t.build_ms = ms.at("build").get<double>();
  t.forward_ms = ms.at("forward").get<double>();
  t.verify_ms = ms.at("verify").get<double>();
  check_step_trace(t);
  return t;
}

}  // namespace fafo
