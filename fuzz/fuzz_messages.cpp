// Fuzz target: chat messages as JSON (what an API request carries: roles, content as
// text or parts, tool calls, any extra fields) rendered by every built-in chat
// template. Every failure must be a ChatTemplateError or, for a body that is not a
// list of messages, std::invalid_argument.
#include <nlohmann/json.hpp>

#include "fafo/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::ordered_json messages =
      nlohmann::ordered_json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (messages.is_discarded()) return 0;
  static const char* const kTemplates[] = {"chatml", "llama2", "llama3", "mistral", "phi3", "gemma", "deepseek-r1"};
  fafo::ChatTemplateContext ctx;
  ctx.bos_token = "<s>";
  ctx.eos_token = "</s>";
  for (const char* name : kTemplates) {
    try {
      const fafo::ChatTemplate t = fafo::ChatTemplate::builtin(name);
      (void)t.render_json(messages, true, ctx);
      (void)t.render_json(messages, false, ctx);
    } catch (const fafo::ChatTemplateError&) {
    } catch (const std::invalid_argument&) {
    }
  }
  return 0;
}
