#!/usr/bin/env bash
# ctest Model.KnowsNoDecodingStrategy: nothing in runtime/src/model/ (the weights, the
# forward pass, sequences, KV policies) includes, directly or through another header, a
# header of decoding (runtime/src/decode/, the strategies, auto, the generator) or
# open_model, which sits above both.
#   tests/model_layering_test.sh CXX SOURCE_DIR
set -uo pipefail
cxx=$1
src=$2
decoding='fafo/(decoding|auto_strategy|auto_state|step_cost_cache|generator|candidate_pool|corpus_index|open_model|chat_session)\.h|/src/decode/'
fails=0
for f in "$src"/runtime/src/model/*.cpp; do
  deps=$("$cxx" -std=c++20 -MM -I"$src/runtime/include" -I"$src/runtime/src" "$f" 2>&1) || {
    echo "FAIL: $f: the compiler could not list its headers: $deps"
    fails=$((fails + 1))
    continue
  }
  bad=$(echo "$deps" | tr ' ' '\n' | grep -E "$decoding" || true)
  if [ -n "$bad" ]; then
    echo "FAIL: $(basename "$f") includes decoding: $bad"
    fails=$((fails + 1))
  fi
done
[ $fails -eq 0 ] && echo "model/ includes nothing of decoding"
[ $fails -eq 0 ]
