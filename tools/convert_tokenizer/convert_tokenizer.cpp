// Hugging Face tokenizer.json / tiktoken rank files -> vocab-only GGUF.
#include "convert_tokenizer.h"

#include <algorithm>
#include <array>
#include <fstream>
#include <map>
#include <sstream>
#include <string_view>
#include <unordered_map>
#include <utility>

#include <nlohmann/json.hpp>

#include "fafo/gguf.h"

namespace fafo::convert {
namespace {

using json = nlohmann::json;

constexpr int32_t kNormal = 1, kControl = 3, kUserDefined = 4, kUnused = 5;

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConvertError(path.string() + ": cannot open the file");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

json read_json(const std::filesystem::path& path) {
  try {
    return json::parse(read_text(path));
  } catch (const json::exception& e) {
    throw ConvertError(path.string() + ": not valid JSON: " + e.what());
  }
}

// GPT-2's byte alphabet: printable Latin-1 bytes map to themselves, the others to U+0100+.
std::array<std::string, 256> byte_alphabet() {
  std::array<std::string, 256> out;
  const auto printable = [](int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const uint32_t cp = printable(b) ? static_cast<uint32_t>(b) : next++;
    std::string& s = out[static_cast<size_t>(b)];
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return out;
}

std::string byte_encode(std::string_view bytes) {
  static const std::array<std::string, 256> alphabet = byte_alphabet();
  std::string out;
  for (char c : bytes) out += alphabet[static_cast<uint8_t>(c)];
  return out;
}

// A special token entry of tokenizer_config.json: "text", {"content": "text"} or null.
std::string token_content(const json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value["content"].is_string())
    return value["content"].get<std::string>();
  return {};
}

// llama.cpp's convert_hf_to_gguf.py: added tokens that look like control tokens.
bool looks_special(const std::string& t) {
  const auto wrapped = [&](std::string_view open, std::string_view close) {
    return t.size() >= open.size() + close.size() && t.compare(0, open.size(), open) == 0 &&
           t.compare(t.size() - close.size(), close.size(), close) == 0;
  };
  return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" || wrapped("<|", "|>") ||
         wrapped("<\xEF\xBD\x9C", "\xEF\xBD\x9C>") || wrapped("<unused", ">");
}

constexpr std::string_view kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";
constexpr std::string_view kQwen2Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";

bool is_type(const json& j, std::string_view type) { return j.is_object() && j.value("type", "") == type; }

// tokenizer.ggml.pre for the pre_tokenizer of a tokenizer.json, or "" when not known.
std::string recognise_pre(const json& pre) {
  if (is_type(pre, "ByteLevel") && pre.value("use_regex", true)) return "gpt-2";
  if (!is_type(pre, "Sequence") || !pre.contains("pretokenizers") || !pre["pretokenizers"].is_array()) return {};
  const json& steps = pre["pretokenizers"];
  if (steps.size() == 2 && is_type(steps[0], "Split") && is_type(steps[1], "ByteLevel") &&
      !steps[1].value("use_regex", true)) {
    const json& pattern = steps[0].value("pattern", json::object());
    const std::string regex = pattern.value("Regex", "");
    if (regex == kLlama3Regex) return "llama-bpe";
    if (regex == kQwen2Regex) return "qwen2";
    return {};
  }
  if (steps.size() == 2 && is_type(steps[0], "Digits") && steps[0].value("individual_digits", false) &&
      is_type(steps[1], "ByteLevel") && steps[1].value("use_regex", true))
    return "starcoder";
  return {};
}

bool has_byte_level(const json& j) {
  if (is_type(j, "ByteLevel")) return true;
  if (j.is_object())
    for (const char* key : {"pretokenizers", "decoders"})
      if (j.contains(key) && j[key].is_array())
        for (const json& step : j[key])
          if (has_byte_level(step)) return true;
  return false;
}

int32_t find_token(const VocabFile& v, const std::string& text) {
  if (text.empty()) return -1;
  const auto it = std::find(v.tokens.begin(), v.tokens.end(), text);
  return it == v.tokens.end() ? -1 : static_cast<int32_t>(it - v.tokens.begin());
}

}  // namespace

VocabFile from_hf_tokenizer(const std::filesystem::path& tokenizer_json, const HfOptions& options) {
  const std::string where = tokenizer_json.string();
  const json tok = read_json(tokenizer_json);
  if (!tok.is_object() || !tok.contains("model") || !tok["model"].is_object())
    throw ConvertError(where + ": no \"model\" object (not a Hugging Face tokenizer.json)");
  const json& model = tok["model"];
  const std::string type = model.value("type", "");
  if (type != "BPE")
    throw ConvertError(where + ": model type '" + type + "' is not supported (only byte-level BPE is)");
  const json pre_tokenizer = tok.value("pre_tokenizer", json());
  if (!has_byte_level(pre_tokenizer) && !has_byte_level(tok.value("decoder", json())))
    throw ConvertError(where + ": a BPE model without a ByteLevel pre-tokenizer or decoder (a SentencePiece-style "
                               "vocabulary) is not supported; only byte-level BPE is");
  if (!model.contains("vocab") || !model["vocab"].is_object())
    throw ConvertError(where + ": model.vocab is missing or not an object");

  // Config files beside tokenizer.json.
  const std::filesystem::path dir = tokenizer_json.parent_path();
  std::filesystem::path config_path = options.config;
  if (config_path.empty() && std::filesystem::exists(dir / "tokenizer_config.json"))
    config_path = dir / "tokenizer_config.json";
  const json config = config_path.empty() ? json::object() : read_json(config_path);
  const json model_config =
      std::filesystem::exists(dir / "config.json") ? read_json(dir / "config.json") : json::object();

  VocabFile v;
  // Token list: model.vocab, then added_tokens, by id; holes become unused "[PAD<id>]".
  std::map<int64_t, std::pair<std::string, int32_t>> by_id;  // id -> (text, type)
  for (const auto& [text, id] : model["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0)
      throw ConvertError(where + ": model.vocab['" + text + "'] is not a non-negative integer id");
    by_id[id.get<int64_t>()] = {text, kNormal};
  }
  if (tok.contains("added_tokens") && tok["added_tokens"].is_array()) {
    for (const json& added : tok["added_tokens"]) {
      if (!added.is_object() || !added.contains("id") || !added["id"].is_number_integer() ||
          !added.contains("content") || !added["content"].is_string())
        throw ConvertError(where + ": an added_tokens entry without an integer id and a string content");
      const std::string text = added["content"].get<std::string>();
      const bool special = added.value("special", false) || looks_special(text);
      by_id[added["id"].get<int64_t>()] = {text, special ? kControl : kUserDefined};
    }
  }
  if (by_id.empty()) throw ConvertError(where + ": the vocabulary is empty");
  int64_t n = by_id.rbegin()->first + 1;
  int64_t wanted = options.vocab_size;
  if (wanted == 0 && model_config.contains("vocab_size") && model_config["vocab_size"].is_number_integer())
    wanted = model_config["vocab_size"].get<int64_t>();
  if (wanted > n) n = wanted;
  if (n > INT32_MAX) throw ConvertError(where + ": too many tokens");
  v.tokens.reserve(static_cast<size_t>(n));
  v.token_types.reserve(static_cast<size_t>(n));
  for (int64_t id = 0; id < n; ++id) {
    const auto it = by_id.find(id);
    if (it == by_id.end()) {
      v.tokens.push_back("[PAD" + std::to_string(id) + "]");
      v.token_types.push_back(kUnused);
    } else {
      v.tokens.push_back(it->second.first);
      v.token_types.push_back(it->second.second);
    }
  }

  // Merges: "a b" strings (older files) or ["a", "b"] pairs (newer ones).
  if (model.contains("merges") && model["merges"].is_array()) {
    v.merges.reserve(model["merges"].size());
    for (const json& m : model["merges"]) {
      if (m.is_string()) {
        v.merges.push_back(m.get<std::string>());
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        v.merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
      } else {
        throw ConvertError(where + ": a merges entry is neither \"a b\" nor [\"a\", \"b\"]");
      }
    }
  }

  v.pre = options.pre.empty() ? recognise_pre(pre_tokenizer) : options.pre;
  if (v.pre.empty())
    throw ConvertError(where + ": cannot tell which pre-tokenizer this is (pre_tokenizer " +
                       pre_tokenizer.dump().substr(0, 300) + "); give it with --pre NAME (e.g. gpt-2, llama-bpe, qwen2)");
  if (!options.architecture.empty())
    v.architecture = options.architecture;
  else if (model_config.contains("model_type") && model_config["model_type"].is_string())
    v.architecture = model_config["model_type"].get<std::string>();
  else
    v.architecture = v.pre == "qwen2" ? "qwen2" : "llama";
  v.name = options.name.empty() ? std::filesystem::absolute(tokenizer_json).parent_path().filename().string()
                                : options.name;

  // Special tokens: tokenizer_config.json's texts, else config.json's ids.
  const auto special = [&](const char* text_key, const char* id_key) -> int32_t {
    if (config.contains(text_key)) {
      const std::string text = token_content(config[text_key]);
      if (text.empty()) return -1;
      const int32_t id = find_token(v, text);
      if (id < 0) throw ConvertError(config_path.string() + ": " + text_key + " '" + text + "' is not a token");
      return id;
    }
    if (model_config.contains(id_key)) {
      json id = model_config[id_key];
      if (id.is_array() && !id.empty()) id = id[0];
      if (id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < n) return id.get<int32_t>();
    }
    return -1;
  };
  v.bos = special("bos_token", "bos_token_id");
  v.eos = special("eos_token", "eos_token_id");
  v.unk = special("unk_token", "unk_token_id");
  v.pad = special("pad_token", "pad_token_id");
  if (config.contains("add_bos_token") && config["add_bos_token"].is_boolean()) v.add_bos = config["add_bos_token"].get<bool>();
  if (config.contains("add_eos_token") && config["add_eos_token"].is_boolean()) v.add_eos = config["add_eos_token"].get<bool>();
  if (config.contains("chat_template")) {
    const json& t = config["chat_template"];
    if (t.is_string()) {
      v.chat_template = t.get<std::string>();
    } else if (t.is_array()) {  // [{"name": "default", "template": "..."}, ...]
      for (const json& entry : t)
        if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
            entry["template"].is_string())
          v.chat_template = entry["template"].get<std::string>();
    }
  }
  return v;
}

VocabFile from_tiktoken(const std::filesystem::path& rank_file, const TiktokenOptions& options) {
  const std::string where = rank_file.string();
  const std::string text = read_text(rank_file);

  // Base64 decoding of one token.
  static constexpr std::string_view kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto decode64 = [&](std::string_view s, size_t line) {
    std::string out;
    uint32_t acc = 0;
    int bits = 0;
    for (char c : s) {
      if (c == '=') break;
      const size_t value = kAlphabet.find(c);
      if (value == std::string_view::npos)
        throw ConvertError(where + ":" + std::to_string(line) + ": '" + std::string(s) + "' is not base64");
      acc = (acc << 6) | static_cast<uint32_t>(value);
      bits += 6;
      if (bits >= 8) {
        bits -= 8;
        out += static_cast<char>((acc >> bits) & 0xFF);
      }
    }
    return out;
  };

  std::vector<std::string> by_rank;  // raw bytes of each token
  std::istringstream lines(text);
  std::string line;
  size_t line_no = 0;
  while (std::getline(lines, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    if (space == std::string::npos)
      throw ConvertError(where + ":" + std::to_string(line_no) + ": expected 'base64-token rank'");
    const std::string bytes = decode64(std::string_view(line).substr(0, space), line_no);
    size_t rank = 0;
    try {
      size_t used = 0;
      rank = std::stoul(line.substr(space + 1), &used);
      if (used != line.size() - space - 1) throw std::invalid_argument("trailing text");
    } catch (const std::exception&) {
      throw ConvertError(where + ":" + std::to_string(line_no) + ": bad rank '" + line.substr(space + 1) + "'");
    }
    if (rank != by_rank.size())
      throw ConvertError(where + ":" + std::to_string(line_no) + ": rank " + std::to_string(rank) + " where " +
                         std::to_string(by_rank.size()) + " was expected (ranks must be 0, 1, 2, ...)");
    if (bytes.empty()) throw ConvertError(where + ":" + std::to_string(line_no) + ": empty token");
    by_rank.push_back(bytes);
  }
  if (by_rank.empty()) throw ConvertError(where + ": no tokens");

  std::unordered_map<std::string, int32_t> rank_of;
  rank_of.reserve(by_rank.size());
  for (size_t r = 0; r < by_rank.size(); ++r)
    if (!rank_of.emplace(by_rank[r], static_cast<int32_t>(r)).second)
      throw ConvertError(where + ": the token of rank " + std::to_string(r) + " appears twice");

  VocabFile v;
  v.name = options.name;
  v.architecture = options.architecture;
  v.pre = "llama-bpe";
  for (const std::string& bytes : by_rank) {
    v.tokens.push_back(byte_encode(bytes));
    v.token_types.push_back(kNormal);
  }
  // Merges, as Hugging Face's TikTokenConverter derives them: for each token (by rank),
  // every split into two tokens, ordered by the ranks of the parts.
  std::vector<std::pair<int32_t, int32_t>> local;
  for (const std::string& bytes : by_rank) {
    if (bytes.size() < 2) continue;
    local.clear();
    for (size_t cut = 1; cut < bytes.size(); ++cut) {
      const auto l = rank_of.find(bytes.substr(0, cut));
      const auto r = rank_of.find(bytes.substr(cut));
      if (l != rank_of.end() && r != rank_of.end()) local.emplace_back(l->second, r->second);
    }
    std::sort(local.begin(), local.end());
    for (const auto& [l, r] : local)
      v.merges.push_back(v.tokens[static_cast<size_t>(l)] + " " + v.tokens[static_cast<size_t>(r)]);
  }

  // Llama 3's special tokens (Meta's tokenizer.py).
  const std::vector<std::string> named = {
      "<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
      "<|finetune_right_pad_id|>", "<|step_id|>", "<|start_header_id|>", "<|end_header_id|>",
      "<|eom_id|>", "<|eot_id|>", "<|python_tag|>", "<|image|>",
  };
  constexpr size_t kSpecialCount = 256;
  const auto base = static_cast<int32_t>(v.tokens.size());
  for (size_t i = 0; i < kSpecialCount; ++i) {
    v.tokens.push_back(i < named.size() ? named[i]
                                        : "<|reserved_special_token_" + std::to_string(2 + i - named.size()) + "|>");
    v.token_types.push_back(kControl);
  }
  v.bos = base + 0;
  v.eos = base + 1;
  v.eom = base + 8;
  v.eot = base + 9;
  v.add_bos = true;
  v.add_eos = false;
  return v;
}

void write_vocab_gguf(const VocabFile& v, const std::filesystem::path& out) {
  if (v.tokens.empty()) throw ConvertError("write_vocab_gguf: no tokens");
  if (v.token_types.size() != v.tokens.size())
    throw ConvertError("write_vocab_gguf: " + std::to_string(v.token_types.size()) + " token types for " +
                       std::to_string(v.tokens.size()) + " tokens");
  GgufWriter w;
  w.set_string("general.architecture", v.architecture);
  if (!v.name.empty()) w.set_string("general.name", v.name);
  w.set_string("tokenizer.ggml.model", v.model);
  if (!v.pre.empty()) w.set_string("tokenizer.ggml.pre", v.pre);
  w.set_string_array("tokenizer.ggml.tokens", v.tokens);
  w.set_i32_array("tokenizer.ggml.token_type", v.token_types);
  if (!v.merges.empty() || v.model == "gpt2") w.set_string_array("tokenizer.ggml.merges", v.merges);
  const auto special = [&](const char* key, int32_t id) {
    if (id < 0) return;
    if (static_cast<size_t>(id) >= v.tokens.size())
      throw ConvertError(std::string("write_vocab_gguf: ") + key + " " + std::to_string(id) + " is out of range");
    w.set_u32(key, static_cast<uint32_t>(id));
  };
  special("tokenizer.ggml.bos_token_id", v.bos);
  special("tokenizer.ggml.eos_token_id", v.eos);
  special("tokenizer.ggml.eot_token_id", v.eot);
  special("tokenizer.ggml.eom_token_id", v.eom);
  special("tokenizer.ggml.unknown_token_id", v.unk);
  special("tokenizer.ggml.padding_token_id", v.pad);
  if (v.add_bos) w.set_bool("tokenizer.ggml.add_bos_token", *v.add_bos);
  if (v.add_eos) w.set_bool("tokenizer.ggml.add_eos_token", *v.add_eos);
  if (!v.chat_template.empty()) w.set_string("tokenizer.chat_template", v.chat_template);
  w.write(out.string());
}

}  // namespace fafo::convert
