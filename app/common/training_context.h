// What the commands say about the context a model was trained on (n_ctx_train, from the
// file's ARCH.context_length): the warning when -c asks for more, and whether advising a
// larger -c makes sense. A file without that key says nothing about its training, and
// neither do they.
#pragma once

#include "fafo/sequence.h"

namespace fafo::app {

// Once per process, on stderr: a warning when `model`'s context (-c) is longer than the
// context its file says it was trained on (n_ctx_train), past which its output may
// degrade. Silent otherwise, and when the file does not say (no context_length key).
void warn_if_past_training_context(const Sequence& model);

// Whether a larger -c is worth advising for `model`: its file does not say how long a
// context it was trained on, or its context is shorter than that one.
bool larger_context_may_help(const Sequence& model);

}  // namespace fafo::app
