#include "openai_api.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "fafo/sampler.h"

namespace fafo::server {

using nlohmann::json;
using nlohmann::ordered_json;

json ApiError::body() const {
  return json{{"error",
               {{"message", what()},
                {"type", type_},
                {"param", param_.empty() ? json(nullptr) : json(param_)},
                {"code", code_.empty() ? json(nullptr) : json(code_)}}}};
}

namespace {

ApiError bad(const std::string& param, const std::string& message) { return ApiError(400, message, param); }

double number(const ordered_json& v, const std::string& name, double lo, double hi) {
  if (!v.is_number()) throw bad(name, "'" + name + "' must be a number, not " + std::string(v.type_name()));
  const double d = v.get<double>();
  if (!std::isfinite(d) || d < lo || d > hi)
    throw bad(name, "'" + name + "' must be between " + json(lo).dump() + " and " + json(hi).dump() + ", not " + v.dump());
  return d;
}

int64_t integer(const ordered_json& v, const std::string& name, int64_t lo, int64_t hi) {
  if (!v.is_number_integer())
    throw bad(name, "'" + name + "' must be an integer, not " + (v.is_number() ? v.dump() : std::string(v.type_name())));
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    throw bad(name, "'" + name + "' is too large: " + v.dump());
  const int64_t n = v.get<int64_t>();
  if (n < lo || n > hi)
    throw bad(name, "'" + name + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi) + ", not " + v.dump());
  return n;
}

// A message's content: a string, null (an assistant turn with tool calls), or a list
// of parts whose text parts are joined.
void check_messages(const ordered_json& messages) {
  if (!messages.is_array()) throw bad("messages", "'messages' must be a list of messages");
  if (messages.empty()) throw bad("messages", "'messages' must hold at least one message");
  for (size_t i = 0; i < messages.size(); ++i) {
    const ordered_json& m = messages[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw bad(at, "'" + at + "' must be an object with a role and a content");
    if (!m.contains("role") || !m["role"].is_string()) throw bad(at + ".role", "'" + at + ".role' must be a string");
    if (!m.contains("content")) throw bad(at + ".content", "'" + at + ".content' is missing");
    const ordered_json& c = m["content"];
    if (c.is_null() || c.is_string()) continue;
    if (!c.is_array()) throw bad(at + ".content", "'" + at + ".content' must be a string or a list of parts");
    for (size_t p = 0; p < c.size(); ++p) {
      const ordered_json& part = c[p];
      const std::string pat = at + ".content[" + std::to_string(p) + "]";
      if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
        throw bad(pat, "'" + pat + "' must be an object with a type");
      if (part["type"] != "text") throw bad(pat + ".type", "'" + pat + ".type' " + part["type"].dump() + " is not supported (text only)");
      if (!part.contains("text") || !part["text"].is_string()) throw bad(pat + ".text", "'" + pat + ".text' must be a string");
    }
  }
}

// Text parts joined into one string, as chat templates expect a string content.
ordered_json flatten_content(ordered_json messages) {
  for (ordered_json& m : messages) {
    ordered_json& c = m["content"];
    if (c.is_array()) {
      std::string text;
      for (const ordered_json& part : c) text += part["text"].get<std::string>();
      c = text;
    } else if (c.is_null()) {
      c = "";
    }
  }
  return messages;
}

}  // namespace

CompletionRequest parse_completion_request(const std::string& body, bool chat, const RequestDefaults& defaults) {
  // Nesting is limited before anything recurses over the value (copies, messages, errors).
  constexpr int kMaxDepth = 64;
  const ordered_json::parser_callback_t depth_check = [](int depth, ordered_json::parse_event_t, ordered_json&) {
    if (depth > kMaxDepth) throw bad("", "the request body nests deeper than " + std::to_string(kMaxDepth) + " levels");
    return true;
  };
  ordered_json j = ordered_json::parse(body, depth_check, false);
  if (j.is_discarded()) throw bad("", "the request body is not valid JSON");
  if (!j.is_object()) throw bad("", "the request body must be a JSON object");
  CompletionRequest r;
  r.chat = chat;
  r.sampling = defaults.sampling;
  r.decoding = defaults.decoding;
  r.max_tokens = defaults.max_tokens;
  if (chat) {
    if (!j.contains("messages")) throw bad("messages", "'messages' is required");
    check_messages(j["messages"]);
    r.messages = flatten_content(j["messages"]);
  } else {
    if (!j.contains("prompt")) throw bad("prompt", "'prompt' is required");
    const ordered_json& p = j["prompt"];
    if (p.is_string()) {
      r.prompt = p.get<std::string>();
    } else if (p.is_array() && p.size() == 1 && p[0].is_string()) {
      r.prompt = p[0].get<std::string>();
    } else {
      throw bad("prompt", "'prompt' must be a string (or a list of one string)");
    }
    if (r.prompt.empty()) throw bad("prompt", "'prompt' is empty");
  }
  if (j.contains("model") && !j["model"].is_null()) {
    if (!j["model"].is_string()) throw bad("model", "'model' must be a string");
    r.model = j["model"].get<std::string>();
  }
  if (j.contains("stream") && !j["stream"].is_null()) {
    if (!j["stream"].is_boolean()) throw bad("stream", "'stream' must be true or false");
    r.stream = j["stream"].get<bool>();
  }
  if (j.contains("stream_options") && j["stream_options"].is_object() && j["stream_options"].contains("include_usage"))
    r.include_usage = j["stream_options"]["include_usage"].is_boolean() && j["stream_options"]["include_usage"].get<bool>();
  for (const char* name : {"max_tokens", "max_completion_tokens"})
    if (j.contains(name) && !j[name].is_null()) r.max_tokens = static_cast<int32_t>(integer(j[name], name, 1, 1 << 24));
  if (j.contains("n") && !j["n"].is_null() && integer(j["n"], "n", 1, 128) != 1)
    throw bad("n", "'n' must be 1: fafo answers with one choice");
  if (j.contains("stop") && !j["stop"].is_null()) {
    const ordered_json& s = j["stop"];
    if (s.is_string()) {
      r.stop.push_back(s.get<std::string>());
    } else if (s.is_array()) {
      if (s.size() > 4) throw bad("stop", "'stop' holds at most 4 strings");
      for (const ordered_json& x : s) {
        if (!x.is_string()) throw bad("stop", "'stop' must be a string or a list of strings");
        r.stop.push_back(x.get<std::string>());
      }
    } else {
      throw bad("stop", "'stop' must be a string or a list of strings");
    }
    std::erase_if(r.stop, [](const std::string& x) { return x.empty(); });
  }
  auto opt = [&](const char* name) -> const ordered_json* {
    return j.contains(name) && !j[name].is_null() ? &j[name] : nullptr;
  };
  if (const ordered_json* v = opt("temperature")) r.sampling.temperature = static_cast<float>(number(*v, "temperature", 0, 2));
  if (const ordered_json* v = opt("top_p")) r.sampling.top_p = static_cast<float>(number(*v, "top_p", 0, 1));
  if (const ordered_json* v = opt("top_k")) r.sampling.top_k = static_cast<int32_t>(integer(*v, "top_k", 0, 1 << 20));
  if (const ordered_json* v = opt("min_p")) r.sampling.min_p = static_cast<float>(number(*v, "min_p", 0, 1));
  if (const ordered_json* v = opt("seed")) {
    r.sampling.seed = static_cast<uint64_t>(integer(*v, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()));
    r.seed_given = true;
  }
  if (r.sampling.top_p <= 0.0f) throw bad("top_p", "'top_p' must be greater than 0");
  if (r.sampling.min_p >= 1.0f) throw bad("min_p", "'min_p' must be less than 1");
  try {
    Sampler check(r.sampling);
  } catch (const std::exception& e) {
    throw bad("", std::string("sampling: ") + e.what());
  }
  if (const ordered_json* v = opt("ignore_eos")) {
    if (!v->is_boolean()) throw bad("ignore_eos", "'ignore_eos' must be true or false");
    r.ignore_eos = v->get<bool>();
  }
  // fafo's fields: the decoding strategy and its parameters.
  if (const ordered_json* v = opt("strategy")) {
    if (!v->is_string()) throw bad("strategy", "'strategy' must be a string");
    try {
      r.decoding.strategy = parse_strategy(v->get<std::string>());
    } catch (const std::exception& e) {
      throw bad("strategy", std::string("'strategy': ") + e.what());
    }
    if (r.decoding.strategy == Strategy::Draft && r.decoding.draft_model_path.empty())
      throw bad("strategy", "'strategy' \"draft\" needs a draft model, which this server was not started with (--draft-model)");
    if (r.decoding.strategy == Strategy::Corpus && !defaults.corpus)
      throw bad("strategy", "'strategy' \"corpus\" needs a corpus index, which this server was not started with (--corpus)");
  }
  for (auto [name, field] : {std::pair{"window", &r.decoding.window}, std::pair{"ngram", &r.decoding.ngram},
                             std::pair{"guesses", &r.decoding.guesses}, std::pair{"lookback", &r.decoding.lookback}})
    if (const ordered_json* v = opt(name)) *field = static_cast<int32_t>(integer(*v, name, 1, 64));
  try {
    r.decoding.validate();
  } catch (const std::exception& e) {
    throw bad("strategy", e.what());
  }
  return r;
}

json usage_json(const Usage& u) {
  return json{{"prompt_tokens", u.prompt_tokens},
              {"completion_tokens", u.completion_tokens},
              {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

json fafo_json(const Usage& u) {
  return json{{"steps", u.steps},
              {"tau", u.steps > 0 ? static_cast<double>(u.completion_tokens) / u.steps : 0.0},
              {"strategy", u.strategy},
              {"reused_prompt_tokens", u.reused_tokens}};
}

json completion_response(bool chat, const std::string& id, int64_t created, const std::string& model,
                         const std::string& text, const std::string& finish_reason, const Usage& usage) {
  json choice = {{"index", 0}, {"finish_reason", finish_reason}, {"logprobs", nullptr}};
  if (chat)
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  else
    choice["text"] = text;
  return json{{"id", id},
              {"object", chat ? "chat.completion" : "text_completion"},
              {"created", created},
              {"model", model},
              {"choices", json::array({choice})},
              {"usage", usage_json(usage)},
              {"fafo", fafo_json(usage)}};
}

json completion_chunk(bool chat, const std::string& id, int64_t created, const std::string& model,
                      const std::string& text, const std::string* finish_reason, bool first) {
  json choice = {{"index", 0}, {"finish_reason", finish_reason ? json(*finish_reason) : json(nullptr)}, {"logprobs", nullptr}};
  if (chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || (first && !finish_reason)) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  return json{{"id", id},
              {"object", chat ? "chat.completion.chunk" : "text_completion"},
              {"created", created},
              {"model", model},
              {"choices", json::array({choice})}};
}

json usage_chunk(bool chat, const std::string& id, int64_t created, const std::string& model, const Usage& usage) {
  return json{{"id", id},
              {"object", chat ? "chat.completion.chunk" : "text_completion"},
              {"created", created},
              {"model", model},
              {"choices", json::array()},
              {"usage", usage_json(usage)},
              {"fafo", fafo_json(usage)}};
}

StopText::StopText(std::vector<std::string> stops) : stops_(std::move(stops)) {}

std::string StopText::push(const std::string& piece) {
  if (stopped_) return "";
  pending_ += piece;
  size_t cut = std::string::npos;
  for (const std::string& s : stops_) cut = std::min(cut, pending_.find(s));
  if (cut != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, cut);
    pending_.clear();
    return out;
  }
  // Hold back the longest tail that starts a stop string.
  size_t hold = 0;
  for (const std::string& s : stops_)
    for (size_t n = std::min(s.size() - 1, pending_.size()); n > hold; --n)
      if (pending_.compare(pending_.size() - n, n, s, 0, n) == 0) {
        hold = n;
        break;
      }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopText::finish() {
  std::string out = stopped_ ? "" : pending_;
  pending_.clear();
  return out;
}

}  // namespace fafo::server
