// The model a command opens when no -m is given: $FAFO_MODEL, else the stories260K.gguf
// that ships in assets/models/, found relative to the executable wherever fafo was put.
#pragma once

#include <string>
#include <vector>

namespace fafo::app {

// Where the shipped model is looked for, in order, for an executable in `exe_dir`:
//   exe_dir/../share/fafo/models   (after `cmake --install`: bin/fafo)
//   exe_dir/../../assets/models     (the build tree: build/app/cli/fafo; CMake copies it there)
//   exe_dir/../data                 (the GPU bundle: fafo-gpu/bin/fafo)
//   FAFO_SOURCE_ASSETS_DIR/models   (the source tree the build came from)
std::vector<std::string> default_model_candidates(const std::string& exe_dir);

// $FAFO_MODEL when set (it must exist), else the first candidate that exists for this
// executable. Throws std::runtime_error naming every place looked in when there is none.
std::string default_model_path();

// Fills an empty `path` with default_model_path() and says so on stderr ("model: ...
// (the default; -m picks another)"); a path already given is left as it is.
void use_default_model_if_unset(std::string& path);

}  // namespace fafo::app
