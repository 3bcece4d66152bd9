#include <stdexcept>
#include <string>

#include "fafo/decoding.h"

namespace fafo {

const char* strategy_name(Strategy s) {
  switch (s) {
    case Strategy::Ar: return "ar";
    case Strategy::Jacobi: return "jacobi";
    case Strategy::Lookahead: return "lookahead";
    case Strategy::Fafo: return "fafo";
    case Strategy::Auto: return "auto";
    case Strategy::Corpus: return "corpus";
    case Strategy::Draft: return "draft";
  }
  return "unknown";
}

Strategy parse_strategy(const std::string& name) {
  if (name == "ar") return Strategy::Ar;
  if (name == "jacobi") return Strategy::Jacobi;
  if (name == "lookahead") return Strategy::Lookahead;
  if (name == "fafo") return Strategy::Fafo;
  if (name == "auto") return Strategy::Auto;
  if (name == "corpus") return Strategy::Corpus;
  if (name == "draft") return Strategy::Draft;
  throw std::invalid_argument("unknown strategy '" + name + "' (choose auto, ar, jacobi, lookahead, fafo, corpus or draft)");
}

const char* candidate_source_name(CandidateSource s) {
  switch (s) {
    case CandidateSource::Window: return "window";
    case CandidateSource::Prompt: return "prompt";
    case CandidateSource::Corpus: return "corpus";
    case CandidateSource::Jacobi: return "jacobi";
    case CandidateSource::Draft: return "draft";
  }
  return "unknown";
}

CandidateSource parse_candidate_source(const std::string& name) {
  for (CandidateSource s : {CandidateSource::Window, CandidateSource::Prompt, CandidateSource::Corpus, CandidateSource::Jacobi,
                            CandidateSource::Draft})
    if (name == candidate_source_name(s)) return s;
  throw std::invalid_argument("unknown candidate source '" + name + "' (window, prompt, corpus, jacobi or draft)");
}

void DecodingOptions::validate() const {
  auto check = [](bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument(what);
  };
  check(window >= 1 && window <= 64, "--window must be in 1..64");
  check(ngram >= 2 && ngram <= 16, "--ngram must be in 2..16");
  check(guesses >= 0 && guesses <= 64, "--guesses must be in 0..64");
  check(lookback >= 1 && lookback <= 16, "--lookback must be in 1..16");
  check(corpus_max_suffix >= 1 && corpus_max_suffix <= 1024, "--corpus-max-suffix must be in 1..1024");
  check(strategy != Strategy::Corpus || corpus || !corpus_path.empty(),
        "--strategy corpus needs a corpus index (--corpus NAME.fidx)");
  check(strategy != Strategy::Corpus || guesses >= 1, "--strategy corpus needs --guesses of at least 1");
  check(draft_n >= 1 && draft_n <= 64, "--draft-n must be in 1..64");
  check(draft_kv_budget >= 1, "--draft-kv-budget must be at least 1");
  check(draft_alternatives >= 0 && draft_alternatives <= 15, "--draft-alternatives must be in 0..15");
  check(draft_kv_policy.empty() || draft_kv_policy == "full" || draft_kv_policy == "stream" || draft_kv_policy == "quest" ||
            draft_kv_policy == "snapkv" || draft_kv_policy == "chunks",
        "--draft-kv-policy must be full, stream, quest, snapkv or chunks");
  check(strategy != Strategy::Draft || draft_model || !draft_model_path.empty(),
        "--strategy draft needs a draft model (--draft-model FILE.gguf, or self)");
}

}  // namespace fafo
