#include "fafo/step_trace_json.h"

namespace fafo {

using nlohmann::json;

namespace {

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
    s.key = k.at("key").get<std::vector<int32_t>>();
    s.hits = k.at("hits").get<int64_t>();
    s.age = k.at("age").get<int64_t>();
    s.retrieved = k.value("retrieved", false);
    for (const json& n : k.at("ngrams"))
      s.ngrams.push_back({n.at("tokens").get<std::vector<int32_t>>(), n.at("origin_step").get<int32_t>(),
                          n.at("origin_column").get<int32_t>(), n.at("hits").get<int64_t>(), n.at("age").get<int64_t>()});
    out.push_back(std::move(s));
  }
  return out;
}

// A candidate's source; traces written before sources were recorded have none: the
// pool's, by its origin.
CandidateSource source_of(const json& c) {
  if (c.contains("source")) return parse_candidate_source(c.at("source").get<std::string>());
  return c.at("origin_step").get<int32_t>() < 0 ? CandidateSource::Prompt : CandidateSource::Window;
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

StepTrace step_trace_from_json(const json& j) {
  StepTrace t;
  t.step = j.at("step").get<int32_t>();
  t.strategy = parse_strategy(j.at("strategy").get<std::string>());
  t.auto_choice = j.value("auto_choice", std::string());
  t.n_past = j.at("n_past").get<int32_t>();
  t.batch_size = j.at("batch_size").get<int32_t>();
  t.window_before = j.at("window_before").get<std::vector<std::vector<int32_t>>>();
  t.window_after = j.at("window_after").get<std::vector<std::vector<int32_t>>>();
  t.new_guesses = j.at("new_guesses").get<std::vector<int32_t>>();
  for (const json& c : j.at("candidates"))
    t.candidates.push_back({c.at("tokens").get<std::vector<int32_t>>(), c.at("key_length").get<int32_t>(),
                            c.at("match_length").get<int32_t>(), c.at("origin_step").get<int32_t>(),
                            c.at("origin_column").get<int32_t>(), c.at("padding").get<bool>(),
                            source_of(c)});
  t.accepted = j.at("accepted").get<std::vector<int32_t>>();
  for (const json& s : j.at("accepted_sources")) {
    TokenSource src;
    src.kind = s.at("kind").get<std::string>() == "candidate" ? TokenSource::Candidate : TokenSource::Plain;
    src.origin_step = s.at("origin_step").get<int32_t>();
    src.origin_column = s.at("origin_column").get<int32_t>();
    src.source = source_of(s);
    t.accepted_sources.push_back(src);
  }
  if (j.contains("kv")) {
    t.kv_region = j.at("kv").at("region").get<std::vector<int32_t>>();
    t.kv_swaps = j.at("kv").at("swaps").get<int64_t>();
    t.kv_layers = j.at("kv").value("layers", 0);
    t.kv_dense_layers = j.at("kv").value("dense_layers", 0);
  }
  const json& pool = j.at("pool");
  t.pool_keys = pool.at("keys").get<int64_t>();
  t.pool_ngrams = pool.at("ngrams").get<int64_t>();
  t.pool_lookups = pool.at("lookups").get<int64_t>();
  t.pool_hits = pool.at("hits").get<int64_t>();
  if (pool.contains("snapshot")) t.pool_snapshot = pool_snapshot_from_json(pool.at("snapshot"));
  const json& ms = j.at("ms");
  t.build_ms = ms.at("build").get<double>();
  t.forward_ms = ms.at("forward").get<double>();
  t.verify_ms = ms.at("verify").get<double>();
  return t;
}

}  // namespace fafo
