#include "chat_flags.h"

#include "fafo/chat_template.h"

namespace fafo::app {

void add_chat_flags(CLI::App* cmd, std::string& system, std::string& chat_template) {
  cmd->add_option("--system", system, "System message at the start of the conversation");
  cmd->add_option("--chat-template", chat_template,
                  "Chat format: a built-in name (" + builtin_chat_template_list() +
                      ") or a Jinja file (default: the model's tokenizer.chat_template; a model without one, or with "
                      "one that cannot be used, gets the built-in format it looks like, else chatml, and a note says so)");
}

}  // namespace fafo::app
