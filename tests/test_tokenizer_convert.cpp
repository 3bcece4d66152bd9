// fafo-convert-tokenizer: vocab-only GGUF files from Hugging Face tokenizer.json files and
// from Llama 3's tiktoken rank file, their metadata, errors, and the command line.
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "convert_tokenizer.h"
#include "fafo/gguf.h"
#include "fafo/tokenizer.h"
#include "test_support.h"

namespace fafo {
namespace {

using Ids = std::vector<int32_t>;

struct Written {
  std::filesystem::path dir;
  std::unique_ptr<GgufFile> file;
  ~Written() {
    file.reset();
    std::filesystem::remove_all(dir);
  }
};

std::unique_ptr<Written> write(const convert::VocabFile& v, const std::string& name) {
  auto w = std::make_unique<Written>();
  w->dir = test::temp_dir("tokenizer_convert_" + name);
  convert::write_vocab_gguf(v, w->dir / (name + ".gguf"));
  w->file = GgufFile::open((w->dir / (name + ".gguf")).string());
  return w;
}

int64_t token_type(const GgufFile& f, size_t id) {
  return f.find("tokenizer.ggml.token_type")->as_array().items.at(id).as_int();
}

const std::string& token_text(const GgufFile& f, size_t id) {
  return f.find("tokenizer.ggml.tokens")->as_array().items.at(id).as_string();
}

TEST(ConvertTokenizer, Qwen3TokenizerJson) {
  FAFO_REQUIRE_SHARED(path, "tokenizers/qwen3-from-npm/tokenizer.json");
  const convert::VocabFile v = convert::from_hf_tokenizer(path, {});
  const auto w = write(v, "qwen3");
  const GgufFile& f = *w->file;
  EXPECT_EQ(f.tensors().size(), 0u);
  EXPECT_EQ(f.get_string("general.architecture", ""), "qwen2");
  EXPECT_EQ(f.get_string("general.name", ""), "qwen3-from-npm");
  EXPECT_EQ(f.get_string("tokenizer.ggml.model", ""), "gpt2");
  EXPECT_EQ(f.get_string("tokenizer.ggml.pre", ""), "qwen2");
  EXPECT_EQ(f.find("tokenizer.ggml.tokens")->as_array().items.size(), 151669u);
  EXPECT_EQ(f.find("tokenizer.ggml.merges")->as_array().items.size(), 151387u);
  EXPECT_EQ(f.find("tokenizer.ggml.merges")->as_array().items[0].as_string(), "\xC4\xA0 \xC4\xA0");  // "Ġ Ġ"
  EXPECT_EQ(token_text(f, 151644), "<|im_start|>");
  EXPECT_EQ(token_type(f, 151644), 3);  // special: control
  EXPECT_EQ(token_type(f, 151659), 3);  // <|fim_prefix|>: not "special" but looks it
  EXPECT_EQ(token_text(f, 151667), "<think>");
  EXPECT_EQ(token_type(f, 151667), 4);  // user-defined
  EXPECT_EQ(token_type(f, 0), 1);
  EXPECT_EQ(f.get_int("tokenizer.ggml.eos_token_id", -1), 151645);  // <|im_end|>
  EXPECT_EQ(f.get_int("tokenizer.ggml.padding_token_id", -1), 151643);
  EXPECT_EQ(f.find("tokenizer.ggml.bos_token_id"), nullptr);
  EXPECT_FALSE(f.get_bool("tokenizer.ggml.add_bos_token", true));
  EXPECT_NE(f.get_string("tokenizer.chat_template", "").find("<|im_start|>"), std::string::npos);
}

TEST(ConvertTokenizer, Llama3Tiktoken) {
  FAFO_REQUIRE_SHARED(path, "tokenizers/llama3/tokenizer.model");
  const auto w = write(convert::from_tiktoken(path, {}), "llama3");
  const GgufFile& f = *w->file;
  EXPECT_EQ(f.tensors().size(), 0u);
  EXPECT_EQ(f.get_string("general.architecture", ""), "llama");
  EXPECT_EQ(f.get_string("tokenizer.ggml.pre", ""), "llama-bpe");
  EXPECT_EQ(f.find("tokenizer.ggml.tokens")->as_array().items.size(), 128256u);
  // Hugging Face's Llama 3 tokenizer.json has these 280147 merges, "Ġ Ġ" first.
  const auto& merges = f.find("tokenizer.ggml.merges")->as_array().items;
  EXPECT_EQ(merges.size(), 280147u);
  EXPECT_EQ(merges[0].as_string(), "\xC4\xA0 \xC4\xA0");
  EXPECT_EQ(token_text(f, 0), "!");
  EXPECT_EQ(token_text(f, 128000), "<|begin_of_text|>");
  EXPECT_EQ(token_text(f, 128009), "<|eot_id|>");
  EXPECT_EQ(token_text(f, 128011), "<|image|>");
  EXPECT_EQ(token_text(f, 128012), "<|reserved_special_token_2|>");
  EXPECT_EQ(token_text(f, 128255), "<|reserved_special_token_245|>");
  EXPECT_EQ(token_type(f, 128000), 3);
  EXPECT_EQ(token_type(f, 127999), 1);
  EXPECT_EQ(f.get_int("tokenizer.ggml.bos_token_id", -1), 128000);
  EXPECT_EQ(f.get_int("tokenizer.ggml.eos_token_id", -1), 128001);
  EXPECT_EQ(f.get_int("tokenizer.ggml.eot_token_id", -1), 128009);
  EXPECT_EQ(f.get_int("tokenizer.ggml.eom_token_id", -1), 128008);
  EXPECT_TRUE(f.get_bool("tokenizer.ggml.add_bos_token", false));
  // Meta's reference: "This is a test sentence." (test_tokenizer.py).
  const Tokenizer tok(Vocab::from_gguf(f));
  EXPECT_EQ(tok.encode("This is a test sentence.", true), (Ids{128000, 2028, 374, 264, 1296, 11914, 13}));
  // Its dialog prompt, rendered as text and parsed with special tokens.
  const std::string dialog =
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nThis is a test sentence.<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nThis is a response.<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\n";
  EXPECT_EQ(tok.encode(dialog, false, true),
            (Ids{128000, 128006, 9125, 128007, 271, 2028, 374, 264, 1296, 11914, 13, 128009, 128006, 882, 128007, 271,
                 2028, 374, 264, 2077, 13, 128009, 128006, 78191, 128007, 271}));
}

TEST(ConvertTokenizer, SmolLM2TokenizerJsonWithConfigJson) {
  FAFO_REQUIRE_SHARED(path, "tokenizers/smollm2-135m-instruct/tokenizer.json");
  const auto w = write(convert::from_hf_tokenizer(path, {}), "smollm2");
  const GgufFile& f = *w->file;
  EXPECT_EQ(f.get_string("tokenizer.ggml.pre", ""), "starcoder");  // Digits + ByteLevel
  EXPECT_EQ(f.get_string("general.architecture", ""), "llama");    // config.json's model_type
  EXPECT_EQ(f.find("tokenizer.ggml.tokens")->as_array().items.size(), 49152u);
  EXPECT_EQ(f.get_int("tokenizer.ggml.bos_token_id", -1), 1);  // config.json's ids
  EXPECT_EQ(f.get_int("tokenizer.ggml.eos_token_id", -1), 2);
  const Tokenizer tok(Vocab::from_gguf(f));
  const std::string chat = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n";
  const Ids ids = tok.encode(chat, false, true);
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 2), 1);
  EXPECT_TRUE(tok.is_end_of_generation(2));
  EXPECT_EQ(tok.decode(tok.encode(chat, false)), chat);
  // Digits are single tokens.
  EXPECT_EQ(tok.encode("2024", false).size(), 4u);
}

