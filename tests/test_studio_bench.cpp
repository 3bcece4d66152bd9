// fafo-studio's Bench view: the BenchSession that runs `fafo bench --devices` on a
// worker thread while the caller only starts, cancels and copies snapshots, and the
// view's command line and layout. A run on two devices ends done with both measured,
// its log in whole lines and its report saved as four files; a device that fails is
// recorded and the others go on; a cancelled run keeps the devices already finished
// and never hangs, nor does destroying a running session; a second start while
// running is refused; a missing model ends failed naming the path.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "app_options.h"
#include "bench_report.h"
#include "bench_session.h"
#include "layout.h"
#include "test_support.h"

using namespace fafo;
using namespace fafo::studio;

namespace {

using fafo::test::wait_for;

// pp 8, tg 4, t(1) and t(2), one repetition: a second or so per device on stories260K.
BenchPlan tiny_plan(const std::string& model, const std::string& devices) {
  BenchPlan p;
  p.model = model;
  p.targets = bench::resolve_bench_targets(devices, 2);
  p.config.pp = 8;
  p.config.tg = 4;
  p.config.curve = {1, 2};
  p.config.repetitions = 1;
  return p;
}

// The same tests 3000 times over: long enough that cancel() comes mid-device.
BenchPlan long_plan(const std::string& model, const std::string& devices) {
  BenchPlan p = tiny_plan(model, devices);
  p.config.repetitions = 3000;
  return p;
}

bool has_line(const std::vector<std::string>& log, const std::string& part) {
  for (const std::string& line : log)
    if (line.find(part) != std::string::npos) return true;
  return false;
}

std::string joined(const std::vector<std::string>& log) {
  std::string s;
  for (const std::string& line : log) s += line + "\n";
  return s;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

TEST(StudioBench, RunsEveryDeviceAndSavesTheReport) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  BenchSession session;
  EXPECT_EQ(session.status(), BenchStatus::Idle);
  ASSERT_EQ(session.start(tiny_plan(model_path.string(), "cpu,reference")), "");
  ASSERT_TRUE(session.wait(300)) << "the run did not end";
  const BenchSnapshot s = session.snapshot();
  ASSERT_EQ(s.status, BenchStatus::Done) << s.error << "\n" << joined(s.log);
  EXPECT_STREQ(bench_status_name(s.status), "done");
  EXPECT_TRUE(s.error.empty());
  EXPECT_EQ(s.devices, 2u);
  EXPECT_EQ(s.device, 2u);
  EXPECT_EQ(s.report.model, "stories260K.gguf");
  ASSERT_EQ(s.report.devices.size(), 2u);
  EXPECT_EQ(s.report.devices[0].label, "cpu");
  EXPECT_EQ(s.report.devices[1].label, "reference");
  for (const bench::DeviceResult& d : s.report.devices) {
    EXPECT_TRUE(d.error.empty()) << d.label << ": " << d.error;
    EXPECT_EQ(d.backend, d.label);
    EXPECT_FALSE(d.device.empty()) << d.label;
    EXPECT_EQ(d.threads, 2) << d.label;
    EXPECT_EQ(d.pp_tokens, 8) << d.label;
    EXPECT_GT(d.pp.mean, 0.0) << d.label;
    EXPECT_EQ(d.tg_tokens, 4) << d.label;
    EXPECT_GT(d.tg.mean, 0.0) << d.label;
    ASSERT_EQ(d.step_cost.size(), 2u) << d.label;
    EXPECT_EQ(d.step_cost[0].T, 1);
    EXPECT_EQ(d.step_cost[1].T, 2);
    EXPECT_GT(d.step_cost[0].ms.mean, 0.0) << d.label;
    EXPECT_TRUE(d.strategies.empty()) << "no prompts: no strategies";
  }
  // The log: each device's header, the runner's tables in whole lines, how it ended.
  EXPECT_TRUE(has_line(s.log, "=== [1/2] cpu: ")) << joined(s.log);
  EXPECT_TRUE(has_line(s.log, "=== [2/2] reference: ")) << joined(s.log);
  EXPECT_TRUE(has_line(s.log, "| pp8 | ")) << joined(s.log);
  EXPECT_TRUE(has_line(s.log, "| tg4 | ")) << joined(s.log);
  EXPECT_TRUE(has_line(s.log, "GB of weights read per token")) << joined(s.log);
  EXPECT_EQ(s.log.back(), "done: 2 of 2 devices measured");
  for (const std::string& line : s.log) EXPECT_EQ(line.find('\n'), std::string::npos) << line;

  // Save writes PREFIX.md, .csv, .json and .png; the JSON reads back as the same run.
  const std::filesystem::path dir = test::temp_dir("studio-bench-save");
  const std::vector<std::string> written = session.save((dir / "run").string());
  ASSERT_EQ(written.size(), 4u);
  for (const char* ext : {".md", ".csv", ".json", ".png"}) {
    const std::filesystem::path p = dir / (std::string("run") + ext);
    EXPECT_TRUE(std::find(written.begin(), written.end(), p.string()) != written.end()) << p;
    ASSERT_TRUE(std::filesystem::exists(p)) << p;
    EXPECT_GT(std::filesystem::file_size(p), 0u) << p;
  }
  std::ifstream in(dir / "run.json");
  const bench::BenchReport back = bench::report_from_json(nlohmann::json::parse(in));
  ASSERT_EQ(back.devices.size(), 2u);
  EXPECT_EQ(back.devices[1].label, "reference");
  EXPECT_EQ(back.devices[1].step_cost.size(), 2u);
  std::ifstream md(dir / "run.md");
  const std::string table((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
  EXPECT_NE(table.find("| t(2) / t(1) | ratio |"), std::string::npos) << table;
  // Saving where no file can be written is an error naming the file; so is no prefix.
  try {
    session.save("/nonexistent/folder/run");
    ADD_FAILURE() << "saved into a folder that does not exist";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/folder/run"), std::string::npos) << e.what();
  }
  EXPECT_THROW(session.save(""), std::runtime_error);

  // The session runs again: the new run replaces the report and the log.
  ASSERT_EQ(session.start(tiny_plan(model_path.string(), "cpu")), "");
  ASSERT_TRUE(session.wait(300));
  const BenchSnapshot again = session.snapshot();
  EXPECT_EQ(again.status, BenchStatus::Done);
  ASSERT_EQ(again.report.devices.size(), 1u);
  EXPECT_FALSE(has_line(again.log, "reference"));
}

// With prompts, every chosen strategy runs over them on every device, ar first.
TEST(StudioBench, StrategiesRunSideBySide) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  BenchPlan plan = tiny_plan(model_path.string(), "cpu");
  plan.config.pp = 0;
  plan.config.tg = 0;
  plan.config.curve.clear();
  plan.config.prompts = {"Once upon a time", "The little dog"};
  plan.config.n_generate = 24;
  plan.config.strategies = {"ar", "fafo"};
  BenchSession session;
  ASSERT_EQ(session.start(plan), "");
  ASSERT_TRUE(session.wait(300));
  const BenchSnapshot s = session.snapshot();
  ASSERT_EQ(s.status, BenchStatus::Done) << s.error << "\n" << joined(s.log);
  ASSERT_EQ(s.report.devices.size(), 1u);
  const bench::DeviceResult& d = s.report.devices[0];
  EXPECT_EQ(d.pp_tokens, 0);
  EXPECT_TRUE(d.step_cost.empty());
  ASSERT_EQ(d.strategies.size(), 2u);
  EXPECT_EQ(d.strategies[0].strategy, "ar");
  EXPECT_EQ(d.strategies[1].strategy, "fafo");
  for (const bench::StrategyRow& r : d.strategies) {
    EXPECT_EQ(r.prompts, 2) << r.strategy;
    EXPECT_GT(r.tokens, 0) << r.strategy;
    EXPECT_GT(r.tokens_per_s, 0.0) << r.strategy;
  }
  EXPECT_TRUE(has_line(s.log, "2 prompts, 24 new tokens each (greedy):")) << joined(s.log);
}

// As `fafo bench --devices`: a device that throws is recorded with its error, the others go on.
TEST(StudioBench, AFailingDeviceIsRecordedAndTheOthersGoOn) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  BenchPlan plan = tiny_plan(model_path.string(), "cpu");
  bench::BenchTarget bad;
  bad.label = "nosuch";
  bad.spec.name = "nosuch";
  bad.device_name = "no device";
  plan.targets.insert(plan.targets.begin(), bad);
  BenchSession session;
  ASSERT_EQ(session.start(plan), "");
  ASSERT_TRUE(session.wait(300));
  const BenchSnapshot s = session.snapshot();
  EXPECT_EQ(s.status, BenchStatus::Done) << s.error;
  ASSERT_EQ(s.report.devices.size(), 2u);
  EXPECT_EQ(s.report.devices[0].label, "nosuch");
  EXPECT_NE(s.report.devices[0].error.find("nosuch"), std::string::npos) << s.report.devices[0].error;
  EXPECT_EQ(s.report.devices[0].device, "no device");
  EXPECT_TRUE(s.report.devices[1].error.empty()) << s.report.devices[1].error;
  EXPECT_GT(s.report.devices[1].tg.mean, 0.0);
  EXPECT_TRUE(has_line(s.log, "nosuch: error: ")) << joined(s.log);
  EXPECT_EQ(s.log.back(), "done: 1 of 2 devices measured");
}

TEST(StudioBench, CancelKeepsTheFinishedDevicesAndDoesNotHang) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  BenchSession session;
  ASSERT_EQ(session.start(long_plan(model_path.string(), "cpu,reference")), "");
  // Cancel once the first device is finished and the second is being measured.
  ASSERT_TRUE(wait_for([&] { return !session.snapshot().report.devices.empty() || session.status() != BenchStatus::Running; }, 300));
  session.cancel();
  const auto asked = std::chrono::steady_clock::now();
  ASSERT_TRUE(session.wait(60)) << "cancel() did not end the run";
  EXPECT_LT(seconds_since(asked), 30.0);
  const BenchSnapshot s = session.snapshot();
  ASSERT_EQ(s.status, BenchStatus::Cancelled) << joined(s.log);
  EXPECT_STREQ(bench_status_name(s.status), "cancelled");
  ASSERT_EQ(s.report.devices.size(), 1u) << "the device finished before cancel() stays, the one cut short does not";
  EXPECT_EQ(s.report.devices[0].label, "cpu");
  EXPECT_TRUE(s.report.devices[0].error.empty()) << s.report.devices[0].error;
  EXPECT_EQ(s.report.devices[0].step_cost.size(), 2u);
  EXPECT_TRUE(has_line(s.log, "=== [2/2] reference: ")) << joined(s.log);
  EXPECT_EQ(s.log.back(), "cancelled: 1 of 2 devices finished");
  // What finished can be saved.
  EXPECT_EQ(session.save((test::temp_dir("studio-bench-cancel") / "part").string()).size(), 4u);

