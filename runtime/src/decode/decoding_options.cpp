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
  }
  return "unknown";
}

Strategy parse_strategy(const std::string& name) {
  if (name == "ar") return Strategy::Ar;
  if (name == "jacobi") return Strategy::Jacobi;
  if (name == "lookahead") return Strategy::Lookahead;
  if (name == "fafo") return Strategy::Fafo;
  if (name == "auto") return Strategy::Auto;
  throw std::invalid_argument("unknown strategy '" + name + "' (choose auto, ar, jacobi, lookahead or fafo)");
}

void DecodingOptions::validate() const {
  auto check = [](bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument(what);
  };
  check(window >= 1 && window <= 64, "--window must be in 1..64");
  check(ngram >= 2 && ngram <= 16, "--ngram must be in 2..16");
  check(guesses >= 0 && guesses <= 64, "--guesses must be in 0..64");
  check(lookback >= 1 && lookback <= 16, "--lookback must be in 1..16");
}

}  // namespace fafo
