// Reading a whole file (a prompt, a text to score, a chat template, a calibration text).
#pragma once

#include <string>
#include <string_view>

namespace fafo {

// The bytes of the file at `path`. Throws std::runtime_error "PATH: cannot read WHAT"
// when it cannot be opened or read (`what` names the file's role: "the prompt file").
std::string read_whole_file(const std::string& path, std::string_view what);

}  // namespace fafo
