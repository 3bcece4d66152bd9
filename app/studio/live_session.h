// Live generation off the UI thread: a std::thread runs fafo::generate() and its
// on_step callback pushes each StepTrace into a mutex-protected queue that the UI
// drains every frame. The UI never waits on the generator; pausing makes the
// generator wait before its next step.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fafo/generator.h"
#include "fafo/model.h"
#include "fafo/tokenizer.h"

namespace fafo::studio {

struct LiveOptions {
  std::string prompt = "Once upon a time";
  int32_t max_steps = 0;            // stop after this many steps (0: no limit)
  GenerationOptions generation;     // on_step is set by the session
};

class LiveSession {
 public:
  // Borrows the model and tokenizer; they must outlive the session.
  LiveSession(Model& model, const Tokenizer& tokenizer, LiveOptions options);
  ~LiveSession();  // stops and joins
  LiveSession(const LiveSession&) = delete;
  LiveSession& operator=(const LiveSession&) = delete;

  void start();
  // Moves the traces produced since the last call into `out` (appending). Never blocks long.
  void drain(std::vector<StepTrace>& out);
  void set_paused(bool paused);
  void allow_one_step();  // while paused: lets the generator run exactly one more step
  void stop();            // asks the generator to finish and joins it

  bool finished() const { return finished_.load(); }
  std::string error() const;
  int64_t steps_produced() const { return produced_.load(); }

 private:
  void run();
  void on_step(const StepTrace& t);

  Model& model_;
  const Tokenizer& tokenizer_;
  LiveOptions options_;
  std::thread thread_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<StepTrace> queue_;
  bool paused_ = false;
  int permits_ = 0;
  std::string error_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> finished_{false};
  std::atomic<int64_t> produced_{0};
};

}  // namespace fafo::studio
