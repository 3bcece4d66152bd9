// The cpu backend with a deliberately wrong attention (host::AttentionMutation), for the
// tests that show the op-conformance table catches one; make_cpu_backend (fafo/backend.h)
// is the backend users get.
#pragma once

#include <memory>

#include "backend/host/host_backend.h"
#include "fafo/backend.h"

namespace fafo::cpu {

std::unique_ptr<Backend> make_cpu_backend(int n_threads, host::AttentionMutation mutation, bool repack = true);

}  // namespace fafo::cpu
