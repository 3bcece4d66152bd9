// Device failures a caller can recover from, and the fault-injection hook that tests
// use to cause them.
//
// A DeviceError leaves whatever the caller holds intact (a conversation, the text so
// far): the load or step that met it did not happen. OutOfMemory: the device, or the
// limit --memory-limit set, has no room (a smaller context or model may fit; the same
// model goes on working after a failed step). Lost: the device stopped working (a
// driver reset, a GPU removed); the backend refuses every later call and the model
// must be opened again.
//
// Fault injection (tests only): FAFO_INJECT_FAULT="oom:N" or "lost:N" makes the N-th
// step (N >= 1) of the first backend make_backend() creates in this process fail that
// way, once. The host backends (cpu, reference) and the Vulkan backend count steps from
// the plan; the Vulkan backend raises the fault through the same path as a real
// VK_ERROR_DEVICE_LOST or VK_ERROR_OUT_OF_DEVICE_MEMORY.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

namespace fafo {

class DeviceError : public std::runtime_error {
 public:
  enum class Kind { OutOfMemory, Lost };
  DeviceError(Kind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

// A planned fault: the at_step-th step of a backend fails as `kind`.
struct FaultPlan {
  DeviceError::Kind kind = DeviceError::Kind::OutOfMemory;
  int64_t at_step = 0;
};

// Parses "oom:N" / "lost:N"; throws std::invalid_argument naming the text otherwise.
FaultPlan parse_fault_plan(const std::string& text);
// FAFO_INJECT_FAULT's plan, the first time it is asked in this process (nullopt after,
// and when the variable is unset or empty); a malformed value throws.
std::optional<FaultPlan> take_injected_fault();

// "1.5 GiB", "300 MiB", "12 KiB", "17 bytes".
std::string format_bytes(uint64_t bytes);
// "512M", "2G", "1.5GiB", "4096" (bytes): a size as --memory-limit takes it (K, M, G,
// T are powers of 1024; an optional "iB" or "B"); throws std::invalid_argument.
uint64_t parse_byte_size(const std::string& text);

}  // namespace fafo
