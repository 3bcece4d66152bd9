// What a device measured of the launches since the last take (profiling: fafo bench
// --profile, BackendProfiler::start_profile): each launch's kernel name, device seconds and the
// weight bytes the backend said it reads (0 where not counted), and the span from the
// first launch's start to the last one's end (the step's device time, gaps included).
#pragma once

#include <vector>

namespace fafo::cuda {

struct LaunchTimes {
  struct Launch {
    const char* name;
    double seconds;
    double bytes;
  };
  std::vector<Launch> launches;
  double span_seconds = 0;
};

}  // namespace fafo::cuda
