// llama.cpp's tokenizer test-vector format (.inp / .out files).
#include <string>
#include <string_view>
#include <vector>

#include "fafo/tokenizer.h"

namespace fafo {

std::vector<std::string> split_vocab_test_cases(std::string_view inp) {
  static constexpr std::string_view kSeparator = "\n__ggml_vocab_test__\n";
  std::vector<std::string> cases;
  size_t pos = 0;
  while (pos < inp.size()) {
    const size_t end = inp.find(kSeparator, pos);
    if (end == std::string_view::npos) {
      cases.emplace_back(inp.substr(pos));
      break;
    }
    cases.emplace_back(inp.substr(pos, end - pos));
    pos = end + kSeparator.size();
  }
  return cases;
}

std::string format_vocab_test_line(const std::vector<int32_t>& ids) {
  std::string line;
  for (int32_t id : ids) {
    line += ' ';
    line += std::to_string(id);
  }
  line += '\n';
  return line;
}

}  // namespace fafo
