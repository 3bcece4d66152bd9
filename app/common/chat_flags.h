// Flags that say how a conversation starts: the system message and the chat
// template. Shared by `fafo chat` and fafo-studio.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace fafo::app {

// --system TEXT and --chat-template NAME|FILE (resolved by fafo::resolve_chat_template).
void add_chat_flags(CLI::App* cmd, std::string& system, std::string& chat_template);

}  // namespace fafo::app
