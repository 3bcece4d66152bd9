// Bad models and bad requests get clear errors, never a crash: missing or misshapen
// tensors, unsupported architectures, missing keys, prompts that do not fit.
#include <cmath>
#include <functional>

#include "fafo/generator.h"
#include "model_fixtures.h"
#include "test_support.h"

using namespace fafo;

namespace {

struct Edit {
  std::function<bool(const std::string& key, GgufValue& value)> metadata;  // return false to drop
  std::function<bool(const std::string& name, std::vector<int64_t>& shape, TensorType& type)> tensor;
};

// A small valid llama model.
synth::SyntheticConfig small_llama() {
  synth::SyntheticConfig c;
  c.n_layer = 2, c.n_embd = 64, c.n_head = 4, c.n_head_kv = 2, c.n_ff = 96, c.n_vocab = 300, c.n_ctx = 32;
  return c;
}

// Writes a small valid model (`c`), then a copy of it with the edits applied; returns the copy's path.
std::string edited_model(const std::string& name, const Edit& edit, const synth::SyntheticConfig& c = small_llama()) {
  const auto dir = test::temp_dir("model-err-" + name);
  const std::string src = (dir / "src.gguf").string();
  synth::write_synthetic_model(c, src);
  auto f = GgufFile::open(src);
  GgufWriter w;
  for (auto [key, value] : f->metadata())
    if (!edit.metadata || edit.metadata(key, value)) w.set(key, value);
  for (const GgufTensor& t : f->tensors()) {
    std::vector<int64_t> shape = t.shape;
    TensorType type = t.type;
    if (edit.tensor && !edit.tensor(t.name, shape, type)) continue;
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<uint8_t> data(tensor_row_bytes(type, shape[0]) * static_cast<size_t>(n / shape[0]), 0);
    std::copy(t.data, t.data + std::min<size_t>(data.size(), t.n_bytes), data.begin());
    w.add_tensor(t.name, type, shape, std::move(data));
  }
  const std::string out = (dir / (name + ".gguf")).string();
  w.write(out);
  return out;
}

std::string load_error(const std::string& path) {
  try {
    test::load_test_model(path);
  } catch (const std::exception& e) {
    return e.what();
  }
  ADD_FAILURE() << "model loaded but should not have: " << path;
  return "";
}


}  // namespace

TEST(ModelErrors, MissingTensor) {
  const auto path = edited_model("missing", {nullptr, [](const std::string& n, auto&, auto&) { return n != "blk.1.ffn_up.weight"; }});
  const std::string msg = load_error(path);
  EXPECT_HAS(msg, path);
  EXPECT_HAS(msg, "missing required tensor 'blk.1.ffn_up.weight'");
}

TEST(ModelErrors, WrongTensorShape) {
  const auto path = edited_model("shape", {nullptr, [](const std::string& n, std::vector<int64_t>& shape, auto&) {
                                             if (n == "blk.0.attn_k.weight") shape[1] = 48;
                                             return true;
                                           }});
  const std::string msg = load_error(path);
  EXPECT_HAS(msg, "tensor 'blk.0.attn_k.weight' has shape [64, 48], expected [64, 32]");
}

TEST(ModelErrors, UnsupportedArchitecture) {
  const auto path = edited_model("arch", {[](const std::string& k, GgufValue& v) {
                                            if (k == "general.architecture") v.v = std::string("mamba");
                                            return true;
                                          },
                                          nullptr});
  EXPECT_HAS(load_error(path), "unsupported architecture 'mamba' (supported: llama, qwen2, qwen3, qwen3moe, gpt-oss, phi3, gemma2, gemma3)");
}

TEST(ModelErrors, MissingRequiredKey) {
  const auto path = edited_model("key", {[](const std::string& k, GgufValue&) { return k != "llama.block_count"; }, nullptr});
  EXPECT_HAS(load_error(path), "missing required key 'llama.block_count'");
}

TEST(ModelErrors, HeadCountsThatDoNotDivide) {
  const auto path = edited_model("heads", {[](const std::string& k, GgufValue& v) {
                                             if (k == "llama.attention.head_count_kv") v.v = uint64_t{3};
                                             return true;
                                           },
                                           nullptr});
  EXPECT_HAS(load_error(path), "not a multiple of head_count_kv 3");
}

