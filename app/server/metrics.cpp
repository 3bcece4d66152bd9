#include "metrics.h"

#include <cstdio>

namespace fafo::server {

void Metrics::count_request(const std::string& route, int status) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++requests_[{route, status}];
}

void Metrics::count_generation(int64_t prompt_tokens, int64_t generated, int64_t steps, double decode_seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  prompt_tokens_ += prompt_tokens;
  generated_ += generated;
  steps_ += steps;
  ++generations_;
  decode_seconds_ += decode_seconds;
  // Decoding speed: tokens after the first (the prefill's) per decoding second.
  last_tokens_per_second_ = decode_seconds > 0 && generated > 1 ? static_cast<double>(generated - 1) / decode_seconds : 0;
  last_tau_ = steps > 0 ? static_cast<double>(generated) / static_cast<double>(steps) : 0;
}

void Metrics::count_cancelled() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++cancelled_;
}

std::string Metrics::render(const PoolGauges& pool) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out;
  char line[512];
  auto metric = [&](const char* name, const char* type, const char* help) {
    std::snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
    out += line;
  };
  auto value = [&](const char* name, double v) {
    std::snprintf(line, sizeof line, "%s %.17g\n", name, v);
    out += line;
  };
  metric("fafo_requests_total", "counter", "HTTP requests answered, by route and status.");
  for (const auto& [key, n] : requests_) {
    std::snprintf(line, sizeof line, "fafo_requests_total{route=\"%s\",status=\"%d\"} %lld\n", key.first.c_str(),
                  key.second, static_cast<long long>(n));
    out += line;
  }
  metric("fafo_generations_total", "counter", "Generations finished.");
  value("fafo_generations_total", static_cast<double>(generations_));
  metric("fafo_cancelled_total", "counter", "Generations stopped because their client disconnected.");
  value("fafo_cancelled_total", static_cast<double>(cancelled_));
  metric("fafo_prompt_tokens_total", "counter", "Prompt tokens of the generations (cached ones included).");
  value("fafo_prompt_tokens_total", static_cast<double>(prompt_tokens_));
  metric("fafo_generated_tokens_total", "counter", "Tokens generated.");
  value("fafo_generated_tokens_total", static_cast<double>(generated_));
  metric("fafo_steps_total", "counter", "Forward passes that produced tokens (tau = generated / steps).");
  value("fafo_steps_total", static_cast<double>(steps_));
  metric("fafo_decode_seconds_total", "counter", "Seconds spent decoding, after each prompt's prefill.");
  value("fafo_decode_seconds_total", decode_seconds_);
  metric("fafo_tokens_per_second", "gauge", "Decoding speed of the last generation.");
  value("fafo_tokens_per_second", last_tokens_per_second_);
  metric("fafo_tau", "gauge", "Tokens per step of the last generation.");
  value("fafo_tau", last_tau_);
  metric("fafo_slots", "gauge", "Slots (--parallel).");
  value("fafo_slots", pool.slots);
  metric("fafo_slots_busy", "gauge", "Slots generating now.");
  value("fafo_slots_busy", pool.busy);
  metric("fafo_queue_depth", "gauge", "Requests waiting for a slot.");
  value("fafo_queue_depth", pool.waiting);
  metric("fafo_joined_steps_total", "counter", "Forward passes run for the slots (each joins the steps slots asked for together).");
  value("fafo_joined_steps_total", static_cast<double>(pool.joined_steps));
  metric("fafo_joined_step_parts_total", "counter", "Slots' steps run in those passes (/ fafo_joined_steps_total: slots per pass).");
  value("fafo_joined_step_parts_total", static_cast<double>(pool.joined_parts));
  metric("fafo_weight_loads", "gauge",
         "Loads of model weights alive in the process (the model's, and a draft model's; more for a while after a lost device).");
  value("fafo_weight_loads", static_cast<double>(pool.weight_loads));
  return out;
}

}  // namespace fafo::server
