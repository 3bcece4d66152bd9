// The ChatTemplate front-end: the chat variables Hugging Face's
// apply_chat_template passes (messages, add_generation_prompt, bos/eos tokens,
// raise_exception, strftime_now, extra keyword arguments) around the Jinja
// interpreter.
#include "fafo/chat_template.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <ctime>

#include "chat/builtin_templates.h"
#include "chat/jinja_interpreter.h"
#include "chat/jinja_parser.h"

namespace fafo {

using jinja::CallArgs;
using jinja::Value;

namespace {

std::string error_text(ChatTemplateError::Kind kind, const std::string& message, int line) {
  if (kind == ChatTemplateError::Kind::Raised) return message;
  return (line > 0 ? "chat template line " + std::to_string(line) : std::string("chat template")) + ": " + message;
}

std::tm current_local_time() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  return tm;
}

std::string format_time(const std::string& format, const std::tm& tm) {
  if (format.empty()) return "";
  for (size_t size = 256; size <= (1u << 16); size *= 4) {
    std::string buf(size, '\0');
    const size_t n = std::strftime(buf.data(), buf.size(), format.c_str(), &tm);
    if (n > 0) {
      buf.resize(n);
      return buf;
    }
  }
  return "";  // the format expands to nothing (or absurdly much)
}

std::vector<std::pair<std::string, Value>> chat_variables(Value messages, bool add_generation_prompt,
                                                          const ChatTemplateContext& ctx) {
  std::vector<std::pair<std::string, Value>> vars;
  vars.emplace_back("messages", std::move(messages));
  vars.emplace_back("add_generation_prompt", Value::boolean(add_generation_prompt));
  vars.emplace_back("bos_token", Value::string(ctx.bos_token));
  vars.emplace_back("eos_token", Value::string(ctx.eos_token));
  vars.emplace_back("raise_exception", Value::function("raise_exception", [](CallArgs& a) -> Value {
                      throw ChatTemplateError(ChatTemplateError::Kind::Raised,
                                              a.positional.empty() ? "" : jinja::to_str(a.positional[0]));
                    }));
  const std::tm now = ctx.now ? *ctx.now : current_local_time();
  vars.emplace_back("strftime_now", Value::function("strftime_now", [now](CallArgs& a) {
                      const Value* format = a.get(0, "format");
                      if (!format || !format->is_string()) jinja::fail_type("strftime_now() needs a format string");
                      return Value::string(format_time(format->as_string(), now));
                    }));
  nlohmann::ordered_json extra;
  try {
    extra = nlohmann::ordered_json::parse(ctx.extra_json);
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("ChatTemplateContext::extra_json is not JSON: ") + e.what());
  }
  if (!extra.is_object()) throw std::invalid_argument("ChatTemplateContext::extra_json must be a JSON object");
  for (const auto& [key, value] : extra.items()) vars.emplace_back(key, jinja::from_json(value));
  return vars;
}

}  // namespace

// ---- ChatTemplateError -----------------------------------------------------------

ChatTemplateError::ChatTemplateError(Kind kind, std::string message, int line)
    : std::runtime_error(error_text(kind, message, line)), kind_(kind), message_(std::move(message)), line_(line) {}

const char* ChatTemplateError::kind_name() const {
  switch (kind_) {
    case Kind::Syntax: return "TemplateSyntaxError";
    case Kind::Unsupported: return "UnsupportedConstruct";
    case Kind::Undefined: return "UndefinedError";
    case Kind::Type: return "TypeError";
    case Kind::Raised: return "TemplateError";
    case Kind::Limit: return "LimitError";
  }
  return "TemplateError";
}

// ---- ChatTemplate -----------------------------------------------------------------

ChatTemplate ChatTemplate::from_source(std::string source, std::string name) {
  ChatTemplate t;
  t.program_ = jinja::parse_template(source);
  t.source_ = std::move(source);
  t.name_ = std::move(name);
  return t;
}

