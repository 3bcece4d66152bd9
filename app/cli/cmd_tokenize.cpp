// `fafo tokenize -m MODEL (--text TEXT | -f FILE | --vectors FILE.inp)`: token ids of a
// text with the model's tokenizer. Only the vocabulary is read, so vocab-only GGUF files
// (../shared/vocab, fafo-convert-tokenizer's output) work too.
//
// --text / -f print the ids space-separated on one line (BOS/EOS as the vocabulary asks,
// unless --no-bos), or with --pieces one "id 'piece'" line per token. --vectors reads
// llama.cpp's tokenizer test inputs (strings each followed by "\n__ggml_vocab_test__\n")
// and prints one line per string exactly as llama.cpp's .out files hold them (" id" per
// token, no BOS), so the output can be compared with `cmp`.
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "commands.h"
#include "default_model.h"
#include "input_files.h"
#include "fafo/gguf.h"
#include "fafo/read_file.h"
#include "fafo/tokenizer.h"

namespace fafo::cli {

namespace {

struct TokenizeArgs {
  std::string model;
  std::string text;
  std::string file;
  std::string vectors;
  int sources = 0;  // how many of --text, -f and --vectors were given
  bool no_bos = false;
  bool parse_special = false;
  bool pieces = false;
};

// A piece as a quoted, readable string: printable ASCII and UTF-8 as is, the rest escaped.
std::string quoted(const std::string& piece) {
  std::string out = "'";
  for (char c : piece) {
    const auto b = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\\' || c == '\'') {
      out += '\\';
      out += c;
    } else if (b < 0x20 || b == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", b);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "'";
}

int run_tokenize(const TokenizeArgs& args) {
  if (args.sources != 1) throw std::runtime_error("give exactly one of --text, -f/--file and --vectors");
  for (const std::string& path : {args.model, args.file, args.vectors})
    if (!path.empty()) app::require_readable_file(path);
  const std::unique_ptr<GgufFile> file = GgufFile::open(args.model);
  const Tokenizer tok(Vocab::from_gguf(*file));

  if (!args.vectors.empty()) {
    std::string out;
    for (const std::string& text : split_vocab_test_cases(read_whole_file(args.vectors, "the test vectors")))
      out += format_vocab_test_line(tok.encode(text, false, args.parse_special));
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  }

  const std::string text = args.file.empty() ? args.text : read_whole_file(args.file, "the text file");
  const std::vector<int32_t> ids = tok.encode(text, !args.no_bos, args.parse_special);
  if (args.pieces) {
    for (int32_t id : ids) std::printf("%d %s\n", id, quoted(tok.token_to_piece(id, true)).c_str());
    return 0;
  }
  std::string line;
  for (size_t k = 0; k < ids.size(); ++k) {
    if (k) line += ' ';
    line += std::to_string(ids[k]);
  }
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stdout);
  return 0;
}

}  // namespace

Command add_tokenize_command(CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Print the token ids of a text (or of llama.cpp tokenizer test vectors)");
  cmd->add_option("-m,--model", args->model,
                  "GGUF file (a vocab-only GGUF is enough; default: $FAFO_MODEL, else the shipped stories260K.gguf)");
  CLI::Option* text = cmd->add_option("--text", args->text, "Text to tokenize (may be empty)");
  CLI::Option* positional = cmd->add_option("TEXT", args->text, "Text to tokenize, as --text");
  CLI::Option* file = cmd->add_option("-f,--file", args->file, "Read the text to tokenize from this file");
  CLI::Option* vectors = cmd->add_option("--vectors", args->vectors,
                  "llama.cpp test inputs (.inp: strings separated by \"\\n__ggml_vocab_test__\\n\"): print one line of "
                  "ids per string in the .out format, without BOS");
  cmd->add_flag("--no-bos", args->no_bos, "Add no BOS/EOS even when the vocabulary asks for them");
  cmd->add_flag("--parse-special", args->parse_special,
                "Turn control-token texts in the input (e.g. <|im_start|>) into those tokens");
  cmd->add_flag("--pieces", args->pieces, "Print one \"id 'piece'\" line per token instead of the ids");
  return [args, text, positional, file, vectors] {
    if (text->count() > 0 && positional->count() > 0) throw std::runtime_error("give the text once: TEXT or --text");
    args->sources = (text->count() + positional->count() > 0) + (file->count() > 0) + (vectors->count() > 0);
    app::use_default_model_if_unset(args->model);
    return run_tokenize(*args);
  };
}

}  // namespace fafo::cli