TEST(ConvertTokenizer, VocabSizePadsWithUnusedTokens) {
  FAFO_REQUIRE_SHARED(path, "tokenizers/qwen3-from-npm/tokenizer.json");
  convert::HfOptions o;
  o.vocab_size = 151936;  // Qwen3's embedding rows
  o.name = "Qwen3";
  o.architecture = "qwen3";
  const convert::VocabFile v = convert::from_hf_tokenizer(path, o);
  ASSERT_EQ(v.tokens.size(), 151936u);
  EXPECT_EQ(v.tokens[151935], "[PAD151935]");
  EXPECT_EQ(v.token_types[151935], 5);
  EXPECT_EQ(v.name, "Qwen3");
  EXPECT_EQ(v.architecture, "qwen3");
  const auto w = write(v, "qwen3_padded");
  const Tokenizer tok(Vocab::from_gguf(*w->file));
  EXPECT_EQ(tok.token_to_piece(151935), "");
}

void expect_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error (expected one mentioning '" << needle << "')";
  } catch (const convert::ConvertError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(ConvertTokenizer, ClearErrors) {
  const std::filesystem::path dir = test::temp_dir("tokenizer_convert_errors");
  const auto put = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
    return dir / name;
  };
  expect_error([&] { convert::from_hf_tokenizer(dir / "missing.json", {}); }, "missing.json");
  expect_error([&] { convert::from_hf_tokenizer(put("bad.json", "{not json"), {}); }, "not valid JSON");
  expect_error([&] { convert::from_hf_tokenizer(put("uni.json", R"({"model": {"type": "Unigram", "vocab": []}})"), {}); },
               "Unigram");
  expect_error(
      [&] {
        convert::from_hf_tokenizer(
            put("spm.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "pre_tokenizer": null})"), {});
      },
      "byte-level");
  const std::string odd_pre = R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"]},
      "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "\\w+"}},
      {"type": "ByteLevel", "use_regex": false}]}})";
  expect_error([&] { convert::from_hf_tokenizer(put("odd.json", odd_pre), {}); }, "--pre");
  convert::HfOptions o;
  o.pre = "gpt-2";
  const convert::VocabFile v = convert::from_hf_tokenizer(dir / "odd.json", o);
  EXPECT_EQ(v.pre, "gpt-2");
  EXPECT_EQ(v.merges, (std::vector<std::string>{"a b"}));
  expect_error([&] { convert::from_tiktoken(put("ranks.txt", "IQ== 0\nIg== 2\n"), {}); }, "ranks.txt:2");
  expect_error([&] { convert::from_tiktoken(put("b64.txt", "I*Q== 0\n"), {}); }, "base64");
  std::filesystem::remove_all(dir);
}

