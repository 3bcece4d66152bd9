// Made-up StepTraces for the studio's tests (test_studio_views.cpp, test_studio_options.cpp,
// test_studio_playback.cpp): a FAFO step with candidates and an accepted candidate token,
// and a plain step of one token.
#pragma once

#include <cstdint>

#include "fafo/decoding.h"

namespace fafo::test {

// Step 3 of a made-up FAFO run: window 2 rows x 3 columns, two candidates and one
// padding, two tokens accepted (a plain one after a candidate token).
inline StepTrace hand_step() {
  StepTrace t;
  t.step = 3;
  t.strategy = Strategy::Fafo;
  t.n_past = 10;
  t.window_before = {{1, 2, 3}, {4, 5, 6}};
  t.window_after = {{4, 5, 6}, {7, 8, 9}};
  t.new_guesses = {7, 8, 9};
  CandidateTrace a;
  a.tokens = {20, 21};
  a.key_length = 2, a.match_length = 1, a.origin_step = 1, a.origin_column = 2;
  CandidateTrace b;
  b.tokens = {30, 31};
  b.key_length = 1, b.match_length = 0, b.origin_step = 2, b.origin_column = 0;
  CandidateTrace pad;
  pad.padding = true;
  pad.match_length = 5;  // never counts
  t.candidates = {b, a, pad};
  t.accepted = {20, 40};
  t.accepted_sources = {{TokenSource::Candidate, 1, 2}, {}};
  t.kv_region = {0, 1, 5, 11};
  t.kv_swaps = 1;
  t.build_ms = 1.0, t.forward_ms = 2.0, t.verify_ms = 0.5;
  return t;
}

inline StepTrace plain_step(int32_t step, int32_t token, int32_t n_past) {
  StepTrace t;
  t.step = step;
  t.n_past = n_past;
  t.accepted = {token};
  t.accepted_sources = {{}};
  t.kv_region = {0, 1, 2};
  t.build_ms = 0.25, t.forward_ms = 4.0, t.verify_ms = 0.125;
  return t;
}

}  // namespace fafo::test
