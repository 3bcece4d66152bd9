// What `GET /metrics` reports, in Prometheus' text format: requests by route and
// status, prompt and generated tokens, decoding time and steps (so tokens/s and tau),
// the last request's speed and tau, and the slots, queue, joined steps and loads of the
// weights right now.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace fafo::server {

// What the slot pool and the process hold now, read at each /metrics request.
struct PoolGauges {
  int slots = 0, busy = 0, waiting = 0;
  // The slots' joined steps and the slots' steps run in them (StepJoiner::Stats; 0
  // with one slot).
  int64_t joined_steps = 0, joined_parts = 0;
  int64_t weight_loads = 0;  // ModelWeights::loads_alive()
};

class Metrics {
 public:
  void count_request(const std::string& route, int status);
  // A finished generation: its prompt and generated tokens, steps and decoding seconds.
  void count_generation(int64_t prompt_tokens, int64_t generated, int64_t steps, double decode_seconds);
  // A generation stopped because its client disconnected.
  void count_cancelled();
  // The text of /metrics, with the pool's gauges now.
  std::string render(const PoolGauges& pool) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, int64_t> requests_;
  int64_t prompt_tokens_ = 0, generated_ = 0, steps_ = 0, generations_ = 0, cancelled_ = 0;
  double decode_seconds_ = 0;
  double last_tokens_per_second_ = 0, last_tau_ = 0;
};

}  // namespace fafo::server
