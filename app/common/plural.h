// Counts in words as a person writes them: "1 token", "2 tokens", "0 tokens".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace fafo::app {

// "N WORD" with WORD's plural ("s" added, or `plural` when given) unless N is 1.
inline std::string count_of(int64_t n, std::string_view word, std::string_view plural = {}) {
  std::string out = std::to_string(n) + " ";
  if (n == 1) return out.append(word);
  if (!plural.empty()) return out.append(plural);
  return out.append(word).append("s");
}

}  // namespace fafo::app