  // Cancelled at once: nothing finished, the run still ends.
  ASSERT_EQ(session.start(long_plan(model_path.string(), "cpu,reference")), "");
  session.cancel();
  ASSERT_TRUE(session.wait(60)) << "cancel() did not end the run";
  EXPECT_EQ(session.status(), BenchStatus::Cancelled);
  EXPECT_TRUE(session.snapshot().report.devices.empty());
  EXPECT_THROW(session.save((test::temp_dir("studio-bench-cancel") / "none").string()), std::runtime_error);
}

TEST(StudioBench, DestroyingARunningSessionCancelsIt) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const auto started = std::chrono::steady_clock::now();
  {
    BenchSession session;
    ASSERT_EQ(session.start(long_plan(model_path.string(), "cpu,reference")), "");
    ASSERT_TRUE(wait_for([&] { return has_line(session.snapshot().log, "| pp8 | "); }, 120));
    EXPECT_EQ(session.status(), BenchStatus::Running);
  }  // cancels and joins
  EXPECT_LT(seconds_since(started), 150.0);
}

TEST(StudioBench, ASecondStartWhileRunningIsRefused) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  BenchSession session;
  ASSERT_EQ(session.start(long_plan(model_path.string(), "cpu,reference")), "");
  const std::string refused = session.start(tiny_plan(model_path.string(), "cpu"));
  EXPECT_NE(refused.find("a benchmark is already running"), std::string::npos) << refused;
  EXPECT_NE(refused.find("cancel it first"), std::string::npos) << refused;
  EXPECT_EQ(session.status(), BenchStatus::Running) << "the refusal leaves the run going";
  EXPECT_EQ(session.snapshot().devices, 2u);
  session.cancel();
  ASSERT_TRUE(session.wait(60));
  EXPECT_EQ(session.status(), BenchStatus::Cancelled);
}

