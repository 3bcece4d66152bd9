#include "settings.h"

#include <exception>

namespace fafo::studio {

StudioSettings settings_from_options(const AppOptions& o) {
  StudioSettings s;
  s.open = o.open;
  s.system = o.system;
  s.generation.n_predict = o.n_predict;
  s.generation.sampling = o.sampling;
  s.generation.decoding = o.decoding;
  s.generation.kv = o.kv;
  s.strategy_chosen = o.strategy_given;
  return s;
}

GenerationOptions debugger_generation(const StudioSettings& s) {
  GenerationOptions g = s.generation;
  if (!s.strategy_chosen && g.decoding.strategy == Strategy::Auto) g.decoding.strategy = Strategy::Fafo;
  return g;
}

ChatSetup chat_setup(const StudioSettings& s) { return {s.open.chat_template, s.system}; }

std::string settings_problem(const StudioSettings& s) {
  try {
    s.generation.decoding.validate();
    s.generation.kv.validate();
  } catch (const std::exception& e) {
    return e.what();
  }
  if (s.generation.n_predict == 0 || s.generation.n_predict < -1) return "max tokens must be -1 (no limit) or positive";
  if (s.generation.sampling.temperature < 0.0f) return "the temperature must be >= 0";
  return "";
}

}  // namespace fafo::studio
