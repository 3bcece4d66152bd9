// Chat templates: turning a conversation into the prompt text a chat model was
// trained on.
//
// Models carry their format as a Jinja2 template in the GGUF key
// `tokenizer.chat_template`. ChatTemplate parses that source once and renders it
// with fafo's own interpreter of the Jinja2 subset that real chat templates use
// (if/for/set/macro/filter blocks, namespace(), loop variables, slicing, filters,
// tests, string and dict methods, raise_exception, strftime_now), with the
// environment Hugging Face renders chat templates in: trim_blocks and
// lstrip_blocks on, undefined values printing as "" and failing when used as
// values, a sandbox that does not let templates modify lists or dicts.
//
// A template that uses a construct the interpreter does not implement fails in
// from_source() with ChatTemplateError(Kind::Unsupported) naming the construct and
// the line; a user can then pick one of the built-in formats by name instead
// (builtin(), builtin_chat_template_names()).
//
// Who calls it: fafo::resolve_chat_template (fafo/open_model.h), which picks the
// template for `fafo chat` and fafo-studio; ChatSession; tests. Thread safety: a
// ChatTemplate is immutable after construction; render() may run concurrently.
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace fafo {

namespace jinja {
struct Template;
}

struct ChatMessage {
  std::string role;     // "system", "user", "assistant" (templates decide what they accept)
  std::string content;
};

// The variables a rendering sees besides `messages` and `add_generation_prompt`.
struct ChatTemplateContext {
  std::string bos_token;  // the text of the model's BOS / EOS tokens ("<s>", "<|begin_of_text|>", ...)
  std::string eos_token;
  // Further template variables, one per key of this JSON object's text: `tools`,
  // `documents`, `date_string`, `enable_thinking`, ... (as Hugging Face's
  // apply_chat_template passes its keyword arguments). Key order is kept (tojson prints
  // it). Text, so that this header does not need nlohmann/json.hpp.
  std::string extra_json = "{}";
  // The local date and time strftime_now() formats; empty: the current time.
  std::optional<std::tm> now;
};

class ChatTemplateError : public std::runtime_error {
 public:
  enum class Kind {
    Syntax,       // the source is not valid Jinja
    Unsupported,  // valid Jinja that this interpreter does not implement; names the construct
    Undefined,    // an undefined variable or attribute used where a value is needed
    Type,         // an operation on values of the wrong type (e.g. 'str' + 'int')
    Raised,       // the template called raise_exception(message)
    Limit,        // too deep recursion, too large output, too much work
  };
  // what() is "chat template line N: MESSAGE" ("chat template: MESSAGE" when the line
  // is unknown), except for Kind::Raised, where it is the template's message itself.
  ChatTemplateError(Kind kind, std::string message, int line = 0);

  Kind kind() const { return kind_; }
  const std::string& message() const { return message_; }  // without the line prefix
  int line() const { return line_; }                         // 1-based; 0 when unknown
  // The name Jinja2 gives this kind of error: "TemplateSyntaxError", "UndefinedError",
  // "TypeError", "TemplateError" (raise_exception), ...
  const char* kind_name() const;
  ChatTemplateError with_line(int line) const { return ChatTemplateError(kind_, message_, line); }

 private:
  Kind kind_;
  std::string message_;
  int line_;
};

// The most bytes a rendering for a context of n_ctx tokens may produce: no longer
// prompt can be used, and a token is at least one byte; 8 bytes per token of context,
// at least 1 MiB.
size_t chat_rendering_cap(int64_t n_ctx);

class ChatTemplate;
// What a user is told when `t` fails to render `what` ("this conversation", "these
// messages") for a context of n_ctx tokens: for a Limit error, that the template costs
// too much and the cap the context gives; otherwise that the template refuses it, and
// why. Both name the template. fafo chat, the studio and fafo serve say this.
std::string chat_template_refusal(const ChatTemplate& t, const ChatTemplateError& e, int64_t n_ctx,
                                  std::string_view what);

class ChatTemplate {
 public:
  // Parses a Jinja2 chat template. Throws ChatTemplateError (Syntax or Unsupported)
  // naming the line. `name` is only for messages ("gguf", a file name, ...).
  static ChatTemplate from_source(std::string source, std::string name = "custom");
  // One of builtin_chat_template_names(); throws std::invalid_argument listing them
  // for any other name.
  static ChatTemplate builtin(std::string_view name);

  // Renders the conversation. add_generation_prompt appends the header that opens
  // the assistant's reply. Throws ChatTemplateError when the template fails (for
  // instance raise_exception("System role not supported") from Gemma's template).
  // `max_bytes`: the most the rendering may produce, checked as it grows (a Limit
  // error naming the template and the cap); 0: the engine's general limit (2 MiB).
  // Callers that know the context pass chat_rendering_cap(n_ctx).
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                     const ChatTemplateContext& context = {}, size_t max_bytes = 0) const;
  // Same with messages as a JSON array of objects, for fields beyond role and
  // content (tool_calls, tool_call_id, ...).
  std::string render_json(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                          const ChatTemplateContext& context = {}, size_t max_bytes = 0) const;

  // The text the template writes right after an assistant message's content to close
  // the turn ("<|im_end|>", "<|eot_id|>", "</s>", ...): the first line of what follows
  // the content in a probe conversation, trimmed. Empty when there is none or when the
  // probe does not render. A model that writes it as plain text has ended its reply.
  std::string assistant_turn_end(const ChatTemplateContext& context) const;

  const std::string& name() const { return name_; }
  const std::string& source() const { return source_; }

 private:
  ChatTemplate() = default;
  std::string name_;
  std::string source_;
  std::shared_ptr<const jinja::Template> program_;
};

// Names accepted by ChatTemplate::builtin: chatml, llama2, llama3, mistral, phi3,
// gemma, deepseek-r1. Their sources are Jinja templates rendered by the same
// interpreter; see runtime/src/chat/builtin_templates.cpp for the exact formats.
const std::vector<std::string>& builtin_chat_template_names();
// The same names joined with ", ", for messages and help texts.
std::string builtin_chat_template_list();

// The built-in format a template source looks like (by its marker tokens:
// "<|im_start|>" is chatml, "<|start_header_id|>" llama3, ...), or nullopt.
std::optional<std::string> builtin_template_name_for(std::string_view source);

}  // namespace fafo
