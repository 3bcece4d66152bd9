// Reading the current OpenGL framebuffer into a PNG.
#pragma once

#include <string>

namespace fafo::studio {

// Reads the back buffer (width x height, after rendering, before the swap) and writes
// it as an RGBA PNG carrying `text` in a tEXt chunk named `keyword` (png_text.h).
// Returns false when the file cannot be written.
bool write_framebuffer_png(const std::string& path, int width, int height, const std::string& keyword,
                           const std::string& text);

}  // namespace fafo::studio
