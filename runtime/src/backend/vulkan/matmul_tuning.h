// The weight kernels' tuned rows per workgroup, per device: which shapes have a choice,
// how a choice is made from timings, and the file in the cache folder that keeps them.
//
// A product's shape (TunedShape: format, rows, columns, the variant's mapping, token
// tile and form) runs with the variant's default rows per workgroup (the shader's
// ROW_GROUPS) until a choice exists. The candidates (WeightKernels::row_candidates) give
// the same bits, so a choice changes only the speed. backend/vulkan/matmul_tuner.h
// measures them; choose_rows() picks one from the medians: a candidate whose samples
// spread too much is measured again, one faster than any device could be is dropped,
// and the default stays unless another is faster by more than kMinGain.
//
// The file: $FAFO_CACHE_DIR (else $XDG_CACHE_HOME/fafo, else ~/.cache/fafo)/
// vulkan-tuning-<hash of the key>.json, the key naming the device (name, vendor and
// device ids, driver version) and this build's weight shaders, so another driver or a
// new build measures again. It holds the key and, per shape, the choice, the default and
// every candidate's samples. A file for another key, or one that cannot be read or
// parsed, is ignored (the shapes are measured again and the file rewritten); one that
// cannot be written is reported, never fatal.
#pragma once

#include <compare>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "backend/vulkan/weight_shader_table.h"
#include "fafo/tensor_type.h"

namespace fafo::vulkan {

// One product shape with a tuned rows-per-workgroup choice.
struct TunedShape {
  TensorType type = TensorType::F32;
  uint32_t rows = 0, cols = 0;  // of the weight (gated: rows of each of gate and up)
  WeightShaderKey key;          // the variant (mapping, tile, form) it runs with
  auto operator<=>(const TunedShape& o) const {
    return std::tie(type, rows, cols, key.kind, key.tile, key.subgroup, key.gated, key.norm, key.int8, key.dot,
                    key.matrix) <=> std::tie(o.type, o.rows, o.cols, o.key.kind, o.key.tile, o.key.subgroup,
                                             o.key.gated, o.key.norm, o.key.int8, o.key.dot, o.key.matrix);
  }
  bool operator==(const TunedShape& o) const { return (*this <=> o) == 0; }
  // e.g. "Q4_K 4096x14336 split-rows t1 subgroup int8 dot"; parse() reads it back.
  std::string text() const;
  static std::optional<TunedShape> parse(std::string_view text);
};

// One candidate's timing: seconds per dispatch, one sample per batch of dispatches.
struct CandidateTiming {
  uint32_t rows = 0;
  std::vector<double> samples;
  double median() const;
  double spread() const;  // largest / smallest sample (1 = all equal)
};

// The choice for one shape, with the timings it came from.
struct RowChoice {
  uint32_t rows = 0;          // the rows per workgroup chosen
  uint32_t default_rows = 0;  // the variant's
  std::vector<CandidateTiming> candidates;
  double gain() const;        // the default's median / the chosen one's (1 when either is missing)
};

// A sample set spreads too much to trust when its largest sample is more than this times
// its smallest; the tuner then measures the candidate again (matmul_tuner.h).
inline constexpr double kMaxSpread = 1.3;
// Another candidate replaces the default only when it is at least this much faster.
inline constexpr double kMinGain = 1.03;

// The choice among `candidates` (each with samples; those without any are ignored):
// the smallest median, unless it is not kMinGain faster than the default's. A median
// below `floor_seconds` (what reading the weights would take at a bandwidth no device
// has) is not a measurement: that candidate is ignored. Throws std::invalid_argument
// when no candidate, or not the default, has a usable timing.
RowChoice choose_rows(const std::vector<CandidateTiming>& candidates, uint32_t default_rows, double floor_seconds);

// The choices kept for one device and build.
class MatmulTuning {
 public:
  MatmulTuning() = default;
  // Choices for `device_key` (tuning_device_key) kept in `dir`; none until load().
  MatmulTuning(std::filesystem::path dir, std::string device_key);

  const std::string& device_key() const { return key_; }
  const std::filesystem::path& file() const { return file_; }

  // Reads the file: returns "" (choices loaded, or no file yet) or why it was ignored.
  std::string load();
  // Writes every choice (a temporary file renamed into place). Returns "" or why not.
  std::string store() const;

  const std::map<TunedShape, RowChoice>& choices() const { return choices_; }
  void set(const TunedShape& shape, RowChoice choice) { choices_[shape] = std::move(choice); }
  std::optional<uint32_t> rows_for(const TunedShape& shape) const;
  void clear() { choices_.clear(); }

 private:
  std::filesystem::path file_;
  std::string key_;
  std::map<TunedShape, RowChoice> choices_;
};

// The key of a device's tuning: its name, vendor and device ids, driver version and a
// hash of this build's weight shaders (their names and SPIR-V).
std::string tuning_device_key(const std::string& device_name, uint32_t vendor_id, uint32_t device_id,
                              uint32_t driver_version);
// The file MatmulTuning keeps a key's choices in, under `dir`.
std::filesystem::path tuning_file(const std::filesystem::path& dir, const std::string& device_key);

}  // namespace fafo::vulkan
