// One wording for a file a command cannot open, whatever the flag that named it (-m, -f,
// --prompts, --corpus, --draft-model, --trace, ...): "cannot open PATH: REASON", REASON
// in the system's words (strerror: "No such file or directory", "Is a directory",
// "Permission denied"). main() prints it as "fafo: error: cannot open PATH: REASON".
#pragma once

#include <string>

#include "fafo/decoding.h"

namespace fafo::app {

// "cannot open PATH: " and strerror(error_number).
std::string cannot_open_message(const std::string& path, int error_number);

// Throws std::runtime_error(cannot_open_message(...)) unless `path` opens for reading
// and is not a folder.
void require_readable_file(const std::string& path);

// require_readable_file for the files the decoding flags name: --corpus, and
// --draft-model unless it is "self".
void require_decoding_files(const DecodingOptions& decoding);

// For --chat-template NAME|FILE: a choice that names a file (it has a '/' or ends in
// .jinja) must open; a built-in name is left to resolve_chat_template.
void require_chat_template_file(const std::string& choice);

}  // namespace fafo::app
