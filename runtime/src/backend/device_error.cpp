#include "fafo/device_error.h"

#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace fafo {

namespace {

int64_t parse_step(const std::string& digits, const std::string& text) {
  if (digits.empty() || digits.size() > 12 ||
      digits.find_first_not_of("0123456789") != std::string::npos)
    throw std::invalid_argument("FAFO_INJECT_FAULT: '" + text + "' is not oom:N or lost:N with a step N >= 1");
  const int64_t n = std::stoll(digits);
  if (n < 1) throw std::invalid_argument("FAFO_INJECT_FAULT: '" + text + "': the step N must be at least 1");
  return n;
}

}  // namespace

FaultPlan parse_fault_plan(const std::string& text) {
  const size_t colon = text.find(':');
  const std::string kind = text.substr(0, colon);
  const std::string step = colon == std::string::npos ? "" : text.substr(colon + 1);
  FaultPlan plan;
  if (kind == "oom") {
    plan.kind = DeviceError::Kind::OutOfMemory;
  } else if (kind == "lost") {
    plan.kind = DeviceError::Kind::Lost;
  } else {
    throw std::invalid_argument("FAFO_INJECT_FAULT: '" + text + "' is not oom:N or lost:N");
  }
  plan.at_step = parse_step(step, text);
  return plan;
}

std::optional<FaultPlan> take_injected_fault() {
  static std::atomic<bool> taken{false};
  const char* value = std::getenv("FAFO_INJECT_FAULT");
  if (!value || !*value) return std::nullopt;
  if (taken.exchange(true)) return std::nullopt;
  return parse_fault_plan(value);
}

std::string format_bytes(uint64_t bytes) {
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return std::to_string(bytes) + (bytes == 1 ? " byte" : " bytes");
  double value = static_cast<double>(bytes);
  int unit = -1;
  while (value >= 1024.0 && unit < 3) {
    value /= 1024.0;
    ++unit;
  }
  char out[32];
  std::snprintf(out, sizeof(out), value < 10.0 ? "%.2f %s" : value < 100.0 ? "%.1f %s" : "%.0f %s", value, kUnits[unit]);
  return out;
}

uint64_t parse_byte_size(const std::string& text) {
  auto bad = [&]() -> std::invalid_argument {
    return std::invalid_argument("'" + text + "' is not a size (bytes, or a number with K, M, G or T: 512M, 1.5G)");
  };
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  const std::string number = text.substr(0, i);
  if (number.empty() || number.find_first_of("0123456789") == std::string::npos ||
      number.find('.') != number.rfind('.'))
    throw bad();
  std::string unit = text.substr(i);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double scale = 1.0;
  if (!unit.empty() && unit != "B") {
    const size_t p = std::string("KMGT").find(unit[0]);
    const std::string rest = unit.substr(1);
    if (p == std::string::npos || !(rest.empty() || rest == "B" || rest == "IB")) throw bad();
    scale = std::pow(1024.0, static_cast<double>(p + 1));
  }
  const double bytes = std::strtod(number.c_str(), nullptr) * scale;
  if (!std::isfinite(bytes) || bytes < 1.0 || bytes >= 1.8e19) throw bad();
  return static_cast<uint64_t>(bytes);
}

}  // namespace fafo
