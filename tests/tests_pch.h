// The headers precompiled for every test (tests/CMakeLists.txt: fafo_tests_pch): what
// nearly all of them include, and nothing of fafo's own, so that editing fafo rebuilds
// no precompiled header.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