TEST(StudioBench, PlansThatCannotRunAreRefused) {
  BenchSession session;
  BenchPlan plan = tiny_plan("m.gguf", "cpu");
  plan.model.clear();
  EXPECT_NE(session.start(plan).find("choose a model"), std::string::npos);
  plan = tiny_plan("m.gguf", "cpu");
  plan.targets.clear();
  EXPECT_NE(session.start(plan).find("at least one device"), std::string::npos);
  plan = tiny_plan("m.gguf", "cpu");
  plan.config.prompts = {"Once upon a time"};
  plan.config.strategies = {"fafo", "ar"};
  EXPECT_NE(session.start(plan).find("must start with ar"), std::string::npos);
  EXPECT_EQ(session.status(), BenchStatus::Idle);
  EXPECT_THROW(session.save("x"), std::runtime_error);  // nothing to save
}

TEST(StudioBench, AMissingModelEndsFailedNamingThePath) {
  BenchSession session;
  ASSERT_EQ(session.start(tiny_plan("/nonexistent/m.gguf", "cpu,reference")), "");
  ASSERT_TRUE(session.wait(60));
  const BenchSnapshot s = session.snapshot();
  ASSERT_EQ(s.status, BenchStatus::Failed);
  EXPECT_NE(s.error.find("no device could be measured"), std::string::npos) << s.error;
  EXPECT_NE(s.error.find("/nonexistent/m.gguf: no such file"), std::string::npos) << s.error;
  ASSERT_EQ(s.report.devices.size(), 2u);
  for (const bench::DeviceResult& d : s.report.devices) EXPECT_NE(d.error.find("/nonexistent/m.gguf"), std::string::npos);
  EXPECT_TRUE(has_line(s.log, "cpu: error: /nonexistent/m.gguf")) << joined(s.log);
  EXPECT_EQ(s.log.back(), "failed: " + s.error);
}