TEST(ModelErrors, VocabularyAndEmbeddingDisagree) {
  const auto path = edited_model("vocab", {nullptr, [](const std::string& n, std::vector<int64_t>& shape, auto&) {
                                             if (n == "token_embd.weight" || n == "output.weight") shape[1] = 310;
                                             return true;
                                           }});
  // open_model (the apps' and the tests' way in) refuses it, naming the file and both sizes.
  const std::string error = load_error(path);
  EXPECT_HAS(error, path);
  EXPECT_HAS(error, "the vocabulary has 300 tokens but token_embd.weight has 310 rows");
  // The model itself loads (310 rows) and never reads past its own table.
  const std::shared_ptr<const GgufFile> file = GgufFile::open(path);
  const Sequence model(file, make_cpu_backend(2));
  EXPECT_EQ(model.config().n_vocab, 310);
  EXPECT_EQ(Vocab::from_gguf(*file).size(), 300);
}

TEST(ModelErrors, PromptLongerThanContext) {
  auto m = test::load_test_model(edited_model("ctx", {}), /*n_ctx=*/16);
  std::vector<int32_t> prompt(20, 5);
  GenerationOptions o;
  o.sampling.temperature = 0;
  try {
    generate(*m.model, *m.tokenizer, prompt, o);
    FAIL() << "expected std::length_error";
  } catch (const std::length_error& e) {
    EXPECT_HAS(std::string(e.what()), "the prompt has 20 tokens but the context holds 16");
  }
  EXPECT_THROW(generate(*m.model, *m.tokenizer, {}, o), std::invalid_argument);
}

TEST(ModelErrors, GenerationStopsCleanlyWhenTheContextFills) {
  auto m = test::load_test_model(edited_model("fill", {}), /*n_ctx=*/16);
  GenerationOptions o;
  o.n_predict = -1;
  o.sampling.temperature = 0;
  o.stop_at_end_of_generation = false;
  const auto r = generate(*m.model, *m.tokenizer, {1, 20, 30, 40}, o);
  EXPECT_EQ(r.stop, StopReason::ContextFull);
  EXPECT_EQ(r.ids.size(), 13u);  // 16 - 4 prompt tokens processed, plus the last sampled one
  EXPECT_EQ(m.model->n_past(), 16);
  // A further step is refused with a clear error, not a crash.
  StepBatch b = StepBatch::causal({5}, m.model->n_past());
  EXPECT_THROW(m.model->forward(b), std::length_error);
}

TEST(ModelErrors, TokenOutsideTheVocabulary) {
  auto m = test::load_test_model(edited_model("tok", {}));
  StepBatch b = StepBatch::causal({1, 300}, 0);
  try {
    m.model->forward(b);
    FAIL();
  } catch (const std::out_of_range& e) {
    EXPECT_HAS(std::string(e.what()), "token id 300 is outside the vocabulary");
  }
}

TEST(ModelErrors, KvCacheLargerThanMemoryIsAClearError) {
  const auto path = (test::temp_dir("model-err-kv") / "m.gguf").string();
  synth::SyntheticConfig c;
  c.n_layer = 8, c.n_embd = 512, c.n_head = 8, c.n_head_kv = 8, c.n_ff = 64, c.n_vocab = 300;
  synth::write_synthetic_model(c, path);
  try {
    test::load_test_model(path, /*n_ctx=*/1 << 22);  // 8 layers x 4M x 512 x 2 x 4 bytes = 128 GiB
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_HAS(std::string(e.what()), "more than this machine's memory");
  }
}

TEST(ModelErrors, ZeroTokensRequestedGeneratesNothing) {
  auto m = test::load_test_model(edited_model("zero", {}));
  GenerationOptions o;
  o.n_predict = 0;
  o.sampling.temperature = 0;
  const auto r = generate(*m.model, *m.tokenizer, {1, 20}, o);
  EXPECT_TRUE(r.ids.empty());
  EXPECT_EQ(r.n_steps, 0);
  o.n_predict = 5;
  const auto r5 = generate(*m.model, *m.tokenizer, {1, 20}, o);
  EXPECT_EQ(r5.ids.size(), 5u);
  EXPECT_EQ(r5.n_steps, 5);
  EXPECT_DOUBLE_EQ(r5.tokens_per_step(), 1.0);
}

TEST(ModelErrors, NonFiniteRopeParametersAreRejected) {
  const auto path = edited_model("rope", {[](const std::string& k, GgufValue& v) {
                                            if (k == "llama.rope.freq_base") v.v = std::nan("");
                                            return true;
                                          },
                                          nullptr});
  EXPECT_HAS(load_error(path), "rope.freq_base must be a positive finite number");
}

