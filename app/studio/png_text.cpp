#include "png_text.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <fstream>
#include <iterator>

namespace fafo::studio {

namespace {

constexpr std::array<uint8_t, 8> kSignature = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

// CRC-32 (the polynomial of PNG, zlib and gzip, reflected), over a chunk's type and data.
uint32_t crc32(const uint8_t* data, size_t n) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ data[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t read_u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) << 24 | static_cast<uint32_t>(p[1]) << 16 | static_cast<uint32_t>(p[2]) << 8 | p[3];
}

void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
}

bool is_png(const std::vector<uint8_t>& png) {
  return png.size() >= kSignature.size() && std::equal(kSignature.begin(), kSignature.end(), png.begin());
}

}  // namespace

bool insert_png_text(std::vector<uint8_t>& png, const std::string& keyword, const std::string& text) {
  if (!is_png(png) || png.size() < 8 + 12 || keyword.empty() || keyword.size() > 79) return false;
  for (char c : keyword)
    if (static_cast<unsigned char>(c) < 32 || c == 127) return false;
  const size_t header_end = 8 + 12 + read_u32(&png[8]);  // signature, then IHDR: length, type, data, CRC
  if (header_end > png.size() || std::string(png.begin() + 12, png.begin() + 16) != "IHDR") return false;
  std::vector<uint8_t> chunk;
  put_u32(chunk, static_cast<uint32_t>(keyword.size() + 1 + text.size()));
  for (char c : std::string("tEXt") + keyword) chunk.push_back(static_cast<uint8_t>(c));
  chunk.push_back(0);
  for (char c : text) chunk.push_back(static_cast<uint8_t>(c));
  put_u32(chunk, crc32(chunk.data() + 4, chunk.size() - 4));
  png.insert(png.begin() + static_cast<std::ptrdiff_t>(header_end), chunk.begin(), chunk.end());
  return true;
}

std::optional<std::string> png_text(const std::vector<uint8_t>& png, const std::string& keyword) {
  if (!is_png(png)) return std::nullopt;
  size_t at = 8;
  while (at + 12 <= png.size()) {
    const size_t length = read_u32(&png[at]);
    if (length > png.size() - at - 12) return std::nullopt;  // cut short
    const uint8_t* type = &png[at + 4];
    const uint8_t* data = type + 4;
    if (crc32(type, length + 4) != read_u32(data + length)) return std::nullopt;
    const std::string name(type, type + 4);
    if (name == "tEXt") {
      const std::string body(data, data + length);
      const size_t nul = body.find('\0');
      if (nul != std::string::npos && body.compare(0, nul, keyword) == 0 && nul == keyword.size())
        return body.substr(nul + 1);
    }
    if (name == "IEND") break;
    at += 12 + length;
  }
  return std::nullopt;
}

std::optional<std::string> read_png_text(const std::string& path, const std::string& keyword) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  const std::vector<uint8_t> png((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return png_text(png, keyword);
}

}  // namespace fafo::studio
