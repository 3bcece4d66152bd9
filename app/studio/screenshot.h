// Reading the current OpenGL framebuffer into a PNG.
#pragma once

#include <string>

namespace fafo::studio {

// Reads the back buffer (width x height, after rendering, before the swap) and writes
// it as an RGBA PNG. Returns false when the file cannot be written.
bool write_framebuffer_png(const std::string& path, int width, int height);

}  // namespace fafo::studio
