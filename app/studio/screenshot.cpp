#include "screenshot.h"

#include <GL/gl.h>
#include <stb_image_write.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace fafo::studio {

bool write_framebuffer_png(const std::string& path, int width, int height) {
  if (width <= 0 || height <= 0) return false;
  const size_t stride = static_cast<size_t>(width) * 4;
  std::vector<uint8_t> pixels(stride * static_cast<size_t>(height));
  glReadBuffer(GL_BACK);
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  glReadPixels(0, 0, width, height, GL_RGBA, GL_UNSIGNED_BYTE, pixels.data());
  // OpenGL's rows run bottom to top; PNG's top to bottom.
  std::vector<uint8_t> flipped(pixels.size());
  for (int y = 0; y < height; ++y)
    std::copy_n(pixels.data() + stride * static_cast<size_t>(height - 1 - y), stride,
                flipped.data() + stride * static_cast<size_t>(y));
  for (size_t i = 3; i < flipped.size(); i += 4) flipped[i] = 255;  // opaque
  return stbi_write_png(path.c_str(), width, height, 4, flipped.data(), static_cast<int>(stride)) != 0;
}

}  // namespace fafo::studio
