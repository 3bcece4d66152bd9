// Observes the decoding loop (generator.cpp) and assembles each step's StepTrace for
// the step callback (GenerationOptions::on_step). The loop notifies it at fixed points
// of a step; it times the phases between them and reads what it reports from the
// step's layout and verdict, the strategy's state and the model.
//
// Without a step callback every notification returns at once: no copies, no clock
// reads, so generation without a trace does no trace work.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "decode/step_layout.h"
#include "decode/strategy_state.h"
#include "decode/verifier.h"
#include "fafo/decoding.h"
#include "fafo/sequence.h"

namespace fafo {

class TraceRecorder {
 public:
  // Reports to `on_step` (empty: records nothing). The references must outlive the recorder.
  TraceRecorder(const StepCallback& on_step, const DecodingOptions& decoding, const Sequence& model,
                const StrategyState& state);

  // Step 0: the prefill of `prompt_size` tokens, which took `ms`, produced `first`.
  void prefill_done(int32_t prompt_size, int32_t first, double ms);

  // A decoding step begins with `state` (auto: the chosen candidate's; its options give
  // the step's strategy) and, with auto, the choice explained: the context and the
  // window as they are before it.
  void step_started(int32_t step, const StrategyState& state, const std::string& auto_choice = {});
  // The step is laid out (the build phase ends). `full`: with the strategy's chains and
  // window; false: only the input token, as the context or the device left no room.
  void step_built(const StepLayout& layout, bool full);
  // The forward pass is done (the forward phase ends).
  void forward_done();
  // The step is verified, its emitted tokens kept and committed, and the strategy's
  // state updated (the verify phase ends): completes the trace and reports it.
  void step_finished(const Verdict& verdict, const std::vector<int32_t>& emitted);

 private:
  using Clock = std::chrono::steady_clock;
  // Milliseconds since the previous mark; marks now.
  double lap_ms();
  void add_candidates(const StepLayout& layout);
  void add_verdict(const Verdict& verdict, const std::vector<int32_t>& emitted);
  void add_state_after();

  const StepCallback& on_step_;
  const DecodingOptions& decoding_;
  const Sequence& model_;
  const StrategyState* state_;
  StepTrace trace_;
  Clock::time_point mark_;
  int64_t swaps_before_ = 0;  // the model's KV swaps when the verify phase began
  bool full_step_ = true;
};

}  // namespace fafo
