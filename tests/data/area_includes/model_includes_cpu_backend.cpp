// Compiled with the model area's include root (ctest Runtime.ModelCannotIncludeTheCpuBackendsHeaders):
// backend/host/ is not in it, so this must not compile.
#include "backend/host/scalar_kernels.h"
