#include "test_support.h"

#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <thread>
#include <unistd.h>
#include <vector>

namespace fafo::test {

namespace {

// The folders temp_dir() made, removed when the program that made them exits normally
// (not in a forked child), unless a test failed or $FAFO_KEEP_TEST_FILES is set.
class TempDirs {
 public:
  void add(const std::filesystem::path& dir) { dirs_.push_back(dir); }
  ~TempDirs() {
    if (::getpid() != owner_) return;
    const char* keep = std::getenv("FAFO_KEEP_TEST_FILES");
    if ((keep && *keep) || ::testing::UnitTest::GetInstance()->Failed()) return;
    for (const std::filesystem::path& dir : dirs_) {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  }

 private:
  pid_t owner_ = ::getpid();
  std::vector<std::filesystem::path> dirs_;
};

TempDirs& temp_dirs() {
  static TempDirs dirs;
  return dirs;
}

}  // namespace

std::filesystem::path shared_path(const std::string& relative) {
  const char* env = std::getenv("FAFO_SHARED_DIR");
  std::filesystem::path root = env && *env ? std::filesystem::path(env) : std::filesystem::path(FAFO_SHARED_DIR);
  return root / relative;
}

std::filesystem::path binary_path(const std::string& relative) {
  const char* env = std::getenv("FAFO_BINARY_DIR");
  return (env && *env ? std::filesystem::path(env) : std::filesystem::path(FAFO_BINARY_DIR)) / relative;
}

std::filesystem::path source_path(const std::string& relative) {
  const char* env = std::getenv("FAFO_SOURCE_DIR");
  return (env && *env ? std::filesystem::path(env) : std::filesystem::path(FAFO_SOURCE_DIR)) / relative;
}

std::filesystem::path temp_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("fafo-test-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  temp_dirs().add(dir);
  return dir;
}

bool wait_for(const std::function<bool()>& done, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return done();
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

CommandResult run_command(const std::string& command) {
  static int counter = 0;
  const auto err_path = temp_dir("stderr-" + std::to_string(++counter)) / "stderr.txt";
  CommandResult r;
  FILE* p = popen((command + " 2>" + shell_quote(err_path)).c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream e(err_path);
  r.err.assign(std::istreambuf_iterator<char>(e), {});
  return r;
}

CommandResult run_fafo(const std::string& args) { return run_command(shell_quote(binary_path("app/cli/fafo")) + " " + args); }

std::string shell_quote(const std::filesystem::path& p) {
  std::string s = "'";
  for (char c : p.string()) s += c == '\'' ? std::string("'\\''") : std::string(1, c);
  s += '\'';
  return s;
}

}  // namespace fafo::test