// A mixture-of-experts file whose experts do not add up: more used than there are, a
// key or the router missing, an expert tensor holding another number of experts.
TEST(ModelErrors, MixtureOfExpertsFilesThatDoNotAddUp) {
  synth::SyntheticConfig moe = *synth::preset("qwen3moe-tiny");  // 8 experts of 32, 2 used
  moe.n_vocab = 300, moe.n_ctx = 32;
  std::string path = edited_model("moe-used", {[](const std::string& k, GgufValue& v) {
                                                 if (k == "qwen3moe.expert_used_count") v.v = uint64_t{9};
                                                 return true;
                                               },
                                               nullptr},
                                  moe);
  EXPECT_HAS(load_error(path), "expert_used_count 9 is more than expert_count 8");
  path = edited_model(
      "moe-key", {[](const std::string& k, GgufValue&) { return k != "qwen3moe.expert_feed_forward_length"; }, nullptr}, moe);
  EXPECT_HAS(load_error(path), "qwen3moe.expert_feed_forward_length");
  path = edited_model("moe-router", {nullptr, [](const std::string& n, auto&, auto&) { return n != "blk.0.ffn_gate_inp.weight"; }},
                      moe);
  EXPECT_HAS(load_error(path), "missing required tensor 'blk.0.ffn_gate_inp.weight'");
  path = edited_model("moe-shape", {nullptr, [](const std::string& n, std::vector<int64_t>& shape, auto&) {
                                      if (n == "blk.1.ffn_down_exps.weight") shape[2] = 7;
                                      return true;
                                    }},
                      moe);
  EXPECT_HAS(load_error(path), "tensor 'blk.1.ffn_down_exps.weight' has shape [32, 64, 7], expected [32, 64, 8]");
  // A llama file with experts (Mixtral's layout): refused as such, not as a missing tensor.
  path = edited_model("moe-llama", {[](const std::string& k, GgufValue& v) {
                                      if (k == "general.architecture") v.v = std::string("llama");
                                      return true;
                                    },
                                    nullptr},
                      moe);
  EXPECT_HAS(load_error(path), "mixture-of-experts llama files (such as Mixtral) are not supported");
}

// YaRN on a Gemma file's window layers (whose own RoPE scaling fafo does not work out
// with YaRN): refused, not run with the wrong angles.
TEST(ModelErrors, YarnOnGemmaWindowLayersIsAClearError) {
  synth::SyntheticConfig g = *synth::preset("gemma3-tiny");  // linear scaling by 8, a window of 16
  g.n_vocab = 300, g.n_ctx = 32;
  const std::string path = edited_model("gemma-yarn", {[](const std::string& k, GgufValue& v) {
                                                         if (k == "gemma3.rope.scaling.type") v.v = std::string("yarn");
                                                         return true;
                                                       },
                                                       nullptr},
                                        g);
  EXPECT_HAS(load_error(path), "YaRN scaling (rope.scaling.type yarn) in a gemma3 file with sliding-window layers is not supported");
}

// gpt-oss's own parts: the sliding window it requires, a head's sinks, an expert's bias
// row of the wrong width, an unknown RoPE scaling.
TEST(ModelErrors, GptOssFilesThatDoNotAddUp) {
  synth::SyntheticConfig oss = *synth::preset("gpt-oss-tiny");  // 8 experts of 32, 4 heads
  oss.n_vocab = 300, oss.n_ctx = 32;
  std::string path =
      edited_model("oss-window", {[](const std::string& k, GgufValue&) { return k != "gpt-oss.attention.sliding_window"; }, nullptr},
                   oss);
  EXPECT_HAS(load_error(path), "missing required key 'gpt-oss.attention.sliding_window'");
  path = edited_model("oss-sinks", {nullptr, [](const std::string& n, auto&, auto&) { return n != "blk.1.attn_sinks.weight"; }}, oss);
  EXPECT_HAS(load_error(path), "missing required tensor 'blk.1.attn_sinks.weight'");
  path = edited_model("oss-bias", {nullptr, [](const std::string& n, std::vector<int64_t>& shape, auto&) {
                                     if (n == "blk.0.ffn_up_exps.bias") shape[0] = 31;
                                     return true;
                                   }},
                      oss);
  EXPECT_HAS(load_error(path), "tensor 'blk.0.ffn_up_exps.bias' has shape [31, 8], expected [32, 8]");
  path = edited_model("oss-rope", {[](const std::string& k, GgufValue& v) {
                                     if (k == "gpt-oss.rope.scaling.type") v.v = std::string("longrope2");
                                     return true;
                                   },
                                   nullptr},
                      oss);
  EXPECT_HAS(load_error(path), "unsupported rope.scaling.type 'longrope2' (supported: none, linear, yarn)");
}
