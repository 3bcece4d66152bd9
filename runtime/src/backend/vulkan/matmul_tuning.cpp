#include "backend/vulkan/matmul_tuning.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "fafo/cache_dir.h"

namespace fafo::vulkan {

namespace {

constexpr const char* kFormatTag = "fafo vulkan matmul tuning 1";

const char* kind_word(WeightShaderKey::Kind kind) {
  switch (kind) {
    case WeightShaderKey::Kind::Embed:
      return "embed";
    case WeightShaderKey::Kind::SplitRows:
      return "split-rows";
    case WeightShaderKey::Kind::WholeRows:
      return "whole-rows";
    case WeightShaderKey::Kind::MatrixTiles:
      return "matrix-tiles";
  }
  return "?";
}

// FNV-1a, 64 bits: stable across builds and machines (std::hash is neither).
struct Fnv {
  uint64_t h = 1469598103934665603ull;
  void add(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  }
  void add(std::string_view s) { add(s.data(), s.size()); }
};

std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

std::string TunedShape::text() const {
  std::string s = std::string(tensor_type_name(type)) + " " + std::to_string(rows) + "x" + std::to_string(cols) + " " +
                  kind_word(key.kind) + " t" + std::to_string(key.tile);
  if (key.subgroup) s += " subgroup";
  if (key.gated) s += " gated";
  if (key.norm) s += " norm";
  if (key.int8) s += " int8";
  if (key.dot) s += " dot";
  if (key.matrix) s += " matrix";
  return s;
}

std::optional<TunedShape> TunedShape::parse(std::string_view text) {
  std::istringstream in{std::string(text)};
  std::string type, dims, kind, tile;
  if (!(in >> type >> dims >> kind >> tile)) return std::nullopt;
  TunedShape s;
  const std::optional<TensorType> t = tensor_type_from_name(type);
  if (!t) return std::nullopt;
  s.type = *t;
  unsigned rows = 0, cols = 0;
  char x = 0, extra = 0;
  if (std::sscanf(dims.c_str(), "%u%c%u%c", &rows, &x, &cols, &extra) != 3 || x != 'x') return std::nullopt;
  s.rows = rows;
  s.cols = cols;
  bool found = false;
  for (const auto k : {WeightShaderKey::Kind::Embed, WeightShaderKey::Kind::SplitRows, WeightShaderKey::Kind::WholeRows,
                       WeightShaderKey::Kind::MatrixTiles})
    if (kind == kind_word(k)) {
      s.key.kind = k;
      found = true;
    }
  unsigned tokens = 0;
  if (!found || tile.size() < 2 || tile[0] != 't' || std::sscanf(tile.c_str() + 1, "%u%c", &tokens, &extra) != 1)
    return std::nullopt;
  s.key.tile = tokens;
  for (std::string word; in >> word;) {
    bool* flag = word == "subgroup" ? &s.key.subgroup
                 : word == "gated"  ? &s.key.gated
                 : word == "norm"   ? &s.key.norm
                 : word == "int8"   ? &s.key.int8
                 : word == "dot"    ? &s.key.dot
                 : word == "matrix" ? &s.key.matrix
                                    : nullptr;
    if (!flag || *flag) return std::nullopt;  // unknown or repeated
    *flag = true;
  }
  return s;
}

double CandidateTiming::median() const {
  if (samples.empty()) return 0.0;
  std::vector<double> v = samples;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double CandidateTiming::spread() const {
  if (samples.empty()) return 0.0;
  const auto [lo, hi] = std::minmax_element(samples.begin(), samples.end());
  return *lo > 0 ? *hi / *lo : 0.0;
}

double RowChoice::gain() const {
  double chosen = 0, base = 0;
  for (const CandidateTiming& c : candidates) {
    if (c.rows == rows) chosen = c.median();
    if (c.rows == default_rows) base = c.median();
  }
  return chosen > 0 && base > 0 ? base / chosen : 1.0;
}

RowChoice choose_rows(const std::vector<CandidateTiming>& candidates, uint32_t default_rows, double floor_seconds) {
  RowChoice choice;
  choice.default_rows = default_rows;
  choice.candidates = candidates;
  const CandidateTiming* best = nullptr;
  const CandidateTiming* base = nullptr;
  for (const CandidateTiming& c : candidates) {
    if (c.samples.empty() || c.median() <= floor_seconds) continue;
    if (c.rows == default_rows) base = &c;
    if (!best || c.median() < best->median()) best = &c;
  }
  if (!base)
    throw std::invalid_argument("choose_rows: no usable timing of the default (" + std::to_string(default_rows) +
                                " rows per workgroup)");
  choice.rows = best->median() * kMinGain < base->median() ? best->rows : default_rows;
  return choice;
}

MatmulTuning::MatmulTuning(std::filesystem::path dir, std::string device_key)
    : file_(tuning_file(dir, device_key)), key_(std::move(device_key)) {}

std::string MatmulTuning::load() {
  choices_.clear();
  std::ifstream in(file_);
  if (!in) return "";  // nothing kept yet
  nlohmann::json j;
  try {
    in >> j;
  } catch (const std::exception& e) {
    return file_.string() + " is not JSON (" + e.what() + ")";
  }
  try {
    if (j.at("format").get<std::string>() != kFormatTag) return file_.string() + " is of another format";
    if (j.at("key").get<std::string>() != key_) return file_.string() + " was written for another device or build";
    std::map<TunedShape, RowChoice> read;
    for (const auto& [text, entry] : j.at("shapes").items()) {
      const std::optional<TunedShape> shape = TunedShape::parse(text);
      if (!shape) return file_.string() + ": unknown shape \"" + text + "\"";
      RowChoice c;
      c.rows = entry.at("rows").get<uint32_t>();
      c.default_rows = entry.at("default_rows").get<uint32_t>();
      for (const auto& t : entry.at("candidates")) {
        CandidateTiming ct;
        ct.rows = t.at("rows").get<uint32_t>();
        ct.samples = t.at("seconds").get<std::vector<double>>();
        c.candidates.push_back(std::move(ct));
      }
      if (c.rows == 0 || c.default_rows == 0) return file_.string() + ": a choice of 0 rows";
      read[*shape] = std::move(c);
    }
    choices_ = std::move(read);
  } catch (const nlohmann::json::exception& e) {
    return file_.string() + " is malformed (" + e.what() + ")";
  }
  return "";
}

std::string MatmulTuning::store() const {
  nlohmann::json j;
  j["format"] = kFormatTag;
  j["key"] = key_;
  nlohmann::json shapes = nlohmann::json::object();
  for (const auto& [shape, c] : choices_) {
    nlohmann::json candidates = nlohmann::json::array();
    for (const CandidateTiming& t : c.candidates) candidates.push_back({{"rows", t.rows}, {"seconds", t.samples}});
    shapes[shape.text()] = {{"rows", c.rows}, {"default_rows", c.default_rows}, {"candidates", candidates}};
  }
  j["shapes"] = shapes;
  return write_cache_file(file_, j.dump(1) + "\n");
}

std::optional<uint32_t> MatmulTuning::rows_for(const TunedShape& shape) const {
  const auto it = choices_.find(shape);
  if (it == choices_.end()) return std::nullopt;
  return it->second.rows;
}

std::string tuning_device_key(const std::string& device_name, uint32_t vendor_id, uint32_t device_id,
                              uint32_t driver_version) {
  static const uint64_t shaders = [] {  // ~25 MB of SPIR-V: hashed once
    Fnv f;
    for (const WeightShader& v : weight_shaders()) {
      f.add(v.shader->name);
      f.add(v.shader->words, v.shader->word_count * sizeof(uint32_t));
    }
    return f.h;
  }();
  char ids[64];
  std::snprintf(ids, sizeof ids, "%04x:%04x driver %u", vendor_id, device_id, driver_version);
  return device_name + " (" + ids + ") shaders " + hex(shaders);
}

std::filesystem::path tuning_file(const std::filesystem::path& dir, const std::string& device_key) {
  Fnv f;
  f.add(device_key);
  return dir / ("vulkan-tuning-" + hex(f.h) + ".json");
}

}  // namespace fafo::vulkan
