#include "training_context.h"

#include <atomic>
#include <cstdio>

namespace fafo::app {

void warn_if_past_training_context(const Model& model) {
  static std::atomic<bool> warned{false};
  const int32_t trained = model.config().n_ctx_train;
  if (model.n_ctx() <= trained || warned.exchange(true)) return;
  std::fprintf(stderr,
               "fafo: warning: the context (-c %d) is longer than the %d tokens this model was trained on (n_ctx_train); "
               "its output may degrade past that\n",
               model.n_ctx(), trained);
}

}  // namespace fafo::app
