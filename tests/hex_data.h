// Hex strings of the golden data files (tests/data/quant/*.json): bytes, and float32
// values as their little-endian bytes.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace fafo::test {

inline std::vector<uint8_t> from_hex(const std::string& s) {
  auto nibble = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  std::vector<uint8_t> out(s.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(nibble(s[2 * i]) << 4 | nibble(s[2 * i + 1]));
  return out;
}

inline std::vector<float> floats_from_hex(const std::string& s) {
  const std::vector<uint8_t> bytes = from_hex(s);
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

}  // namespace fafo::test
