// Streaming text output that never emits half a UTF-8 character: bytes of an
// incomplete sequence are held back until the rest arrives (tokens may split a
// character, e.g. byte-fallback tokens <0xE2><0x80><0x99>).
#pragma once

#include <string>
#include <string_view>

namespace fafo {

class Utf8Stream {
 public:
  // Appends bytes; returns the longest prefix of everything pending that ends on a
  // character boundary.
  std::string push(std::string_view bytes);
  // Returns whatever is still held back (at the end of generation).
  std::string flush();

 private:
  std::string pending_;
};

}  // namespace fafo