// Runs a command; stderr is appended to stdout.
static test::CommandResult run(const std::string& cmd) {
  test::CommandResult r = test::run_command(cmd);
  r.out += r.err;
  return r;
}

TEST(ConvertTokenizerCli, WritesAVocabOnlyGguf) {
  FAFO_REQUIRE_SHARED(path, "tokenizers/qwen3-from-npm/tokenizer.json");
  const std::filesystem::path bin = test::binary_path("tools/convert_tokenizer/fafo-convert-tokenizer");
  const std::filesystem::path dir = test::temp_dir("tokenizer_convert_cli");
  const auto ok = run(bin.string() + " '" + path.string() + "' -o '" + (dir / "q.gguf").string() + "'");
  EXPECT_EQ(ok.exit_code, 0) << ok.out;
  EXPECT_NE(ok.out.find("151669 tokens"), std::string::npos) << ok.out;
  EXPECT_NE(ok.out.find("pre 'qwen2'"), std::string::npos) << ok.out;
  EXPECT_TRUE(std::filesystem::exists(dir / "q.gguf"));
  const auto neither = run(bin.string() + " -o '" + (dir / "x.gguf").string() + "'");
  EXPECT_EQ(neither.exit_code, 1);
  EXPECT_NE(neither.out.find("fafo-convert-tokenizer: error:"), std::string::npos) << neither.out;
  const auto missing = run(bin.string() + " /nonexistent/tokenizer.json -o '" + (dir / "y.gguf").string() + "'");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.out.find("/nonexistent/tokenizer.json"), std::string::npos) << missing.out;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace fafo
