// Compiled with the model area's include root (ctest Runtime.ModelIncludesWhatItMaySee): util/
// is in it, so this compiles (the control of Runtime.ModelCannotIncludeTheCpuBackendsHeaders).
#include "util/fp32_loops.h"
