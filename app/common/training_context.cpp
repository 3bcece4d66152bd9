#include "training_context.h"

#include <atomic>
#include <cstdio>

namespace fafo::app {

void warn_if_past_training_context(const Sequence& model) {
  static std::atomic<bool> warned{false};
  const ModelConfig& config = model.config();
  if (!config.n_ctx_train_in_file || model.n_ctx() <= config.n_ctx_train || warned.exchange(true)) return;
  std::fprintf(stderr,
               "fafo: warning: the context (-c %d) is longer than the %d tokens this model was trained on (n_ctx_train); "
               "its output may degrade past that\n",
               model.n_ctx(), config.n_ctx_train);
}

bool larger_context_may_help(const Sequence& model) {
  const ModelConfig& config = model.config();
  return !config.n_ctx_train_in_file || model.n_ctx() < config.n_ctx_train;
}

}  // namespace fafo::app
