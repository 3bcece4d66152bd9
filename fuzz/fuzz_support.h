// Shared by the fuzz targets: a scratch file per process for inputs that are read from
// disk (GGUF files and corpus indexes are memory-mapped), and the shared data folder.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace fafo::fuzz {

// Writes the input to this process's scratch file (in /dev/shm when it exists) and
// returns its path.
inline std::string write_input(const uint8_t* data, size_t size, const char* suffix) {
  static const std::string path = [suffix] {
    const char* dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    return std::string(dir) + "/fafo-fuzz-" + std::to_string(getpid()) + suffix;
  }();
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  return path;
}

// The shared data folder: $FAFO_SHARED_DIR, else the one configured at build time.
inline std::string shared_dir() {
  const char* env = std::getenv("FAFO_SHARED_DIR");
  return env && *env ? env : FAFO_FUZZ_SHARED_DIR;
}

}  // namespace fafo::fuzz
