#include "fafo/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <unordered_map>
#include <utility>

namespace fafo {

namespace {

std::mutex g_sink_mutex;
std::shared_ptr<const ProgressSink> g_sink;  // null: none installed
std::atomic<uint64_t> g_next_task{1};

std::shared_ptr<const ProgressSink> current_sink() {
  std::lock_guard lock(g_sink_mutex);
  return g_sink;
}

// One or two numbers with two decimals ("1.20", "1.20/9.36") or one ("412.0", "412.0/668.8").
std::string numbers(int decimals, double a) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, a);
  return buffer;
}
std::string numbers(int decimals, double a, double b) { return numbers(decimals, a) + "/" + numbers(decimals, b); }

// "12/24 (50%)", "412.0/668.8 MB (61%)", "9.36 M tokens": the counts, "" for an
// item count with nothing known.
std::string amounts(const ProgressUpdate& u) {
  const double done = static_cast<double>(u.done), total = static_cast<double>(u.total);
  std::string s;
  switch (u.unit) {
    case ProgressUnit::Items:
      if (u.total > 0) s = std::to_string(u.done) + "/" + std::to_string(u.total);
      else if (u.done > 0) s = std::to_string(u.done);
      break;
    case ProgressUnit::Bytes: {
      const bool gb = std::max(done, total) >= 10e9;
      const double scale = gb ? 1e9 : 1e6;
      const char* unit = gb ? " GB" : " MB";
      s = u.total > 0 ? numbers(1, done / scale, total / scale) : numbers(1, done / scale);
      s += unit;
      break;
    }
    case ProgressUnit::Tokens:
      s = (u.total > 0 ? numbers(2, done / 1e6, total / 1e6) : numbers(2, done / 1e6)) + " M tokens";
      break;
  }
  if (u.total > 0) s += " (" + std::to_string(std::min<uint64_t>(100, u.done * 100 / u.total)) + "%)";
  return s;
}

// Columns a line may fill on stderr's terminal: its width less one, so that the cursor
// never wraps; no limit where stderr is not a terminal.
size_t terminal_columns() {
  winsize ws{};
  if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1) return ws.ws_col - 1u;
  return std::numeric_limits<size_t>::max();
}

class TerminalProgress {
 public:
  explicit TerminalProgress(TerminalProgressOptions options) : o_(std::move(options)) {
    if (!o_.write)
      o_.write = [](std::string_view text) {
        std::fwrite(text.data(), 1, text.size(), stderr);
        std::fflush(stderr);
      };
    if (!o_.clock)
      o_.clock = [] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
      };
  }

  void update(const ProgressUpdate& u) {
    std::lock_guard lock(mutex_);
    const double now = o_.clock();
    const auto it = tasks_.try_emplace(u.task, Task{now, false}).first;
    const double elapsed = now - it->second.start;
    if (u.finished) {
      tasks_.erase(it);
      if (elapsed >= o_.delay) {
        draw(progress_line(u, elapsed), "\n");
        shown_ = 0;
        last_draw_ = -std::numeric_limits<double>::infinity();  // the next report draws at once
      }
      return;
    }
    if (elapsed < o_.delay) return;
    if (it->second.drawn && now - last_draw_ < o_.interval) return;
    draw(progress_line(u, elapsed), "");
    it->second.drawn = true;
    last_draw_ = now;
  }

 private:
  struct Task {
    double start;  // the clock at its first report
    bool drawn;    // its line has been drawn at least once
  };

  void draw(const std::string& text, const char* end) {
    std::string line = o_.prefix + text;
    const size_t width = o_.width > 0 ? o_.width : terminal_columns();
    if (line.size() > width) line.resize(width);
    std::string out = "\r" + line;
    if (shown_ > line.size()) out.append(shown_ - line.size(), ' ');  // what a longer line left
    out += end;
    o_.write(out);
    shown_ = line.size();
  }

  TerminalProgressOptions o_;
  std::mutex mutex_;
  std::unordered_map<uint64_t, Task> tasks_;  // the unfinished tasks reported here
  size_t shown_ = 0;  // characters of the unfinished line on screen (0: none)
  double last_draw_ = -std::numeric_limits<double>::infinity();
};

}  // namespace

ProgressSink set_progress_sink(ProgressSink sink) {
  auto next = sink ? std::make_shared<const ProgressSink>(std::move(sink)) : nullptr;
  std::lock_guard lock(g_sink_mutex);
  std::shared_ptr<const ProgressSink> before = std::exchange(g_sink, std::move(next));
  return before ? *before : ProgressSink{};
}

ProgressTask::ProgressTask(std::string label, uint64_t total, ProgressUnit unit)
    : sink_(current_sink()), label_(std::move(label)), total_(total), unit_(unit) {
  if (!sink_) return;
  id_ = g_next_task++;
  std::lock_guard lock(mutex_);
  report(false);
}

ProgressTask::~ProgressTask() { finish(); }

void ProgressTask::report(bool finished) {
  if (!sink_ || finished_) return;
  finished_ = finished;
  try {
    (*sink_)(ProgressUpdate{id_, label_, detail_, done_, total_, unit_, finished});
  } catch (...) {
    // Showing progress must never stop the work it reports on.
  }
}

void ProgressTask::advance(uint64_t n) {
  std::lock_guard lock(mutex_);
  done_ += n;
  report(false);
}

void ProgressTask::set_done(uint64_t done) {
  std::lock_guard lock(mutex_);
  done_ = done;
  report(false);
}

void ProgressTask::set_total(uint64_t total) {
  std::lock_guard lock(mutex_);
  total_ = total;
  report(false);
}

void ProgressTask::set_detail(std::string detail) {
  std::lock_guard lock(mutex_);
  detail_ = std::move(detail);
  report(false);
}

void ProgressTask::tick() {
  std::lock_guard lock(mutex_);
  report(false);
}

uint64_t ProgressTask::done() const {
  std::lock_guard lock(mutex_);
  return done_;
}

void ProgressTask::finish() {
  std::lock_guard lock(mutex_);
  report(true);
  finished_ = true;
}

ProgressSink make_terminal_progress(TerminalProgressOptions options) {
  auto terminal = std::make_shared<TerminalProgress>(std::move(options));
  return [terminal](const ProgressUpdate& u) { terminal->update(u); };
}

std::string progress_line(const ProgressUpdate& u, double elapsed) {
  std::string line(u.label);
  line += ": ";
  const std::string counts = amounts(u);
  if (!counts.empty()) line += counts + ", ";
  if (!u.detail.empty()) line += std::string(u.detail) + ", ";
  line += numbers(1, elapsed) + " s";
  return line;
}

bool progress_wanted(const char* fafo_progress, bool stderr_is_terminal) {
  if (fafo_progress && std::strcmp(fafo_progress, "1") == 0) return true;
  if (fafo_progress && std::strcmp(fafo_progress, "0") == 0) return false;
  return stderr_is_terminal;
}

bool install_terminal_progress() {
  if (!progress_wanted(std::getenv("FAFO_PROGRESS"), isatty(STDERR_FILENO) != 0)) return false;
  set_progress_sink(make_terminal_progress());
  return true;
}

}  // namespace fafo
