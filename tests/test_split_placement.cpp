// How a layer split is asked for and reported (fafo/open_model.h): --split's text,
// OpenOptions::split over three devices, the layer counts checked against the model,
// --gpu-layers auto as the default (a model that does not fit the device is split, -1
// still insists), `fafo run --split`, and `fafo bench`'s step cost per device.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fafo/backend_registry.h"
#include "fafo/device_error.h"
#include "fafo/generator.h"
#include "fafo/open_model.h"
#include "model_fixtures.h"
#include "test_support.h"

namespace fafo {
namespace {

OpenOptions stories_on(const std::string& backend) {
  OpenOptions o;
  o.path = test::shared_path("models/stories260K.gguf").string();
  o.backend = BackendSpec{backend, "", 2};
  o.n_ctx = 128;
  return o;
}

// The logits of every row of a prompt and of a two-token step after it.
std::vector<float> placement_logits(Sequence& seq) {
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378, 429, 66, 275};
  StepBatch prefill = StepBatch::causal(prompt, 0, /*logits_for_all=*/true);
  std::vector<float> all = seq.forward(prefill);
  seq.commit(prefill.size());
  StepBatch two = StepBatch::causal({300, 310}, seq.n_past(), /*logits_for_all=*/true);
  const std::vector<float> more = seq.forward(two);
  all.insert(all.end(), more.begin(), more.end());
  return all;
}

std::string split_error(const std::string& text) {
  try {
    parse_split(text);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(SplitPlacement, SplitTextIsReadOrRefusedNamingWhatIsWrong) {
  const std::vector<SplitPart> parts = parse_split("cpu=8,vulkan:0=10,vulkan:NVIDIA");
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0], (SplitPart{"cpu", "", 8}));
  EXPECT_EQ(parts[1], (SplitPart{"vulkan", "0", 10}));
  EXPECT_EQ(parts[2], (SplitPart{"vulkan", "NVIDIA", -1}));
  EXPECT_EQ(split_text(parts), "cpu=8,vulkan:0=10,vulkan:NVIDIA");
  EXPECT_EQ(parse_split("reference=1,cpu=4").back().layers, 4);

  EXPECT_HAS(split_error("cpu"), "a split needs two or more");
  EXPECT_HAS(split_error("cpu=8,,vulkan"), "an empty part");
  EXPECT_HAS(split_error("cpu=8,vulkan,"), "an empty part");
  EXPECT_HAS(split_error("cpu=x,vulkan"), "'x' is not a layer count");
  EXPECT_HAS(split_error("cpu=0,vulkan"), "'0' is not a layer count");
  EXPECT_HAS(split_error("cpu=2a,vulkan"), "'2a' is not a layer count");
  EXPECT_HAS(split_error("cpu=,vulkan"), "is not a layer count");
  EXPECT_HAS(split_error("cpu,vulkan"), "only one device may go without a layer count");
  EXPECT_HAS(split_error("vulkan:=2,cpu"), "names no device");
  EXPECT_HAS(split_error("=2,cpu"), "names no backend");
}

// Three devices, each a cpu backend of its own, give one cpu backend's bits; the
// placement numbers the devices of the same backend.
TEST(SplitPlacement, ThreeDevicesGiveTheBitsOfOne) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const OpenedModel one = open_model(stories_on("cpu"));
  OpenOptions options = stories_on("cpu");
  options.split = parse_split("cpu=1,cpu=2,cpu");
  const OpenedModel three = open_model(options);
  const ModelWeights& w = three.model->runner()->weights();
  ASSERT_EQ(w.n_devices(), 3);
  EXPECT_EQ(w.layer_count(0), 1);
  EXPECT_EQ(w.layer_count(1), 2);
  EXPECT_EQ(w.layer_count(2), 2);
  EXPECT_EQ(w.placement(), "layers 0 on cpu #1, 1-2 on cpu #2, 3-4 on cpu #3");
  EXPECT_EQ(w.device_label(1), "cpu #2");
  EXPECT_EQ(placement_logits(*three.model), placement_logits(*one.model));
  EXPECT_EQ(three.model->runner()->split_seconds().size(), 2u);  // the devices before the last