ChatTemplate ChatTemplate::builtin(std::string_view name) {
  const chat::BuiltinTemplate* b = chat::find_builtin_template(name);
  if (!b)
    throw std::invalid_argument("unknown chat template '" + std::string(name) + "' (built-in: " +
                                builtin_chat_template_list() + ")");
  return from_source(std::string(b->source), std::string(b->name));
}

size_t chat_rendering_cap(int64_t n_ctx) {
  return std::max<size_t>(size_t{1} << 20, static_cast<size_t>(std::max<int64_t>(n_ctx, 0)) * 8);
}

std::string chat_template_refusal(const ChatTemplate& t, const ChatTemplateError& e, int64_t n_ctx,
                                  std::string_view what) {
  const std::string head = "the chat template (" + t.name() + ") ";
  if (e.kind() == ChatTemplateError::Kind::Limit)
    return head + "costs too much to render " + std::string(what) + ": " + e.message() + " (a context of " +
           std::to_string(n_ctx) + " tokens caps a rendering at " + std::to_string(chat_rendering_cap(n_ctx)) + " bytes)";
  return head + "refuses " + std::string(what) + ": " + e.what();
}

namespace {

jinja::RenderLimits limits_for(size_t max_bytes) {
  jinja::RenderLimits limits;
  if (max_bytes > 0) limits.max_output_bytes = max_bytes;
  return limits;
}

}  // namespace

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                 const ChatTemplateContext& context, size_t max_bytes) const {
  std::vector<Value> list;
  for (const ChatMessage& m : messages) {
    Value d = Value::dict();
    d.as_dict().entries.emplace_back(Value::string("role"), Value::string(m.role));
    d.as_dict().entries.emplace_back(Value::string("content"), Value::string(m.content));
    list.push_back(std::move(d));
  }
  return jinja::render(*program_, chat_variables(Value::list(std::move(list)), add_generation_prompt, context),
                       limits_for(max_bytes));
}

std::string ChatTemplate::render_json(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                      const ChatTemplateContext& context, size_t max_bytes) const {
  if (!messages.is_array()) throw std::invalid_argument("chat messages must be a JSON array");
  return jinja::render(*program_, chat_variables(jinja::from_json(messages), add_generation_prompt, context),
                       limits_for(max_bytes));
}

std::string ChatTemplate::assistant_turn_end(const ChatTemplateContext& context) const {
  static const std::string marker = "fafo-probe-reply-7f3a";
  std::string text;
  try {
    text = render(std::vector<ChatMessage>{{"user", "Hello"}, {"assistant", marker}}, false, context);
  } catch (const ChatTemplateError&) {
    return "";
  }
  const size_t at = text.rfind(marker);
  if (at == std::string::npos) return "";
  std::string rest = text.substr(at + marker.size());
  const size_t begin = rest.find_first_not_of(" \t\n");
  if (begin == std::string::npos) return "";
  rest = rest.substr(begin);
  rest = rest.substr(0, rest.find('\n'));
  while (!rest.empty() && (rest.back() == ' ' || rest.back() == '\t')) rest.pop_back();
  return rest;
}

const std::vector<std::string>& builtin_chat_template_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const chat::BuiltinTemplate& t : chat::builtin_templates()) n.emplace_back(t.name);
    return n;
  }();
  return names;
}

std::string builtin_chat_template_list() {
  std::string list;
  for (const std::string& n : builtin_chat_template_names()) list += (list.empty() ? "" : ", ") + n;
  return list;
}

std::optional<std::string> builtin_template_name_for(std::string_view source) {
  auto has = [&](std::string_view s) { return source.find(s) != std::string_view::npos; };
  if (has("<|im_start|>")) return "chatml";
  if (has("<|start_header_id|>")) return "llama3";
  if (has("<start_of_turn>")) return "gemma";
  if (has("<\xEF\xBD\x9C" "User\xEF\xBD\x9C>")) return "deepseek-r1";  // <｜User｜>
  if (has("<|assistant|>") && has("<|end|>")) return "phi3";
  if (has("[INST]")) return has("<<SYS>>") ? "llama2" : "mistral";
  return std::nullopt;
}

}  // namespace fafo
