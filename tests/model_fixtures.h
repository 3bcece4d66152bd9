// Loading models for tests, through fafo::open_model like the apps: the shared
// stories260K model and synthetic ones, on the CPU backend unless a test names another
// (the reference, for the golden and exactness tests that must hold on the oracle too).
#pragma once

#include <exception>
#include <memory>
#include <string>

#include "fafo/open_model.h"
#include "synthetic_model.h"

namespace fafo::test {

using TestModel = OpenedModel;

// What open_model throws for `options`, in words ("" when the model opens).
inline std::string open_model_error(const OpenOptions& options) {
  try {
    open_model(options);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

inline TestModel load_test_model(const std::string& path, int32_t n_ctx = 0, int threads = 2,
                                 const std::string& backend = "cpu") {
  OpenOptions options;
  options.path = path;
  options.backend = BackendSpec{backend, "", threads};
  options.n_ctx = n_ctx;
  return open_model(options);
}

// load_test_model(path, 256, 2, backend), or nullptr where `backend` is vulkan and the
// machine has no Vulkan device (the caller skips); other failures throw.
inline std::unique_ptr<TestModel> load_on(const std::string& path, const std::string& backend) {
  try {
    return std::make_unique<TestModel>(load_test_model(path, 256, 2, backend));
  } catch (const std::exception&) {
    if (backend == "vulkan") return nullptr;
    throw;
  }
}

}  // namespace fafo::test
