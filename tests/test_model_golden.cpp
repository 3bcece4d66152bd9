// The CPU reference forward pass against llama.cpp's outputs in ../shared/golden:
// greedy ids on stories260K, its logits, and the logits of every weight format.
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "fafo/generator.h"
#include "model_fixtures.h"
#include "test_support.h"

using namespace fafo;
using json = nlohmann::json;

namespace {

std::vector<json> read_jsonl(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::vector<json> out;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(json::parse(line));
  return out;
}

std::vector<int32_t> greedy(test::TestModel& m, const std::vector<int32_t>& prompt, int32_t n) {
  GenerationOptions o;
  o.n_predict = n;
  o.sampling.temperature = 0.0f;
  o.stop_at_end_of_generation = false;
  return generate(*m.model, *m.tokenizer, prompt, o).ids;
}

// Steps up to which ids must match exactly: the first step whose reference top-2
// margin is tiny (another fp32 summation order may pick the runner-up).

}  // namespace

TEST(ModelGolden, GreedyFromBosMatchesGoldenText) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  FAFO_REQUIRE_SHARED(golden_path, "golden/stories260K.greedy_bos_only.jsonl");
  FAFO_REQUIRE_SHARED(text_path, "golden/stories260K.greedy_256steps.golden.txt");
  for (const char* backend : {"cpu", "reference"}) {  // the oracle too
    SCOPED_TRACE(backend);
    auto m = test::load_test_model(model_path.string(), 0, 2, backend);
    const json g = read_jsonl(golden_path).at(0);
    const auto expected = g["greedy_ids"].get<std::vector<int32_t>>();
    const auto ids = greedy(m, {1}, static_cast<int32_t>(expected.size()));
    EXPECT_EQ(ids, expected);
    std::ifstream in(text_path);
    std::string text((std::istreambuf_iterator<char>(in)), {});
    while (!text.empty() && text.back() == '\n') text.pop_back();
    EXPECT_EQ(m.tokenizer->decode(ids), text);
  }
}

TEST(ModelGolden, GreedyIdsForEveryGoldenPrompt) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  FAFO_REQUIRE_SHARED(golden_path, "golden/stories260K.greedy.jsonl");
  for (const char* backend : {"cpu", "reference"}) {  // the oracle too
    SCOPED_TRACE(backend);
    auto m = test::load_test_model(model_path.string(), 0, 2, backend);
    const auto cases = read_jsonl(golden_path);
    ASSERT_FALSE(cases.empty());
    for (const json& c : cases) {
      const auto prompt_ids = c["prompt_ids"].get<std::vector<int32_t>>();
      EXPECT_EQ(m.tokenizer->encode(c["prompt"].get<std::string>(), true), prompt_ids) << c["prompt"];
      const auto expected = c["greedy_ids"].get<std::vector<int32_t>>();
      const auto ids = greedy(m, prompt_ids, static_cast<int32_t>(expected.size()));
      // Exact up to (and including) the first step with a tiny reference margin.
      size_t n = expected.size();
      const auto& margins = c["top2_margins"];
      for (size_t k = 0; k < margins.size(); ++k)
        if (margins[k].get<double>() < 1e-2) {
          n = k;
          break;
        }
      ASSERT_GT(n, 20u) << "golden data has a tiny margin early; test would be weak";
      EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n)),
                std::vector<int32_t>(expected.begin(), expected.begin() + static_cast<std::ptrdiff_t>(n)))
          << "prompt: " << c["prompt"] << " (compared " << n << " steps)";
    }
  }
}

