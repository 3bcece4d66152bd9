// Text kept inside a PNG file (a tEXt chunk): a screenshot carries a description of
// what it shows (view, size, menus, panels, model, command line), so a test can tell
// whether a committed picture is what the current build draws. Plain C++.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fafo::studio {

// The keyword of the description fafo-studio's screenshots carry.
inline constexpr const char* kScreenshotKeyword = "fafo-studio";

// Inserts a tEXt chunk `keyword` = `text` right after the PNG's header chunk (IHDR).
// The keyword is 1 to 79 printable Latin-1 characters, the text Latin-1 (ASCII JSON
// is). Returns false when `png` is not a PNG or the keyword is not valid.
bool insert_png_text(std::vector<uint8_t>& png, const std::string& keyword, const std::string& text);
// The text of the first tEXt chunk named `keyword`; nullopt when there is none, when
// `png` is not a PNG, or when a chunk's checksum is wrong.
std::optional<std::string> png_text(const std::vector<uint8_t>& png, const std::string& keyword);
// The same, for a file (nullopt when it cannot be read).
std::optional<std::string> read_png_text(const std::string& path, const std::string& keyword);

}  // namespace fafo::studio
