// `fafo quantize`: a model written in another type or mix keeps its metadata and
// vocabulary, has each tensor in the type the mix asks for, runs, and can draft for the
// original; bad requests are clear errors that leave no file behind.
#include <algorithm>
#include <filesystem>
#include <optional>
#include <vector>
#include <nlohmann/json.hpp>

#include "fafo/gguf.h"
#include "fafo/quant_mix.h"
#include "fafo/tensor_type.h"
#include "synthetic_model.h"
#include "test_support.h"

namespace {

using fafo::test::run_fafo;


}  // namespace

TEST(CliQuantize, EveryTypeKeepsTheModelUsable) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const auto dir = fafo::test::temp_dir("cli-quantize");
  const auto original = fafo::GgufFile::open(model.string());
  const std::string run = " -p 'Once upon a time' -n 24 --temp 0 --json --strategy ar";
  const auto plain = nlohmann::json::parse(run_fafo("run -m " + fafo::test::shell_quote(model) + run).out);
  for (const std::string type : {"F16", "Q8_0", "Q4_0", "Q4_K_M", "IQ3_S"}) {  // IQ3_S: IQ4_NL for rows of 64
    const auto out = dir / (type + ".gguf");
    const auto q = run_fafo("quantize " + fafo::test::shell_quote(model) + " " + fafo::test::shell_quote(out) + " " + type);
    ASSERT_EQ(q.exit_code, 0) << q.err;
    EXPECT_HAS(q.err, "tensors");
    const auto file = fafo::GgufFile::open(out.string());
    ASSERT_EQ(file->tensors().size(), original->tensors().size());
    for (const auto& t : file->tensors()) {
      const auto* o = original->find_tensor(t.name);
      ASSERT_NE(o, nullptr) << t.name;
      EXPECT_EQ(t.shape, o->shape) << t.name;
      const auto want = t.shape.size() >= 2 ? fafo::quant_type_for(type, t.name, t.shape[0], 5, false) : o->type;
      EXPECT_EQ(t.type, want) << type << " " << t.name;
    }
    const auto& tokens = file->find("tokenizer.ggml.tokens")->as_array().items;
    const auto& original_tokens = original->find("tokenizer.ggml.tokens")->as_array().items;
    ASSERT_EQ(tokens.size(), original_tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) ASSERT_EQ(tokens[i].as_string(), original_tokens[i].as_string());
    EXPECT_EQ(file->find("general.file_type")->as_uint(), fafo::quant_file_type(type));
    // It runs; at 8 bits and more it writes the original's text, and it drafts for it.
    const auto r = run_fafo("run -m " + fafo::test::shell_quote(out) + run);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    if (type == "F16" || type == "Q8_0") {
      EXPECT_EQ(nlohmann::json::parse(r.out)["ids"], plain["ids"]) << type;
    }
    const auto d = run_fafo("run -m " + fafo::test::shell_quote(model) + " -p 'Once upon a time' -n 24 --temp 0 --json --strategy draft --draft-model " + fafo::test::shell_quote(out));
    ASSERT_EQ(d.exit_code, 0) << d.err;
    EXPECT_EQ(nlohmann::json::parse(d.out)["ids"], plain["ids"]) << type;
  }
}

// llama-quantize requires an importance matrix for IQ3_XXS; fafo writes ggml's
// quantization without one and says so.
TEST(CliQuantize, Iq3XxsWithoutAnImportanceMatrixIsWrittenWithANote) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const auto dir = fafo::test::temp_dir("cli-quantize-iq3");
  const auto q = run_fafo("quantize " + fafo::test::shell_quote(model) + " " + fafo::test::shell_quote(dir / "q.gguf") + " IQ3_XXS");
  ASSERT_EQ(q.exit_code, 0) << q.err;
  EXPECT_HAS(q.err, "importance matrix");
  EXPECT_EQ(fafo::GgufFile::open((dir / "q.gguf").string())->find("general.file_type")->as_uint(), 23u);
}

// A model whose rows are whole 256-value blocks (fafo-synth's grid-tiny, F32): every
// matrix `fafo quantize` writes in IQ3_XXS or IQ3_S holds the bytes quantize_row writes
// for the original rows (which tests/test_grid_formats.cpp checks against llama.cpp's).
TEST(CliQuantize, Iq3MatricesAreTheQuantizersRows) {
  std::optional<fafo::synth::SyntheticConfig> c = fafo::synth::preset("grid-tiny");
  ASSERT_TRUE(c);
  const auto dir = fafo::test::temp_dir("cli-quantize-iq3-rows");
  const std::string model = (dir / "f32.gguf").string();
  fafo::synth::write_synthetic_model(*c, model);
  const auto original = fafo::GgufFile::open(model);
  for (const fafo::TensorType type : {fafo::TensorType::IQ3_XXS, fafo::TensorType::IQ3_S}) {
    const std::string name(fafo::tensor_type_name(type));
    const auto out = dir / (name + ".gguf");
    const auto q = run_fafo("quantize " + fafo::test::shell_quote(model) + " " + fafo::test::shell_quote(out) + " " + name);
    ASSERT_EQ(q.exit_code, 0) << q.err;
    const auto file = fafo::GgufFile::open(out.string());
    int matrices = 0;
    for (const auto& t : file->tensors()) {
      if (t.type != type) continue;
      const auto* o = original->find_tensor(t.name);
      ASSERT_NE(o, nullptr) << t.name;
      ASSERT_EQ(o->type, fafo::TensorType::F32) << t.name;
      const int64_t cols = t.shape[0];
      const size_t row_bytes = fafo::tensor_row_bytes(type, cols);
      std::vector<uint8_t> want(row_bytes);
      const auto* x = reinterpret_cast<const float*>(o->data);
      for (int64_t r = 0; r < t.n_rows(); ++r) {
        fafo::quantize_row(type, x + r * cols, want.data(), cols);
        ASSERT_TRUE(std::equal(want.begin(), want.end(), t.data + r * row_bytes)) << name << " " << t.name << " row " << r;
      }
      ++matrices;
    }
    EXPECT_GE(matrices, 7) << name;  // at least each layer's projections
  }
}

TEST(CliQuantize, BadRequestsAreClearErrors) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const auto dir = fafo::test::temp_dir("cli-quantize-errors");
  auto r = run_fafo("quantize " + fafo::test::shell_quote(model) + " " + fafo::test::shell_quote(dir / "x.gguf") + " Q3_X");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_HAS(r.err, "unknown or unsupported weight type 'Q3_X'");
  EXPECT_HAS(r.err, "Q4_K_M");
  r = run_fafo("quantize " + fafo::test::shell_quote(dir / "missing.gguf") + " " + fafo::test::shell_quote(dir / "x.gguf") + " Q8_0");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_HAS(r.err, "cannot open " + (dir / "missing.gguf").string() + ": No such file or directory");
  r = run_fafo("quantize " + fafo::test::shell_quote(model) + " " + fafo::test::shell_quote(model) + " Q8_0");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_HAS(r.err, "would overwrite the input");
  EXPECT_FALSE(std::filesystem::exists(dir / "x.gguf"));
}
