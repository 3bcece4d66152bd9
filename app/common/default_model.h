// The files that ship in assets/ and that commands find without being told where:
// the model a command opens when no -m is given ($FAFO_MODEL, else the stories260K.gguf
// of assets/models/) and the prompts `fafo bench --strategies` runs when no --prompts
// is given (assets/prompts/mt_bench_20.jsonl), both found relative to the executable
// wherever fafo was put.
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
// (the default; -m picks another)"); a path already given is left as it is (the
// commands check it with require_readable_file, input_files.h, once their options are).
void use_default_model_if_unset(std::string& path);

// Where the shipped prompts are looked for, in order, for an executable in `exe_dir`:
//   exe_dir/../share/fafo/prompts   (after `cmake --install`)
//   exe_dir/../../assets/prompts     (the build tree; CMake copies them there)
//   exe_dir/../data                  (the GPU bundle, whose tools/gpu-bundle.sh writes the same 20 questions)
//   FAFO_SOURCE_ASSETS_DIR/prompts   (the source tree the build came from)
std::vector<std::string> default_prompts_candidates(const std::string& exe_dir);

// The first candidate that exists for this executable. Throws std::runtime_error naming
// every place looked in when there is none.
std::string default_prompts_path();

}  // namespace fafo::app
