// The warning every command that opens a model gives when -c asks for a context longer
// than the one the model was trained on.
#pragma once

#include "fafo/model.h"

namespace fafo::app {

// Once per process, on stderr: a warning when `model`'s context (-c) is longer than the
// context its file says it was trained on (n_ctx_train), past which its output may
// degrade. Silent otherwise.
void warn_if_past_training_context(const Model& model);

}  // namespace fafo::app
