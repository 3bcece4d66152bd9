// Progress of long waits (fafo/progress.h): a task's reports reach the sink installed when
// it started, once finished; the terminal sink draws nothing before its delay, one line
// redrawn in place after it (at most every interval), a summary line at the end of a
// wait that lasted the delay, and nothing at all for a shorter one; the command line's
// choice of whether to draw. Every time is an injected clock's: nothing here depends on
// the machine's speed.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "fafo/progress.h"
#include "progress_recorder.h"

namespace {

using namespace fafo;
using fafo::test::ProgressRecorder;

// The terminal sink writing into `out`, on a clock the test moves by hand.
struct FakeTerminal {
  double now = 0;
  std::string out;
  ProgressSink sink;

  explicit FakeTerminal(size_t width = 200) {
    TerminalProgressOptions o;
    o.write = [this](std::string_view text) { out += text; };
    o.clock = [this] { return now; };
    o.width = width;  // not stderr's terminal width: the same wherever the tests run
    sink = make_terminal_progress(o);
  }
  // Reports `u` at time `t` and returns what was written.
  std::string report(double t, ProgressUpdate u) {
    now = t;
    const size_t before = out.size();
    sink(u);
    return out.substr(before);
  }
};

ProgressUpdate update(uint64_t task, std::string_view label, uint64_t done, uint64_t total, bool finished = false) {
  ProgressUpdate u;
  u.task = task;
  u.label = label;
  u.done = done;
  u.total = total;
  u.finished = finished;
  return u;
}

TEST(Progress, TheTerminalDrawsNothingBeforeTheDelay) {
  FakeTerminal term;
  EXPECT_EQ(term.report(0.0, update(1, "loading", 0, 10)), "");
  EXPECT_EQ(term.report(0.5, update(1, "loading", 5, 10)), "");
  EXPECT_EQ(term.report(0.99, update(1, "loading", 9, 10)), "");
  // It ended within the delay: no summary either.
  EXPECT_EQ(term.report(0.995, update(1, "loading", 10, 10, true)), "");
  EXPECT_EQ(term.out, "");
}

TEST(Progress, TheTerminalRedrawsOneLineThenLeavesASummary) {
  FakeTerminal term;
  const char* label = "creating Vulkan pipelines";
  EXPECT_EQ(term.report(0.0, update(7, label, 0, 24)), "");
  EXPECT_EQ(term.report(1.0, update(7, label, 6, 24)), "\rfafo: creating Vulkan pipelines: 6/24 (25%), 1.0 s");
  EXPECT_EQ(term.report(1.05, update(7, label, 7, 24)), "");  // within the interval of the last draw
  EXPECT_EQ(term.report(1.2, update(7, label, 12, 24)), "\rfafo: creating Vulkan pipelines: 12/24 (50%), 1.2 s");
  EXPECT_EQ(term.report(2.5, update(7, label, 24, 24, true)),
            "\rfafo: creating Vulkan pipelines: 24/24 (100%), 2.5 s\n");
  // The line ended with its summary: another task starts a line of its own.
  EXPECT_EQ(term.report(3.0, update(8, "next", 0, 0)), "");
  EXPECT_EQ(term.report(4.0, update(8, "next", 0, 0)), "\rfafo: next: 1.0 s");
}

TEST(Progress, AShorterLineCoversWhatALongerOneLeft) {
  FakeTerminal term;
  ProgressUpdate u = update(1, "tokenizing", 0, 0);
  u.unit = ProgressUnit::Bytes;
  term.report(0.0, u);
  u.detail = "12.50 M tokens";
  u.done = 3'000'000;
  const std::string long_line = term.report(1.0, u);
  EXPECT_EQ(long_line, "\rfafo: tokenizing: 3.0 MB, 12.50 M tokens, 1.0 s");
  u.detail = "";
  const std::string short_line = term.report(2.0, u);
  EXPECT_EQ(short_line, "\rfafo: tokenizing: 3.0 MB, 2.0 s" + std::string(long_line.size() - 32, ' '));
  EXPECT_EQ(short_line.size(), long_line.size());
}

TEST(Progress, ATaskInsideAnotherTakesTheLineThenGivesItBack) {
  FakeTerminal term;
  term.report(0.0, update(1, "outer", 0, 4));
  EXPECT_EQ(term.report(1.5, update(1, "outer", 1, 4)), "\rfafo: outer: 1/4 (25%), 1.5 s");
  EXPECT_EQ(term.report(1.6, update(2, "inner", 0, 2)), "");  // not yet its delay
  EXPECT_EQ(term.report(2.7, update(2, "inner", 1, 2)), "\rfafo: inner: 1/2 (50%), 1.1 s");
  EXPECT_EQ(term.report(3.0, update(2, "inner", 2, 2, true)), "\rfafo: inner: 2/2 (100%), 1.4 s\n");
  // The summary ended the line: the outer task draws at once on the next.
  EXPECT_EQ(term.report(3.01, update(1, "outer", 2, 4)), "\rfafo: outer: 2/4 (50%), 3.0 s");
  EXPECT_EQ(term.report(3.5, update(1, "outer", 4, 4, true)), "\rfafo: outer: 4/4 (100%), 3.5 s\n");
}

TEST(Progress, ALineIsCutToTheWidth) {
  FakeTerminal term(20);
  term.report(0.0, update(1, "a rather long label for a narrow terminal", 1, 2));
  EXPECT_EQ(term.report(1.0, update(1, "a rather long label for a narrow terminal", 1, 2)), "\rfafo: a rather long ");
}

TEST(Progress, LinesShowTheCountsInTheirUnits) {
  ProgressUpdate u = update(1, "creating Vulkan pipelines for Q4_K, Q6_K weights", 3, 14);
  EXPECT_EQ(progress_line(u, 0.31), "creating Vulkan pipelines for Q4_K, Q6_K weights: 3/14 (21%), 0.3 s");
  u = update(1, "loading weights (vulkan)", 412'000'000, 668'800'000);
  u.unit = ProgressUnit::Bytes;
  EXPECT_EQ(progress_line(u, 3.14), "loading weights (vulkan): 412.0/668.8 MB (61%), 3.1 s");
  u.done = 12'300'000'000, u.total = 40'000'000'000;
  EXPECT_EQ(progress_line(u, 10), "loading weights (vulkan): 12.3/40.0 GB (30%), 10.0 s");
  u = update(1, "tokenizing", 9'300'000, 20'600'000);
  u.unit = ProgressUnit::Bytes;
  u.detail = "4.10 M tokens";
  EXPECT_EQ(progress_line(u, 2.0), "tokenizing: 9.3/20.6 MB (45%), 4.10 M tokens, 2.0 s");
  u = update(1, "sorting suffixes", 9'360'000, 0);
  u.unit = ProgressUnit::Tokens;
  EXPECT_EQ(progress_line(u, 1.94), "sorting suffixes: 9.36 M tokens, 1.9 s");
  EXPECT_EQ(progress_line(update(1, "waiting", 0, 0), 1.0), "waiting: 1.0 s");
  EXPECT_EQ(progress_line(update(1, "counting", 7, 0), 1.0), "counting: 7, 1.0 s");
  EXPECT_EQ(progress_line(update(1, "over", 12, 10), 1.0), "over: 12/10 (100%), 1.0 s");
}

TEST(Progress, ATaskReportsEachChangeAndFinishesOnce) {
  ProgressRecorder rec;
  {
    ProgressTask task("loading", 5);
    EXPECT_TRUE(task.reported());
    task.advance(2);
    task.set_detail("half");
    task.set_total(4);
    task.set_done(4);
    task.finish();
    task.advance();  // after the end: nothing more
    task.finish();
  }  // nor from the destructor
  const std::vector<ProgressRecorder::Report> r = rec.reports();
  ASSERT_EQ(r.size(), 6u);
  for (const auto& report : r) {
    EXPECT_EQ(report.task, r[0].task);
    EXPECT_EQ(report.label, "loading");
  }
  EXPECT_EQ(r[0].done, 0u);
  EXPECT_EQ(r[0].total, 5u);
  EXPECT_EQ(r[1].done, 2u);
  EXPECT_EQ(r[2].detail, "half");
  EXPECT_EQ(r[3].total, 4u);
  EXPECT_EQ(r[4].done, 4u);
  for (size_t i = 0; i < 5; ++i) EXPECT_FALSE(r[i].finished) << i;
  EXPECT_TRUE(r[5].finished);
  EXPECT_EQ(r[5].done, 4u);
  EXPECT_EQ(r[5].detail, "half");
}

TEST(Progress, TheDestructorFinishesAndTasksAreNumberedApart) {
  ProgressRecorder rec;
  { ProgressTask a("a", 0), b("b", 0); }
  const auto r = rec.reports();
  ASSERT_EQ(r.size(), 4u);  // a, b started; b, a finished
  EXPECT_NE(r[0].task, r[1].task);
  EXPECT_TRUE(r[2].finished && r[2].label == "b");
  EXPECT_TRUE(r[3].finished && r[3].label == "a");
}

TEST(Progress, ATaskKeepsTheSinkItStartedWith) {
  ProgressRecorder first;
  ProgressTask early("early", 2);
  ProgressRecorder second;  // installed after `early` started
  early.advance();
  ProgressTask late("late", 1);
  late.finish();
  early.finish();
  EXPECT_EQ(first.labels(), std::vector<std::string>{"early"});
  EXPECT_EQ(first.reports().size(), 3u);
  EXPECT_EQ(second.labels(), std::vector<std::string>{"late"});
}

TEST(Progress, WithoutASinkNothingIsReportedButTheCountHolds) {
  const ProgressSink before = set_progress_sink({});
  {
    ProgressTask task("quiet", 10);
    EXPECT_FALSE(task.reported());
    task.advance(3);
    EXPECT_EQ(task.done(), 3u);
  }
  set_progress_sink(before);
}

TEST(Progress, ThreadsAdvanceOneTaskTogether) {
  ProgressRecorder rec;
  {
    ProgressTask task("parallel", 4000);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&] {
        for (int i = 0; i < 1000; ++i) task.advance();
      });
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(task.done(), 4000u);
  }
  const auto r = rec.reports();
  ASSERT_EQ(r.size(), 4002u);
  EXPECT_TRUE(r.back().finished);
  EXPECT_EQ(r.back().done, 4000u);
  for (size_t i = 1; i + 1 < r.size(); ++i) ASSERT_EQ(r[i].done, i) << "reports in the order of the changes";
}

