#include "screenshot.h"

#include <GL/gl.h>
#include <stb_image_write.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <vector>

#include "png_text.h"

namespace fafo::studio {

namespace {

// stb's writer hands the encoded PNG over in pieces.
void append(void* context, void* data, int size) {
  auto* out = static_cast<std::vector<uint8_t>*>(context);
  const auto* bytes = static_cast<const uint8_t*>(data);
  out->insert(out->end(), bytes, bytes + size);
}

}  // namespace

bool write_framebuffer_png(const std::string& path, int width, int height, const std::string& keyword,
                           const std::string& text) {
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
  std::vector<uint8_t> png;
  if (!stbi_write_png_to_func(append, &png, width, height, 4, flipped.data(), static_cast<int>(stride))) return false;
  if (!insert_png_text(png, keyword, text)) return false;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(png.data()), static_cast<std::streamsize>(png.size()));
  return static_cast<bool>(out);
}

}  // namespace fafo::studio
