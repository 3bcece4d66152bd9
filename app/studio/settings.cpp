#include "settings.h"

#include <exception>

namespace fafo::studio {

StudioSettings settings_from_options(const AppOptions& o) {
  StudioSettings s;
  s.model_path = o.model;
  s.backend = o.backend;
  s.device = o.device;
  s.threads = o.threads;
  s.n_ctx = o.n_ctx;
  s.kv_type = parse_kv_cache_type(o.cache_type);
  s.chat_template = o.chat_template;
  s.system = o.system;
  s.generation.n_predict = o.n_predict;
  s.generation.sampling = o.sampling;
  s.generation.decoding = o.decoding;
  s.generation.kv = o.kv;
  return s;
}

ModelRequest model_request(const StudioSettings& s) {
  ModelRequest r;
  r.path = s.model_path;
  r.backend.name = s.backend;
  r.backend.device = s.device;
  r.backend.threads = s.threads;
  r.n_ctx = s.n_ctx;
  r.kv_type = s.kv_type;
  return r;
}

ChatSetup chat_setup(const StudioSettings& s) { return {s.chat_template, s.system}; }

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