TEST(ModelGolden, LogitsMatchLlamaCpp) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  FAFO_REQUIRE_SHARED(golden_path, "golden/stories260K.logits.json");
  for (const char* backend : {"cpu", "reference"}) {  // the oracle too
    SCOPED_TRACE(backend);
    auto m = test::load_test_model(model_path.string(), 0, 2, backend);
    std::ifstream in(golden_path);
    const json g = json::parse(in);
    for (const json& p : g["prompts"]) {
      const auto prompt_ids = p["prompt_ids"].get<std::vector<int32_t>>();
      const auto next = p["greedy_ids_first"].get<std::vector<int32_t>>();
      const auto& expected = p["logits"];
      m.model->truncate(0);
      std::vector<float> logits = prefill(*m.model, prompt_ids, 512);
      double worst = 0.0;
      for (size_t k = 0; k < expected.size(); ++k) {
        const auto ref = expected[k].get<std::vector<float>>();
        ASSERT_EQ(ref.size(), logits.size());
        for (size_t v = 0; v < ref.size(); ++v) worst = std::max(worst, std::fabs(static_cast<double>(ref[v] - logits[v])));
        StepBatch step = StepBatch::causal({next[k]}, m.model->n_past());
        logits = m.model->forward(step);
        m.model->commit(1);
      }
      EXPECT_LT(worst, 1e-3) << p["prompt"];
    }
  }
}

// Every weight format on the synth-256 model: logits of an 8-token batch against
// llama.cpp. Quantized formats: llama.cpp rounds activations before each quantized
// product and fafo does not, so the tolerance is 0.15 (README of golden/quant: ~0.05-0.11).
class QuantLogits : public ::testing::TestWithParam<std::pair<const char*, double>> {};

TEST_P(QuantLogits, MatchLlamaCpp) {
  const auto [label, tolerance] = GetParam();
  FAFO_REQUIRE_SHARED(logits_path, std::string("golden/quant/logits/") + label + ".logits.json");
  std::ifstream in(logits_path);
  const json g = json::parse(in);
  const auto model_path = test::shared_path("golden/quant/gguf/" + std::filesystem::path(g["file"].get<std::string>()).filename().string());
  auto m = test::load_test_model(model_path.string());
  const auto tokens = g["tokens"].get<std::vector<int32_t>>();
  StepBatch batch = StepBatch::causal(tokens, 0, /*logits_for_all=*/true);
  const std::vector<float> logits = m.model->forward(batch);
  const int32_t n_vocab = m.model->config().n_vocab;
  double worst = 0.0;
  int argmax_agree = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const auto ref = g["logits"][i].get<std::vector<float>>();
    for (int32_t v = 0; v < n_vocab; ++v)
      worst = std::max(worst, std::fabs(static_cast<double>(ref[static_cast<size_t>(v)] - logits[i * static_cast<size_t>(n_vocab) + static_cast<size_t>(v)])));
    const float* row = logits.data() + i * static_cast<size_t>(n_vocab);
    argmax_agree += std::max_element(row, row + n_vocab) - row == std::max_element(ref.begin(), ref.end()) - ref.begin();
  }
  EXPECT_LT(worst, tolerance) << label;
  EXPECT_GE(argmax_agree, 7) << label;
}

INSTANTIATE_TEST_SUITE_P(AllFormats, QuantLogits,
                         ::testing::Values(std::make_pair("F32", 1e-4), std::make_pair("F16-pure", 0.01),
                                           std::make_pair("BF16-pure", 0.05), std::make_pair("Q8_0-pure", 0.15),
                                           std::make_pair("Q4_0-pure", 0.15), std::make_pair("Q4_1-pure", 0.15),
                                           std::make_pair("Q5_0-pure", 0.15), std::make_pair("Q5_1-pure", 0.15),
                                           std::make_pair("Q2_K-pure", 0.15), std::make_pair("Q3_K_M-pure", 0.15),
                                           std::make_pair("Q4_K_M-pure", 0.15), std::make_pair("Q5_K_M-pure", 0.15),
                                           std::make_pair("Q6_K-pure", 0.15), std::make_pair("Q4_K_M-mixed", 0.15)),
                         [](const auto& param_info) {
                           std::string n = param_info.param.first;
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });
