#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/) with ASan + UBSan in BUILD_DIR (default
# build-asan, shared with tools/sanitize.sh) and runs TARGET (or every target) for
# SECONDS each, starting from fuzz/corpus/TARGET (new inputs go to
# BUILD_DIR/fuzz-corpus/TARGET, findings to BUILD_DIR/fuzz-findings/; seed 1, so a run
# is repeatable up to how many inputs the time allows), FUZZ_JOBS (default: the cores)
# targets at a time. Prints each
# target's executions; exits non-zero at the first finding.
# Usage: tools/fuzz.sh [TARGET|all] [SECONDS] [BUILD_DIR]
#   targets: gguf tokenizer template messages step_trace chat corpus_index request
set -euo pipefail
cd "$(dirname "$0")/.."
target="${1:-all}"
seconds="${2:-60}"
build="${3:-build-asan}"
all=(gguf tokenizer template messages step_trace chat corpus_index request)
if [ "$target" = all ]; then targets=("${all[@]}"); else targets=("$target"); fi
for t in "${targets[@]}"; do
  [[ " ${all[*]} " == *" $t "* ]] || { echo "tools/fuzz.sh: unknown target '$t' (${all[*]}, or all)" >&2; exit 2; }
done
command -v clang++ >/dev/null || { echo "tools/fuzz.sh: clang++ not found (run tools/setup.sh)" >&2; exit 1; }
if [ ! -f "$build/CMakeCache.txt" ] || ! grep -q "^FAFO_FUZZ:BOOL=ON" "$build/CMakeCache.txt"; then
  CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" -DFAFO_FUZZ=ON -DFAFO_VULKAN=OFF -DFAFO_CUDA=OFF
fi
cmake --build "$build" --target $(printf 'fuzz_%s ' "${targets[@]}")
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
mkdir -p "$build/fuzz-findings"
# One target: its status file says "ok RUNS" or "found".
fuzz_one() {
  local t=$1 corpus="$build/fuzz-corpus/$1" log="$build/fuzz-findings/$1.log"
  mkdir -p "$corpus"
  if "$build/fuzz/fuzz_$t" "$corpus" "fuzz/corpus/$t" -max_total_time="$seconds" -seed=1 -timeout=30 -rss_limit_mb=4096 \
      -max_len=65536 -print_final_stats=1 -artifact_prefix="$build/fuzz-findings/$t-" > "$log" 2>&1; then
    echo "ok $(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")" > "$log.status"
  else
    echo found > "$log.status"
  fi
}
# FUZZ_JOBS targets at a time (default: the machine's cores), each on one core.
jobs="${FUZZ_JOBS:-$(nproc)}"
for ((i = 0; i < ${#targets[@]}; i += jobs)); do
  batch=("${targets[@]:i:jobs}")
  for t in "${batch[@]}"; do
    echo "tools/fuzz.sh: fuzz_$t for ${seconds} s"
    rm -f "$build/fuzz-findings/$t.log.status"
    fuzz_one "$t" &
  done
  wait
  for t in "${batch[@]}"; do
    log="$build/fuzz-findings/$t.log"
    read -r status runs < "$log.status" || status=found
    if [ "$status" != ok ]; then
      tail -n 60 "$log" >&2
      echo "tools/fuzz.sh: fuzz_$t found a problem; the input is in $build/fuzz-findings/ (log: $log)" >&2
      exit 1
    fi
    echo "tools/fuzz.sh: fuzz_$t: $runs executions, no findings"
  done
done
