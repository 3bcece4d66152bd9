#!/bin/bash
# One command for a machine with an NVIDIA GPU: builds fafo with CUDA and Vulkan, runs the
# op-conformance table on every backend and device, the greedy-ids and lossless tests,
# and `fafo bench --devices all` on stories260K and on Llama-3-8B-shaped Q4_K_M and F16
# files written by fafo-synth; prints one report and writes it as Markdown.
#
#   tools/gpu-check.sh [REPORT.md]        (default: gpu-check/report.md)
#
# Environment: BUILD_DIR (default build-gpu), JOBS (default: every core), SHARED (the
# shared data folder, default ../shared), SKIP_8B=1 to leave out the 8B-shaped files
# (they take 16 GB of disk and most of the run). What is missing (no GPU, no Vulkan
# loader, no CUDA toolkit) is said in the report, and the rest still runs.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
report=${1:-$here/gpu-check/report.md}
build=${BUILD_DIR:-$here/build-gpu}
jobs=${JOBS:-$(nproc)}
shared=${SHARED:-$here/../shared}
work=$(dirname "$report")
mkdir -p "$work"
log="$work/gpu-check.log"
: > "$log"
lines=()
say() { echo "$*"; lines+=("$*"); }
step() { echo "== $*" | tee -a "$log"; }
started=$(date +%s)

say "# fafo GPU check"
say ""
say "- date: $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?')"
if command -v nvidia-smi > /dev/null; then
  say "- GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)"
else
  say "- GPU: **none found** (no nvidia-smi): the CUDA rows below will be empty"
fi
nvcc=""
for c in "${CUDA_HOME:-}/bin/nvcc" /usr/local/cuda/bin/nvcc; do [ -x "$c" ] && nvcc=$c && break; done
say "- CUDA toolkit: ${nvcc:-**none found** (the CUDA backend is not built)}"
if ldconfig -p 2>/dev/null | grep -q libvulkan.so.1 || [ -n "${LD_LIBRARY_PATH:-}" ]; then
  say "- Vulkan loader: found"
else
  say "- Vulkan loader: **not found** (the Vulkan backend is not built or finds no device)"
fi

step "configure and build ($jobs jobs)"
cuda_flag=-DFAFO_CUDA=AUTO
[ -n "$nvcc" ] && cuda_flag="-DFAFO_CUDA=ON -DCMAKE_CUDA_COMPILER=$nvcc"
if ! cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release $cuda_flag >> "$log" 2>&1 ||
   ! cmake --build "$build" -j "$jobs" >> "$log" 2>&1; then
  say ""
  say "**The build failed**; the end of its log:"
  say '```'
  while IFS= read -r l; do say "$l"; done < <(tail -30 "$log")
  say '```'
  printf '%s\n' "${lines[@]}" > "$report"
  exit 1
fi
fafo=$build/app/cli/fafo
say ""
say "## Devices"
say '```'
while IFS= read -r l; do say "$l"; done < <("$fafo" devices 2>&1 | grep -E "^backend|^device|no .* devices|picks|compute capability|memory bandwidth")
say '```'

step "op-conformance table and lossless tests"
say ""
say "## Op conformance (every backend and device against the reference)"
say '```'
(cd "$build" && ctest -L backend-ops -j "$jobs" --output-on-failure) > "$work/conformance.log" 2>&1
conformance=$?
cat "$work/conformance.log" >> "$log"
# Each backend's largest error per case, printed by the table itself.
"$build/tests/test_backend_ops" 2>&1 | grep -E "max error" | grep -vE "^  (cpu|reference)_" > "$work/errors.log"
while IFS= read -r l; do say "$l"; done < <(grep -E "tests passed|tests failed|\(Failed\)" "$work/conformance.log")
say "largest errors against the reference (vulkan, cuda): $work/errors.log"
while IFS= read -r l; do say "$l"; done < <(grep -E "matmul  |attention" "$work/errors.log" | head -40)
say '```'
say ""
say "## Greedy ids and lossless decoding"
say '```'
(cd "$build" && ctest -j "$jobs" -R "Golden|EveryStrategy|GreedyIds|CudaEmulated|Lossless" --output-on-failure) > "$work/lossless.log" 2>&1
lossless=$?
cat "$work/lossless.log" >> "$log"
while IFS= read -r l; do say "$l"; done < <(grep -E "tests passed|tests failed|\(Failed\)" "$work/lossless.log")
say '```'

bench() {  # file, label
  step "bench $2"
  say ""
  say "## Bench: $2"
  "$fafo" bench -m "$1" --devices all -r 3 --report "$work/bench-$2" >> "$log" 2>&1 || say "(bench failed: see $log)"
  [ -f "$work/bench-$2.md" ] && while IFS= read -r l; do say "$l"; done < "$work/bench-$2.md"
}
if [ -f "$shared/models/stories260K.gguf" ]; then
  bench "$shared/models/stories260K.gguf" stories260K
else
  say ""; say "(stories260K not found under $shared/models: skipped)"
fi
if [ "${SKIP_8B:-0}" != 1 ]; then
  for type in Q4_K_M F16; do
    f="$work/llama3-8b-$type.gguf"
    [ -f "$f" ] || "$build/tools/synth/fafo-synth" --preset llama3-8b -t "$type" -o "$f" >> "$log" 2>&1
    bench "$f" "llama3-8b-$type"
  done
fi

say ""
say "Finished in $(( ($(date +%s) - started) / 60 )) min; the full log: $log"
printf '%s\n' "${lines[@]}" > "$report"
echo "report: $report"
[ $conformance -eq 0 ] && [ $lossless -eq 0 ]
