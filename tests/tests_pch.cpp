// The object its precompiled header is made with (tests/CMakeLists.txt: fafo_tests_pch).
#include "tests_pch.h"
