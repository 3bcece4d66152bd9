#include <iterator>
#include <stdexcept>
#include <string>

#include "fafo/decoding.h"
#include "fafo/kv_policy.h"

namespace fafo {

namespace {

// Strategy(i)'s name at i.
constexpr const char* kStrategyNames[] = {"ar", "jacobi", "lookahead", "fafo", "auto", "corpus", "draft"};
static_assert(std::size(kStrategyNames) == static_cast<size_t>(Strategy::Draft) + 1, "a name per strategy, in order");

}  // namespace

const char* strategy_name(Strategy s) {
  const auto i = static_cast<size_t>(s);
  return i < std::size(kStrategyNames) ? kStrategyNames[i] : "unknown";
}

std::span<const char* const> strategy_names() { return kStrategyNames; }

Strategy parse_strategy(const std::string& name) {
  for (size_t i = 0; i < std::size(kStrategyNames); ++i)
    if (name == kStrategyNames[i]) return static_cast<Strategy>(i);
  std::string names;
  for (size_t i = 0; i < std::size(kStrategyNames); ++i)
    names += std::string(i == 0 ? "" : i + 1 == std::size(kStrategyNames) ? " or " : ", ") + kStrategyNames[i];
  throw std::invalid_argument("unknown strategy '" + name + "' (choose " + names + ")");
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

void DecodingOptions::validate(const DecodingResources* resources) const {
  auto check = [](bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument(what);
  };
  check(window >= 1 && window <= 64, "--window must be in 1..64");
  check(ngram >= 2 && ngram <= 16, "--ngram must be in 2..16");
  check(guesses >= 0 && guesses <= 64, "--guesses must be in 0..64");
  check(lookback >= 1 && lookback <= 16, "--lookback must be in 1..16");
  check(corpus_max_suffix >= 1 && corpus_max_suffix <= 1024, "--corpus-max-suffix must be in 1..1024");
  check(strategy != Strategy::Corpus || (resources && resources->corpus) || !corpus_path.empty(),
        "--strategy corpus needs a corpus index (--corpus NAME.fidx)");
  check(strategy != Strategy::Corpus || guesses >= 1, "--strategy corpus needs --guesses of at least 1");
  check(draft_n >= 1 && draft_n <= 64, "--draft-n must be in 1..64");
  check(draft_kv_budget >= 1, "--draft-kv-budget must be at least 1");
  check(draft_alternatives >= 0 && draft_alternatives <= 15, "--draft-alternatives must be in 0..15");
  {
    bool known = draft_kv_policy.empty() || draft_kv_policy == "full";
    std::string names = "full";
    for (const std::string& p : kv_policy_names(/*with_draft=*/false)) {
      known = known || draft_kv_policy == p;
      names += ", " + p;
    }
    check(known, "--draft-kv-policy must be one of " + names);
  }
  check(strategy != Strategy::Draft || (resources && resources->draft_model) || !draft_model_path.empty(),
        "--strategy draft needs a draft model (--draft-model FILE.gguf, or self)");
}

}  // namespace fafo