  // The cpu backend with the reference and the cpu again: every strategy keeps AR's tokens.
  options.split = parse_split("cpu=2,reference=2,cpu");
  const OpenedModel mixed = open_model(options);
  EXPECT_EQ(mixed.model->runner()->weights().placement(), "layers 0-1 on cpu #1, 2-3 on reference, 4 on cpu #2");
  const std::vector<int32_t> prompt = mixed.tokenizer->encode("Once upon a time", true);
  auto run = [&](Strategy s) {
    GenerationOptions o;
    o.n_predict = 40;
    o.sampling.temperature = 0;
    o.decoding.strategy = s;
    const OpenedModel fresh = open_sequence(mixed);  // a sequence of its own on the same weights
    return generate(*fresh.model, *fresh.tokenizer, prompt, o).ids;
  };
  const std::vector<int32_t> ar = run(Strategy::Ar);
  EXPECT_EQ(ar.size(), 40u);
  for (Strategy s : {Strategy::Jacobi, Strategy::Lookahead, Strategy::Fafo}) EXPECT_EQ(run(s), ar) << strategy_name(s);
}

TEST(SplitPlacement, LayerCountsAreCheckedAgainstTheModel) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  OpenOptions options = stories_on("cpu");
  options.split = parse_split("cpu=2,reference=2");
  EXPECT_HAS(test::open_model_error(options), "places 4 layers; the model has 5");
  options.split = parse_split("cpu=5,reference");
  EXPECT_HAS(test::open_model_error(options), "leaves no layer of the model's 5 for reference");
  options.split = parse_split("cpu=2,reference=4");
  EXPECT_HAS(test::open_model_error(options), "places 6 layers");
  options.split = parse_split("cpu=2,nosuch");
  EXPECT_HAS(test::open_model_error(options), "nosuch");
}

// --no-repack reaches every cpu part of a split and the cpu part of --gpu-layers: each
// backend's description says so (the file's rows, no copy in groups).
TEST(SplitPlacement, NoRepackReachesEveryCpuPart) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  for (const bool repack : {true, false}) {
    OpenOptions options = stories_on("cpu");
    options.backend.repack = repack;
    options.split = parse_split("cpu=2,reference=1,cpu");
    const OpenedModel split = open_model(options);
    const ModelWeights& w = split.model->runner()->weights();
    ASSERT_EQ(w.n_devices(), 3);
    for (const int32_t d : {0, 2})
      EXPECT_EQ(w.backend(d).description().find("--no-repack") != std::string::npos, !repack) << w.backend(d).description();
    options = stories_on("reference");
    options.backend.repack = repack;
    options.gpu_layers = 2;
    const OpenedModel layered = open_model(options);
    const ModelWeights& lw = layered.model->runner()->weights();
    ASSERT_EQ(lw.n_devices(), 2);
    EXPECT_EQ(lw.backend(0).name(), "cpu");
    EXPECT_EQ(lw.backend(0).description().find("--no-repack") != std::string::npos, !repack) << lw.backend(0).description();
  }
}

// The default is auto: a model that fits goes whole to the device, one that does not is
// split and the note says why; -1 insists on every layer there and fails with the sizes.
TEST(SplitPlacement, TheDefaultSplitsAModelThatDoesNotFitTheDevice) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  OpenOptions options = stories_on("reference");
  EXPECT_EQ(options.gpu_layers, OpenOptions::kGpuLayersAuto);
  const OpenedModel whole = open_model(options);
  EXPECT_EQ(whole.model->runner()->weights().n_devices(), 1);
  EXPECT_EQ(whole.placement_note, "");

  const auto file = GgufFile::open(options.path);
  const uint64_t three = device_bytes_for_layers(*file, 3, 128, KvCacheType::F32);
  const uint64_t four = device_bytes_for_layers(*file, 4, 128, KvCacheType::F32);
  options.backend.memory_limit = (three + four) / 2;
  const OpenedModel split = open_model(options);
  EXPECT_EQ(split.model->runner()->weights().placement(), "layers 0-1 on cpu, 2-4 on reference");
  EXPECT_HAS(split.placement_note, "its last 3 of 5 layers there");
  EXPECT_HAS(split.placement_note, "-1 to ask for every layer there");

  options.gpu_layers = -1;  // (the estimate has room to spare: half of what the whole load took)
  options.backend.memory_limit = memory_in_use(whole.model->backend()) / 2;
  try {
    open_model(options);
    ADD_FAILURE() << "every layer loaded in half the memory they took";
  } catch (const DeviceError& e) {
    EXPECT_EQ(e.kind(), DeviceError::Kind::OutOfMemory);
    EXPECT_HAS(e.what(), "--memory-limit");
  }
}

