// The chat-template tests' rendering context (test_chat_template.cpp, test_jinja.cpp): the
// golden data's fixed clock with BOS and EOS tokens, and EXPECT_CONTAINS.
#pragma once

#include <gtest/gtest.h>

#include <ctime>
#include <string>

#include "fafo/chat_template.h"

namespace fafo::test {

// The golden data's fixed clock: strftime_now() renders 2026-11-22.
inline std::tm golden_day() {
  std::tm tm{};
  tm.tm_year = 2026 - 1900;
  tm.tm_mon = 10;
  tm.tm_mday = 22;
  tm.tm_hour = 12;
  tm.tm_wday = 0;  // a Sunday
  tm.tm_yday = 325;
  return tm;
}

inline ChatTemplateContext context(const std::string& bos = "<s>", const std::string& eos = "</s>") {
  ChatTemplateContext ctx;
  ctx.bos_token = bos;
  ctx.eos_token = eos;
  ctx.now = golden_day();
  return ctx;
}

}  // namespace fafo::test

#define EXPECT_CONTAINS(s, part) EXPECT_NE(std::string(s).find(part), std::string::npos) << "in: " << (s)
