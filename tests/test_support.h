// Shared helpers for the test suite: where ../shared lives, and skipping when it is absent.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <utility>

#include <gtest/gtest.h>

namespace fafo::test {

// Path inside ../shared (FAFO_SHARED_DIR at configure time, or $FAFO_SHARED_DIR).
std::filesystem::path shared_path(const std::string& relative);
// Path of a built program (e.g. "app/cli/fafo"): in the build folder baked in at
// configure time, or in $FAFO_BINARY_DIR (a build moved elsewhere, e.g. unpacked).
std::filesystem::path binary_path(const std::string& relative);
// Path inside the source tree (FAFO_SOURCE_DIR at configure time, or $FAFO_SOURCE_DIR).
std::filesystem::path source_path(const std::string& relative);
// A fresh temporary directory for one test, removed when the test program ends unless a
// test failed or $FAFO_KEEP_TEST_FILES is set (then it stays, for a look).
std::filesystem::path temp_dir(const std::string& name);

// The bytes of a file ("" when it cannot be read).
std::string read_text(const std::filesystem::path& path);

// Polls `done` every 5 ms until it holds (true) or `seconds` have passed (then what it
// says last).
bool wait_for(const std::function<bool()>& done, double seconds = 60.0);

// Runs a shell command; captures stdout and stderr separately.
struct CommandResult {
  int exit_code = -1;  // -1: did not exit normally
  std::string out;
  std::string err;
};
CommandResult run_command(const std::string& command);
// Runs the built `fafo` with these arguments.
CommandResult run_fafo(const std::string& args);
// A path quoted for the shell.
std::string shell_quote(const std::filesystem::path& p);

}  // namespace fafo::test

// Expects `text` inside `s` (a std::string or a C string), printing `s` when it is not.
#define EXPECT_HAS(s, text) EXPECT_NE(std::string(s).find(text), std::string::npos) << "in: " << (s)

// Skips the current test, saying why, when a shared file is missing.
#define FAFO_REQUIRE_SHARED(path_var, relative)                                            \
  const std::filesystem::path path_var = ::fafo::test::shared_path(relative);             \
  if (!std::filesystem::exists(path_var))                                                 \
    GTEST_SKIP() << "shared data not found: " << path_var.string()                         \
                 << " (tests read ../shared beside the checkout; set FAFO_SHARED_DIR)"