// A server opening again keeps the first load's placement (same_placement), and auto
// counts every slot's KV cache (OpenOptions::sequences).
TEST(SplitPlacement, AReloadKeepsThePlacementAndAutoCountsEverySequence) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  OpenOptions options = stories_on("reference");
  options.n_ctx = 512;
  const auto file = GgufFile::open(options.path);
  options.backend.memory_limit = device_bytes_for_layers(*file, 5, 512, KvCacheType::F32);
  const OpenedModel one = open_model(options);
  EXPECT_EQ(one.model->runner()->weights().n_devices(), 1);
  EXPECT_EQ(same_placement(options, one).gpu_layers, -1);

  options.sequences = 8;  // 8 KV caches of 512 entries do not fit beside every layer
  const OpenedModel many = open_model(options);
  const ModelWeights& w = many.model->runner()->weights();
  ASSERT_EQ(w.n_devices(), 2);
  const int32_t on_device = w.layer_count(1);
  EXPECT_LT(on_device, 5);
  const OpenOptions again = same_placement(options, many);
  EXPECT_EQ(again.gpu_layers, on_device);
  EXPECT_EQ(open_model(again).model->runner()->weights().placement(), w.placement());

  options.backend.memory_limit = 1 << 20;  // not even the output head: every layer on the cpu
  const OpenedModel none = open_model(options);
  EXPECT_EQ(none.model->backend().name(), "cpu");
  EXPECT_EQ(same_placement(options, none).gpu_layers, 0);
  options.gpu_layers = 2;  // a count asked for stays
  EXPECT_EQ(same_placement(options, none).gpu_layers, 2);
}

// `fafo run --split` says where the layers are; FAFO on it prints plain decoding's text;
// a split that does not add up, or --split beside --gpu-layers, is a usage error.
TEST(SplitPlacement, RunWithSplitSaysWhereTheLayersAre) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const std::string base = "run -m " + test::shell_quote(model_path) + " -p 'Once upon a time' -n 24 --temp 0 ";
  const test::CommandResult ar = test::run_fafo(base + "--split cpu=1,reference=3,cpu --strategy ar");
  ASSERT_EQ(ar.exit_code, 0) << ar.err;
  EXPECT_HAS(ar.err, "layers 0 on cpu #1, 1-3 on reference, 4 on cpu #2");
  const test::CommandResult fafo = test::run_fafo(base + "--split cpu=1,reference=3,cpu --strategy fafo");
  ASSERT_EQ(fafo.exit_code, 0) << fafo.err;
  EXPECT_EQ(fafo.out, ar.out);
  const test::CommandResult long_split = test::run_fafo(base + "--split cpu=9,reference");
  EXPECT_NE(long_split.exit_code, 0);
  EXPECT_HAS(long_split.err, "the model's 5");
  const test::CommandResult both = test::run_fafo(base + "--split cpu=2,reference --gpu-layers 2");
  EXPECT_NE(both.exit_code, 0);
  EXPECT_HAS(both.err, "--split");
  const test::CommandResult bad = test::run_fafo(base + "--split cpu=two,reference");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_HAS(bad.err, "'two' is not a layer count");
}

// `fafo bench` on a split gives each device's share of every step of the curve, in its
// table and its report.
TEST(SplitPlacement, BenchGivesEachDevicesShareOfTheStep) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const std::filesystem::path dir = test::temp_dir("split-bench");
  const std::string prefix = (dir / "split").string();
  const test::CommandResult r =
      test::run_fafo("bench -m " + test::shell_quote(model_path) + " -c 256 --split cpu=2,reference --pp 0 --tg 0 " +
                     "--curve 1,4 -r 1 --report " + test::shell_quote(prefix));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.out, "| ms on cpu | ms on reference |");
  std::ifstream in(prefix + ".json");
  ASSERT_TRUE(in.good());
  const nlohmann::json j = nlohmann::json::parse(in);
  const nlohmann::json& d = j.at("devices").at(0);
  EXPECT_EQ(d.at("split_devices"), (nlohmann::json{"cpu", "reference"}));
  ASSERT_EQ(d.at("step_cost").size(), 2u);
  for (const nlohmann::json& point : d.at("step_cost")) {
    const std::vector<double> parts = point.at("device_ms").get<std::vector<double>>();
    ASSERT_EQ(parts.size(), 2u);
    EXPECT_GT(parts[0], 0.0);  // measured on the first device, not derived
    EXPECT_LT(parts[0], point.at("ms").get<double>());
    EXPECT_GT(parts[1], 0.0);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace fafo
