// The reference backend written from the contract alone (fafo/backend.h): single-threaded
// fp32 loops, one function per op, attention from the StepBatch's definition
// (reference_attention.h). It shares no code with the other backends but the weight
// formats' block decoders (dequantize_row, with their own golden tests) and the KV
// cache's layout (fafo/kv_layout.h, the contract's state).
#pragma once

#include <memory>

#include "fafo/backend.h"

namespace fafo::reference {

std::unique_ptr<Backend> make_oracle_backend();

}  // namespace fafo::reference
