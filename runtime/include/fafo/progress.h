// Progress of the runtime's long waits (creating Vulkan pipelines, loading a model's
// weights onto its backend, building a corpus index), for an application to show.
//
// Library code describes each wait as a ProgressTask: a label, how much of how much is
// done, then its end. The reports go to the process's progress sink, which only the
// application installs (set_progress_sink): none is installed by default, so the
// library never prints on its own. The command line installs the terminal one at start
// (install_terminal_progress): where stderr is a terminal, a wait that has lasted a
// second gets one line there, redrawn in place as it moves on and left as a summary
// when it ends ("fafo: sorting suffixes: 7.77 M tokens, 1.4 s"); shorter waits and a
// stderr that is not a terminal (a log, a pipe, a test) get nothing. No task reports
// while text is being generated: its line would land inside the streamed text (auto's
// step-cost measurement reports before the prompt's prefill, and `fafo run` echoes
// the prompt only then: GenerationOptions::on_prefill).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace fafo {

// What a task counts.
enum class ProgressUnit : uint8_t {
  Items,   // shown "12/24"
  Bytes,   // shown "12.5/100.0 MB" (decimal megabytes; GB from 10 GB)
  Tokens,  // shown "1.20/9.36 M tokens"
};

// One report of a task. The strings are valid only during the sink's call.
struct ProgressUpdate {
  uint64_t task = 0;        // which task: no other task of the process has this number
  std::string_view label;   // what is waited for: "creating Vulkan pipelines"
  std::string_view detail;  // where it stands besides the counts ("" when nothing): "4.10 M tokens"
  uint64_t done = 0;
  uint64_t total = 0;       // 0: not known
  ProgressUnit unit = ProgressUnit::Items;
  bool finished = false;    // the task's last report
};

// Receives every report of every task, from the threads that make them: several at a
// time where tasks run on several threads, so it must be thread-safe, and quick.
using ProgressSink = std::function<void(const ProgressUpdate&)>;

// Installs the process's sink (an empty one removes it) and returns the one it
// replaces. A task reports to the sink installed when it started, to its end.
ProgressSink set_progress_sink(ProgressSink sink);

// One wait. Reports once when constructed, once per change, and a last time (finished)
// from finish() or the destructor, all to the sink installed at its construction, and
// nothing where none was. Its methods may be called from several threads at once.
class ProgressTask {
 public:
  ProgressTask(std::string label, uint64_t total, ProgressUnit unit = ProgressUnit::Items);
  ~ProgressTask();
  ProgressTask(const ProgressTask&) = delete;
  ProgressTask& operator=(const ProgressTask&) = delete;

  // Whether a sink receives the reports (work that only feeds them can be skipped).
  bool reported() const { return sink_ != nullptr; }
  void advance(uint64_t n = 1);  // done += n
  void set_done(uint64_t done);
  void set_total(uint64_t total);
  void set_detail(std::string detail);
  // Reports again without a change, so that a sink can show the time passing during
  // one long step (the suffix sort).
  void tick();
  uint64_t done() const;
  // The last report; later calls (and the destructor) do nothing.
  void finish();

 private:
  void report(bool finished);  // with mutex_ held

  std::shared_ptr<const ProgressSink> sink_;
  uint64_t id_ = 0;
  std::string label_, detail_;
  uint64_t done_ = 0, total_ = 0;
  ProgressUnit unit_;
  bool finished_ = false;
  mutable std::mutex mutex_;
};

// How the terminal sink draws.
struct TerminalProgressOptions {
  // Where the text goes; empty: stderr (unbuffered).
  std::function<void(std::string_view)> write;
  // Seconds on a monotonic clock; empty: std::chrono::steady_clock.
  std::function<double()> clock;
  // A task is drawn from its first report at least `delay` seconds after its first
  // one, and ends with a summary line if it lasted that long; a shorter one leaves nothing.
  double delay = 1.0;
  // The least time between two redraws of the line (the first draw of a task and its
  // summary are never held back).
  double interval = 0.1;
  // The most characters a line holds (a longer one is cut: a line that wraps cannot be
  // redrawn in place); 0: stderr's terminal width minus one, no limit where stderr is
  // not a terminal.
  size_t width = 0;
  std::string prefix = "fafo: ";
};

// A sink that draws one line, redrawn in place ("\r", then spaces over what a longer
// line left). It shows the task that reported last: one running inside another (the
// weights' pipelines while they load) takes the line until its end, then the other
// gets it back at its next report. It prints whatever it is given: whether to install
// it (a terminal or not) is install_terminal_progress()'s choice.
ProgressSink make_terminal_progress(TerminalProgressOptions options = {});

// The text of a task's line after `elapsed` seconds, without the prefix: "loading
// weights (vulkan): 412.0/668.8 MB (62%), 3.1 s".
std::string progress_line(const ProgressUpdate& update, double elapsed);

// Whether the command line shows progress, from $FAFO_PROGRESS (null: unset) and
// whether stderr is a terminal: "1" always, "0" never, anything else as the terminal.
bool progress_wanted(const char* fafo_progress, bool stderr_is_terminal);

// Installs make_terminal_progress() where progress_wanted($FAFO_PROGRESS,
// isatty(stderr)); returns whether it did. The command line calls it at start.
bool install_terminal_progress();

}  // namespace fafo