TEST(Progress, TheCommandLineDrawsOnATerminalUnlessToldOtherwise) {
  EXPECT_TRUE(progress_wanted(nullptr, true));
  EXPECT_FALSE(progress_wanted(nullptr, false));  // a log, a pipe, a test: quiet
  EXPECT_TRUE(progress_wanted("1", false));
  EXPECT_FALSE(progress_wanted("0", true));
  EXPECT_TRUE(progress_wanted("", true));
  EXPECT_FALSE(progress_wanted("yes", false));
}

// $FAFO_PROGRESS set to `value` (null: unset) for a scope.
class ProgressVariable {
 public:
  explicit ProgressVariable(const char* value) {
    if (const char* v = std::getenv("FAFO_PROGRESS")) before_ = v;
    if (value) setenv("FAFO_PROGRESS", value, 1);
    else unsetenv("FAFO_PROGRESS");
  }
  ~ProgressVariable() {
    if (before_) setenv("FAFO_PROGRESS", before_->c_str(), 1);
    else unsetenv("FAFO_PROGRESS");
  }

 private:
  std::optional<std::string> before_;
};

TEST(Progress, InstallingTheTerminalFollowsTheVariable) {
  ProgressRecorder rec;
  {
    ProgressVariable off("0");
    EXPECT_FALSE(install_terminal_progress());
    ProgressTask task("still recorded", 1);  // the recorder is still the sink
  }
  EXPECT_EQ(rec.labels(), std::vector<std::string>{"still recorded"});
  {
    ProgressVariable on("1");
    EXPECT_TRUE(install_terminal_progress());
    ProgressTask task("to the terminal", 1);  // finished well within the delay: nothing drawn
  }
  EXPECT_EQ(rec.labels(), std::vector<std::string>{"still recorded"});
}

}  // namespace
