#include "input_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace fafo::app {

std::string cannot_open_message(const std::string& path, int error_number) {
  return "cannot open " + path + ": " + std::strerror(error_number);
}

void require_readable_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(cannot_open_message(path, errno));
  struct stat st {};
  const bool folder = ::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode);
  ::close(fd);
  if (folder) throw std::runtime_error(cannot_open_message(path, EISDIR));
}

void require_decoding_files(const DecodingOptions& decoding) {
  if (!decoding.corpus_path.empty()) require_readable_file(decoding.corpus_path);
  if (!decoding.draft_model_path.empty() && decoding.draft_model_path != "self")
    require_readable_file(decoding.draft_model_path);
}

void require_chat_template_file(const std::string& choice) {
  const bool file = choice.find('/') != std::string::npos ||
                    (choice.size() > 6 && choice.compare(choice.size() - 6, 6, ".jinja") == 0);
  if (file) require_readable_file(choice);
}

}  // namespace fafo::app
