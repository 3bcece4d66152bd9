// The `reference` backend as the registry and make_reference_backend() give it: the
// oracle of backend/reference/ (its own library, fafo_reference, which shares no code
// with the other backends) on the host CPU's one device.
#include <memory>
#include <vector>

#include "backend/reference/oracle_backend.h"
#include "fafo/backend.h"
#include "fafo/backend_registry.h"

namespace fafo {

// Single-threaded whatever n_threads says: the oracle's loops are plain and in order.
std::unique_ptr<Backend> make_reference_backend(int n_threads) {
  (void)n_threads;
  return reference::make_oracle_backend();
}

// Registered in backend_registry.cpp (FAFO_BACKEND(reference)).
BackendInfo reference_backend_info() {
  BackendInfo info;
  info.name = "reference";
  info.display_name = "Reference";
  info.summary = "the fp32 reference backend (single-threaded scalar loops written from the contract alone; the oracle "
                 "of the op-conformance table)";
  info.auto_rank = -1;  // never chosen by auto
  info.devices = [] { return std::vector<BackendDevice>{host_cpu_device()}; };
  info.create = [](const BackendSpec& spec) {
    check_host_device("reference", spec.device);
    return make_reference_backend(spec.threads);
  };
  return info;
}

}  // namespace fafo
