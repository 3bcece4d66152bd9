// Where --strategy auto keeps the step-cost curves t(T) it measured, so that a model
// opened again on the same device and backend starts without measuring.
//
// One small text file per curve, named by a hash of its key: the model file (canonical
// path, size, modification time), the backend and its device description (which names
// the device and the threads), the KV cache type and fafo's version; how many points
// were bounded (StepCosts::bounded), the context they were timed after; one line per
// point: its size, median time and spread. The folder is
// $FAFO_CACHE_DIR, else $XDG_CACHE_HOME/fafo, else ~/.cache/fafo. A file that cannot be
// read, was written for another key or holds a malformed or implausible curve is ignored (the curve is
// measured again and the file rewritten); one that cannot be written is reported, never
// fatal. Deleting the folder makes every curve be measured again.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "fafo/auto_strategy.h"
#include "fafo/cache_dir.h"
#include "fafo/kv_cache.h"

namespace fafo {

class Backend;

class StepCostCache {
 public:
  StepCostCache(std::filesystem::path dir, std::string key);
  // The cache entry for `model_file` on `backend` with `kv_type` in `dir`. Throws
  // std::filesystem::filesystem_error when the model file cannot be examined.
  static StepCostCache for_model(const std::filesystem::path& dir, const std::filesystem::path& model_file,
                                 const Backend& backend, KvCacheType kv_type);

  const std::string& key() const { return key_; }
  const std::filesystem::path& file() const { return file_; }

  // The curve kept for this key (its `source` names the file), or nothing. A curve the
  // file holds but that no device could have (StepCosts::implausible_reason) is not
  // returned either, and `why` (when given) then says why.
  std::optional<StepCosts> load(std::string* why = nullptr) const;
  // Writes the curve (a temporary file renamed into place, so readers never see half of
  // one). Returns "" or why it could not be written.
  std::string store(const StepCosts& costs) const;

 private:
  std::string key_;
  std::filesystem::path file_;
};

}  // namespace fafo
