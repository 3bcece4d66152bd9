// The benchmark's report (app/bench/bench_report.h): the comparison table, CSV and JSON
// of a run over several devices, the files written side by side, and how `--devices`
// names backends and devices (bench_runner.h).
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "bench_report.h"
#include "bench_runner.h"
#include "test_support.h"

using namespace fafo::bench;

namespace {

DeviceResult report_device(const std::string& label, double scale) {
  DeviceResult d;
  d.label = label;
  d.backend = label.substr(0, label.find(':'));
  d.device = "Device " + label;
  d.description = "the " + label + " backend";
  d.threads = 2;
  d.pp_tokens = 512;
  d.pp = {100 * scale, 1.5};
  d.tg_tokens = 128;
  d.tg = {20 * scale, 0.25};
  d.weight_bytes_per_token = 6.3e8;
  d.effective_gb_per_s = 6.3e8 * d.tg.mean / 1e9;
  d.step_cost = {{1, {10 / scale, 0.1}}, {8, {30 / scale, 0.2}}};
  StrategyRow ar;
  ar.strategy = "ar";
  ar.tokens = 78;
  ar.steps = 78;
  ar.tau = 1;
  ar.step_tokens = 1;
  ar.tokens_per_s = 20 * scale;
  ar.speedup = 1;
  ar.ids_equal_ar = ar.prompts = 2;
  StrategyRow fafo = ar;
  fafo.strategy = "fafo";
  fafo.window = 8;
  fafo.ngram = 5;
  fafo.guesses = 8;
  fafo.lookback = 4;
  fafo.steps = 39;
  fafo.tau = 2;
  fafo.step_tokens = 65;
  fafo.tokens_per_s = 30 * scale;
  fafo.speedup = 1.5;
  d.strategies = {ar, fafo};
  return d;
}

BenchReport two_devices_and_a_failure() {
  BenchReport r;
  r.model = "stories260K.gguf";
  r.devices = {report_device("cpu", 1.0), report_device("vulkan:0", 2.0)};
  DeviceResult failed;
  failed.label = "reference";
  failed.backend = "reference";
  failed.error = "out of memory | no room";
  r.devices.push_back(failed);
  return r;
}

std::string read(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace

TEST(BenchReport, MarkdownPutsTheDevicesSideBySide) {
  const std::string md = report_markdown(two_devices_and_a_failure());
  EXPECT_NE(md.find("| test | unit | cpu | vulkan:0 | reference |"), std::string::npos) << md;
  EXPECT_NE(md.find("| pp512 | tokens/s | 100.00 ± 1.50 | 200.00 ± 1.50 | - |"), std::string::npos) << md;
  EXPECT_NE(md.find("| tg128 | tokens/s | 20.00 ± 0.25 | 40.00 ± 0.25 | - |"), std::string::npos) << md;
  EXPECT_NE(md.find("| t(8) / t(1) | ratio | 3.00 | 3.00 | - |"), std::string::npos) << md;
  EXPECT_NE(md.find("| fafo | tokens/s (speedup, tau) | 30.0 (1.50x, 2.00) | 60.0 (1.50x, 2.00) | - |"), std::string::npos)
      << md;
  // The failure is reported, its pipe made harmless to the table.
  EXPECT_NE(md.find("| reference | reference |  | - | failed: out of memory / no room |"), std::string::npos) << md;
}

TEST(BenchReport, MarkdownSaysWhenIdsDifferFromPlainDecoding) {
  BenchReport r = two_devices_and_a_failure();
  r.devices[1].strategies[1].ids_equal_ar = 1;
  const std::string md = report_markdown(r);
  EXPECT_NE(md.find("60.0 (1.50x, 2.00) ids differ from ar in 1 |"), std::string::npos) << md;
}

TEST(BenchReport, CsvHasOneLinePerFigure) {
  BenchReport r = two_devices_and_a_failure();
  r.devices[0].device = "AMD EPYC, 2 cores";
  const std::string csv = report_csv(r);
  std::istringstream in(csv);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "device,backend,device_name,threads,test,T,value,sd,unit");
  int lines = 0;
  while (std::getline(in, line)) ++lines;
  // Per measured device: pp, tg, GB/s, 2 step costs, 2 strategies x 3 figures.
  EXPECT_EQ(lines, 2 * (3 + 2 + 6));
  EXPECT_NE(csv.find("cpu,cpu,\"AMD EPYC, 2 cores\",2,pp,512,100,1.5,tokens/s\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find("vulkan:0,vulkan,Device vulkan:0,2,step_cost,8,15,0.2,ms\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find("vulkan:0,vulkan,Device vulkan:0,2,strategy_fafo_speedup,0,1.5,0,x\n"), std::string::npos) << csv;
}

TEST(BenchReport, JsonRoundTrips) {
  BenchReport r = two_devices_and_a_failure();
  r.devices[0].profile = nlohmann::json::array({{{"T", 1}, {"unavailable", "no timer"}}});
  const nlohmann::json j = report_json(r);
  EXPECT_EQ(j["devices"].size(), 3u);
  EXPECT_EQ(j["devices"][1]["step_cost"][1]["ms"], 15.0);
  EXPECT_FALSE(j["devices"][2].contains("pp"));
  EXPECT_EQ(j["devices"][1]["strategies"][1]["step_tokens"], 65);
  const BenchReport back = report_from_json(nlohmann::json::parse(j.dump()));
  EXPECT_EQ(report_json(back), j);
  EXPECT_EQ(report_markdown(back), report_markdown(r));
}

// A run at a depth with a block cache: the rows say the depth as llama-bench does
// ("tg128 @ d4096"), a row gives each device's KV cache type and bytes per token, and
// the JSON and CSV keep both.
TEST(BenchReport, DepthAndKvCacheAreInEveryForm) {
  BenchReport r = two_devices_and_a_failure();
  for (DeviceResult& d : r.devices) {
    if (!d.error.empty()) continue;
    d.depth = 4096;
    d.kv_type = "q8_0";
    d.kv_bytes_per_token = 4352;
  }
  r.devices[1].kv_type = "f32", r.devices[1].kv_bytes_per_token = 16384;
  const std::string md = report_markdown(r);
  EXPECT_NE(md.find("| KV cache | bytes / token | q8_0, 4352 | f32, 16384 | - |"), std::string::npos) << md;
  EXPECT_NE(md.find("| tg128 @ d4096 | tokens/s | 20.00 ± 0.25 | 40.00 ± 0.25 | - |"), std::string::npos) << md;
  EXPECT_NE(md.find("| pp512 @ d4096 | tokens/s |"), std::string::npos) << md;
  EXPECT_EQ(md.find("| tg128 |"), std::string::npos) << md;
  const std::string csv = report_csv(r);
  EXPECT_NE(csv.find("cpu,cpu,Device cpu,2,kv_cache_q8_0,0,4352,0,bytes/token\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find("cpu,cpu,Device cpu,2,depth,4096,4096,0,tokens\n"), std::string::npos) << csv;
  const nlohmann::json j = report_json(r);
  EXPECT_EQ(j["devices"][0]["depth"], 4096);
  EXPECT_EQ(j["devices"][1]["kv_cache"]["type"], "f32");
  const BenchReport back = report_from_json(nlohmann::json::parse(j.dump()));
  EXPECT_EQ(report_json(back), j);
  EXPECT_EQ(report_markdown(back), md);
}

TEST(BenchReport, JsonWithMissingFieldsNamesThem) {
  nlohmann::json j = report_json(two_devices_and_a_failure());
  j["devices"][1]["tg"].erase("sd");
  try {
    report_from_json(j);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("device 1 tg: no field 'sd'"), std::string::npos) << e.what();
  }
  j = report_json(two_devices_and_a_failure());
  j["devices"][0]["threads"] = "two";
  EXPECT_THROW(report_from_json(j), std::runtime_error);
  EXPECT_THROW(report_from_json(nlohmann::json::array()), std::runtime_error);
}

TEST(BenchReport, WritesMarkdownCsvJsonAndAChart) {
  const auto dir = fafo::test::temp_dir("bench-report");
  const BenchReport r = two_devices_and_a_failure();
  const auto paths = write_bench_report(r, (dir / "run").string());
  ASSERT_EQ(paths.size(), 4u);
  EXPECT_EQ(read(dir / "run.md"), report_markdown(r));
  EXPECT_EQ(read(dir / "run.csv"), report_csv(r));
  EXPECT_EQ(nlohmann::json::parse(read(dir / "run.json")), report_json(r));
  const std::string png = read(dir / "run.png");
  ASSERT_GT(png.size(), 1000u);
  EXPECT_EQ(png.substr(1, 3), "PNG");
  try {
    write_bench_report(r, (dir / "no-such-folder" / "run").string());
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no-such-folder"), std::string::npos) << e.what();
  }
}

TEST(BenchTargets, NameBackendsAndDevices) {
  const auto all = resolve_bench_targets("all", 2);
  bool cpu = false, reference = false;
  for (const BenchTarget& t : all) {
    cpu = cpu || t.label == "cpu";
    reference = reference || t.label == "reference";
    EXPECT_EQ(t.spec.threads, 2);
    EXPECT_FALSE(t.device_name.empty()) << t.label;
  }
  EXPECT_TRUE(cpu && reference);
  const auto two = resolve_bench_targets(" reference , cpu:0", 1);  // spaces around items are fine
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].label, "reference");
  EXPECT_EQ(two[0].spec.name, "reference");
  EXPECT_EQ(two[0].spec.device, "");  // a backend alone: the device --backend alone would pick
  EXPECT_EQ(two[1].label, "cpu");
  EXPECT_EQ(two[1].spec.device, "0");
  auto error_of = [](const std::string& spec) {
    try {
      resolve_bench_targets(spec, 1);
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of("cpu,nope").find("no backend 'nope'"), std::string::npos) << error_of("cpu,nope");
  EXPECT_NE(error_of("cpu,cpu:0").find("cpu is named twice"), std::string::npos) << error_of("cpu,cpu:0");
  EXPECT_NE(error_of("cpu:7").find("has no device '7'"), std::string::npos) << error_of("cpu:7");
  // A number is an index, never part of a name (a CPU's model name may hold digits).
  EXPECT_NE(error_of("cpu:1").find("has no device '1'"), std::string::npos) << error_of("cpu:1");
  EXPECT_NE(error_of(",").find("empty list"), std::string::npos) << error_of(",");
}
