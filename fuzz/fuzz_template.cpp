// Fuzz target: a chat template's source parsed and rendered with a conversation, tools
// and extra variables. Every failure must be a ChatTemplateError.
#include "fafo/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string source(reinterpret_cast<const char*>(data), size);
  fafo::ChatTemplateContext ctx;
  ctx.bos_token = "<s>";
  ctx.eos_token = "</s>";
  ctx.extra_json = R"({"tools": [{"name": "f", "parameters": {"x": 1}}], "n": 9223372036854775807, "f": 1.5, "s": "text"})";
  const std::vector<fafo::ChatMessage> messages = {
      {"system", "Be brief."}, {"user", "Hello <|im_start|>"}, {"assistant", "Hi!"}, {"user", "2 + 2?"}};
  try {
    const fafo::ChatTemplate t = fafo::ChatTemplate::from_source(source);
    (void)t.render(messages, true, ctx);
    (void)t.render({}, false, ctx);
  } catch (const fafo::ChatTemplateError&) {
  }
  return 0;
}