TEST(StudioBench, CommandLineSelectsTheViewAndTheSetup) {
  const AppOptions o = parse_app_options({"-m", "m.gguf", "--bench", "cpu,reference", "--bench-pp", "8", "--bench-tg", "4",
                                          "--bench-curve", "1,2", "--bench-repetitions", "1"});
  EXPECT_EQ(o.view, View::Bench);
  EXPECT_STREQ(view_name(o.view), "bench");
  EXPECT_EQ(o.bench_devices, "cpu,reference");
  EXPECT_EQ(o.bench_config.pp, 8);
  EXPECT_EQ(o.bench_config.tg, 4);
  EXPECT_EQ(o.bench_config.curve, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(o.bench_config.repetitions, 1);
  EXPECT_TRUE(o.prompt.empty());
  EXPECT_TRUE(o.bench_prompts.empty());
  EXPECT_EQ(o.bench_n_prompts, 20);
  const AppOptions p = parse_app_options({"-m", "m", "--bench", "cpu", "--bench-prompts", "q.jsonl", "--bench-n-prompts", "3"});
  EXPECT_EQ(p.bench_prompts, "q.jsonl");
  EXPECT_EQ(p.bench_n_prompts, 3);
  // Without the flags: `fafo bench`'s defaults; --view bench alone opens the view.
  const AppOptions d = parse_app_options({"--view", "bench"});
  EXPECT_EQ(d.view, View::Bench);
  EXPECT_TRUE(d.bench_devices.empty());
  EXPECT_EQ(d.bench_config.pp, bench::BenchConfig{}.pp);
  EXPECT_EQ(d.bench_config.curve, bench::BenchConfig{}.curve);
  EXPECT_EQ(parse_app_options({"-m", "m", "--bench", "all", "--view", "chat"}).view, View::Chat);
  EXPECT_EQ(parse_app_options({"-m", "m", "--bench", "all", "--steps", "5"}).prompt, "");  // no debugger prompt
  EXPECT_THROW(parse_app_options({"--bench", "cpu"}), std::invalid_argument);  // needs a model
  EXPECT_THROW(parse_app_options({"-m", "m", "--bench", "cpu", "--prompt", "p"}), std::invalid_argument);
  EXPECT_THROW(parse_app_options({"-m", "m", "--bench", "cpu", "--chat", "hi"}), std::invalid_argument);
  EXPECT_THROW(parse_app_options({"--replay", "t.jsonl", "-m", "m", "--bench", "cpu"}), std::invalid_argument);
  EXPECT_THROW(parse_app_options({"--bench-curve", "0"}), std::invalid_argument);
  EXPECT_THROW(parse_app_options({"--bench-curve", "1,x"}), std::invalid_argument);
  EXPECT_THROW(parse_app_options({"--bench-repetitions", "0"}), std::invalid_argument);
  EXPECT_THROW(parse_app_options({"--bench-pp", "-1"}), std::invalid_argument);
  EXPECT_THROW(parse_app_options({"--bench-n-prompts", "0"}), std::invalid_argument);
  EXPECT_NE(app_usage().find("--bench-curve"), std::string::npos);
}

TEST(StudioBench, LayoutPlacesTheBenchPanels) {
  EXPECT_EQ(view_panels(View::Bench), (std::vector<std::string>{"Bench setup", "Bench results", "Bench log"}));
  EXPECT_FALSE(panel_rect(View::Bench, "Chat").has_value());
  EXPECT_FALSE(panel_rect(View::Chat, "Bench results").has_value());
  const auto results = panel_rect(View::Bench, "Bench results"), log = panel_rect(View::Bench, "Bench log");
  ASSERT_TRUE(results && log);
  EXPECT_NEAR(results->y + results->h, log->y, 1e-6) << "the log goes under the results";
}
