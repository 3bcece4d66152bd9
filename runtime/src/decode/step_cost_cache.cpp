// The on-disk cache of step-cost curves (fafo/step_cost_cache.h).
#include "fafo/step_cost_cache.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <system_error>

#include "fafo/backend.h"

#ifndef FAFO_VERSION
#error "FAFO_VERSION must be defined by the build"
#endif

namespace fafo {
namespace {

constexpr const char* kMagic = "fafo step costs 2";

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

}  // namespace

StepCostCache::StepCostCache(std::filesystem::path dir, std::string key) : key_(one_line(std::move(key))) {
  char name[64];
  std::snprintf(name, sizeof name, "step-costs-%016llx.txt", static_cast<unsigned long long>(fnv1a(key_)));
  file_ = std::move(dir) / name;
}

StepCostCache StepCostCache::for_model(const std::filesystem::path& dir, const std::filesystem::path& model_file,
                                       const Backend& backend, KvCacheType kv_type) {
  const std::filesystem::path path = std::filesystem::canonical(model_file);
  const auto size = std::filesystem::file_size(path);
  const auto mtime = std::filesystem::last_write_time(path).time_since_epoch().count();
  std::ostringstream key;
  key << "fafo " << FAFO_VERSION << " | " << path.string() << " | " << size << " bytes | mtime " << mtime << " | "
      << backend.name() << ": " << backend.description() << " | kv " << kv_cache_type_name(kv_type);
  return StepCostCache(dir, key.str());
}

std::optional<StepCosts> StepCostCache::load(std::string* why) const {
  std::ifstream in(file_);
  if (!in) return std::nullopt;
  std::string magic, key_line;
  if (!std::getline(in, magic) || magic != kMagic) return std::nullopt;
  if (!std::getline(in, key_line) || key_line != "key " + key_) return std::nullopt;
  StepCosts costs;
  // How many points make_plausible moved, then one point per line: exactly a size, a
  // time and a spread (a partial or malformed line: no curve).
  std::string bounded_line;
  if (!std::getline(in, bounded_line) || bounded_line.rfind("bounded ", 0) != 0) return std::nullopt;
  {
    std::istringstream fields(bounded_line.substr(8));
    std::string rest;
    if (!(fields >> costs.bounded) || (fields >> rest) || costs.bounded < 0) return std::nullopt;
  }
  std::string context_line;
  if (!std::getline(in, context_line) || context_line.rfind("context ", 0) != 0) return std::nullopt;
  {
    std::istringstream fields(context_line.substr(8));
    std::string rest;
    if (!(fields >> costs.context) || (fields >> rest) || costs.context < 0) return std::nullopt;
  }
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    int32_t T = 0;
    double seconds = 0, spread = 0;
    std::string rest;
    if (!(fields >> T >> seconds >> spread) || (fields >> rest) || costs.sizes.size() >= 64) return std::nullopt;
    costs.sizes.push_back(T);
    costs.seconds.push_back(seconds);
    costs.spread.push_back(spread);
  }
  if (!costs.invalid_reason().empty() || static_cast<size_t>(costs.bounded) > costs.sizes.size()) return std::nullopt;
  // A curve no device could have (say, one timed while the machine was busy by an older
  // version) is not trusted either.
  if (const std::string implausible = costs.implausible_reason(); !implausible.empty()) {
    if (why) *why = "the kept curve was implausible (" + implausible + ")";
    return std::nullopt;
  }
  costs.source = file_.string();
  return costs;
}

std::string StepCostCache::store(const StepCosts& costs) const {
  if (const std::string why = costs.invalid_reason(); !why.empty()) return "not a curve: " + why;
  std::ostringstream out;
  out << kMagic << "\nkey " << key_ << "\nbounded " << costs.bounded << "\ncontext " << costs.context << "\n";
  char line[96];
  for (size_t i = 0; i < costs.sizes.size(); ++i) {
    std::snprintf(line, sizeof line, "%d %.9g %.4g\n", costs.sizes[i], costs.seconds[i], costs.spread.empty() ? 0.0 : costs.spread[i]);
    out << line;
  }
  return write_cache_file(file_, out.str());
}

}  // namespace fafo
