#include "fafo/utf8_stream.h"

namespace fafo {

namespace {
// Length of the sequence a lead byte starts (1 for ASCII and for invalid bytes,
// which are passed through rather than held forever).
size_t sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}
}  // namespace

std::string Utf8Stream::push(std::string_view bytes) {
  pending_.append(bytes);
  // Find the start of the last sequence and check whether it is complete.
  size_t i = pending_.size();
  size_t back = 0;
  while (i > 0 && back < 4) {
    --i;
    ++back;
    const unsigned char c = static_cast<unsigned char>(pending_[i]);
    if ((c & 0xC0) != 0x80) {  // a lead byte (or ASCII)
      const size_t need = sequence_length(c);
      const size_t ready = need > back ? i : pending_.size();
      std::string out = pending_.substr(0, ready);
      pending_.erase(0, ready);
      return out;
    }
  }
  // Only continuation bytes: nothing to wait for.
  std::string out;
  out.swap(pending_);
  return out;
}

std::string Utf8Stream::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace fafo
