#!/usr/bin/env bash
# ctest -L gpu-bundle: the GPU bundle rehearsed on this machine, as the GPU machine will
# run it. Builds the bundle from BUILD_DIR, unpacks it, checks that with only the
# bundle's libraries on the path every program finds every library it needs (or glibc's),
# runs `gpu-run.sh --tiny` (--quick with a toy model for the benches: lavapipe reads an
# 8B-shaped layer at ~0.2 GB/s; cpu and lavapipe rows, cuda reports that it found no
# GPU) and `gpu-run.sh --quick --budget 25` (whose 8B-shaped benches cannot fit in 25
# seconds on lavapipe), and checks their reports.
#
#   tests/gpu_bundle_test.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
src=$1
build=$2
work=$build/gpu-bundle-test
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
rm -rf "$work"
mkdir -p "$work"

start=$(date +%s)
if ! "$src/tools/gpu-bundle.sh" "$build" "$work" > "$work/bundle.log" 2>&1; then
  cat "$work/bundle.log"
  echo "FAIL: tools/gpu-bundle.sh failed"
  exit 1
fi
cat "$work/bundle.log"
echo "bundle built in $(($(date +%s) - start)) s"
archive=$work/fafo-gpu.tar.xz
size=$(stat -c %s "$archive")
[ "$size" -le $((40 * 1024 * 1024)) ] || fail "the bundle is $size bytes, over 40 MiB"
tar -xJf "$archive" -C "$work" || { echo "FAIL: the bundle does not unpack"; exit 1; }
bundle=$work/fafo-gpu
for f in gpu-run.sh gpu_run/__main__.py gpu_run/peers.py peer/torch_steps.py MANIFEST bin/fafo bin/fafo-synth bin/test_backend_ops lib/libvulkan.so.1 \
         data/stories260K.gguf data/stories260K.greedy_256steps.golden.txt data/mt_bench_20.jsonl; do
  [ -e "$bundle/$f" ] || fail "the bundle has no $f"
done
grep -q '^commit: [0-9a-f]\{40\}' "$bundle/MANIFEST" || fail "MANIFEST names no commit"
grep -qE '^CUDA backend: (yes, architectures|no CUDA backend)' "$bundle/MANIFEST" || fail "MANIFEST does not say whether CUDA is in"
grep -q '^needs: GLIBC_2\.[0-9]*' "$bundle/MANIFEST" || fail "MANIFEST does not say which glibc it needs"

# Only the bundle's libraries and glibc's (with libstdc++ and libgcc_s from lib/fallback).
for p in "$bundle"/bin/* "$bundle"/lib/*.so*; do
  missing=$(env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH="$bundle/lib:$bundle/lib/fallback" ldd "$p" 2>&1 | grep -v "$bundle/lib" |
            grep '=>' | grep -vE '^\s*(libc|libm|libpthread|libdl|librt|libresolv|libmvec)\.so|ld-linux|linux-vdso' || true)
  [ -z "$missing" ] || fail "$(basename "$p") resolves libraries outside the bundle: $missing"
  env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH="$bundle/lib:$bundle/lib/fallback" ldd "$p" 2>&1 | grep -q "not found" &&
    fail "$(basename "$p") has a library that is not found"
done

# The quick rehearsal: its own work folder, so nothing of an earlier run is reused. Its
# budget is far above what it takes on an idle machine (about a minute on 2 cores), so
# that a busy one (a build beside it) cannot time a step out: every step's limit comes
# from the budget. The budget itself is checked by the 25-second run below.
export FAFO_GPU_WORK=$work/run-work
start=$(date +%s)
"$bundle/gpu-run.sh" --tiny --budget 1800 --peers '' "$work/out" > "$work/quick.log" 2>&1
code=$?
cat "$work/quick.log"
echo "--tiny run: exit $code in $(($(date +%s) - start)) s"
[ $code -eq 0 ] || fail "gpu-run.sh --tiny exited $code"
report=$work/out/report.md
[ -f "$report" ] || { echo "FAIL: no report"; exit 1; }
for section in "1. Environment" "2. The 8B Q4_K_M file" "3. Devices" "4. Op conformance" "5. Greedy text" \
               "6. stories260K" "7a. 8B Q4_K_M bench: cuda" "7b. 8B Q4_K_M bench: vulkan" "8. 8B F16 bench" \
               "7c. PyTorch on the same GPU" "7d. llama.cpp on the same GPU" "8b. Kernel profile" "8c. 8B Q4_K_M split with the CPU" \
               "8d. 8B Q4_K_M at a long context by KV cache type" "8e. Qwen3-30B-A3B-shaped Q4_K_M" "9. Roofline" \
               "10. Side by side"; do
  grep -q "^## $section" "$report" || fail "the report has no section '$section'"
done
# Every strategy gives the golden text on cpu and on the Vulkan device.
for backend in cpu vulkan:0; do
  for strategy in ar jacobi lookahead fafo auto; do
    grep -qE "^\| $backend \| $strategy \| yes \| yes \|" "$report" || fail "$backend $strategy: not the golden text"
  done
done
grep -qE '^\| conformance \| ok \|' "$report" || fail "conformance did not pass"
grep -qE 'tests passed, 0 failed' "$report" || fail "the conformance section has no pass count"
grep -qE '^\| bench-cuda \| skipped: no cuda device' "$report" || fail "bench-cuda does not say that no cuda device was found"
grep -qE '^- tg16: [0-9.]+' "$report" || fail "no tg figure for vulkan"
# The peers: PyTorch needs an NVIDIA GPU; no llama.cpp build is given here (--peers '').
grep -qE '^\| peer-torch \| skipped: no NVIDIA GPU' "$report" || fail "peer-torch does not say that there is no NVIDIA GPU"
grep -qE '^\| peer-llama \| skipped: no llama-bench' "$report" || fail "peer-llama does not say that no llama-bench was found"
grep -qE '^\| fafo \| vulkan:0 \| Q4_K_M \| [0-9.]+ \|' "$report" || fail "the side-by-side table has no fafo vulkan row"
# The split: one of the tiny file's two layers on the Vulkan device, each device's part of t(1).
grep -qE '^\| fafo \| 1 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| n/a \| [0-9.]+ / [0-9.]+ \|' "$report" || fail "no split row for fafo"
# The KV cache types at a depth of 64 on the Vulkan device: each type's bytes per token and tg.
for kv in f16 q8_0 q4_0; do
  grep -qE "^\| fafo \| $kv \| [0-9.]+ \| [0-9.]+ \|" "$report" || fail "no kv row for fafo $kv"
done
# The mixture of experts (qwen3moe-tiny: 2 experts of 8 per token) on the Vulkan device: t(1) runs 2 a layer.
grep -qE '^\*\*vulkan:0\*\* .*tg8 [0-9.]+ tokens/s' "$report" || fail "no moe tg for vulkan"
grep -qE '^\| 1 \| [0-9.]+ \| 1\.00 \| 2\.0 \|' "$report" || fail "no moe step-cost row for T=1 with 2 experts a layer"
# gpt-oss-tiny greedy on the Vulkan device: every strategy's text is the cpu backend's plain decoding's.
grep -qE '^\| vulkan:0 \| yes \| yes \| yes \| yes \|' "$report" || fail "gpt-oss-tiny's greedy texts on vulkan are not cpu's"
grep -qE '^\| vulkan:0 \| fafo \| [0-9]+ \|' "$report" || fail "no projection row for fafo on vulkan"
grep -qE "^\\| tiny-Q4_K_M.gguf \\| vulkan:0 \\| [0-9.]+ \\|" "$report" || fail "no roofline row for vulkan"
files=$(find "$work/out" -type f | wc -l)
[ "$files" -le 8 ] || fail "OUT_DIR holds $files files (at most 8)"

# A 25-second budget: ends in time, says what it skipped.
start=$(date +%s)
"$bundle/gpu-run.sh" --quick --budget 25 "$work/out60" > "$work/budget.log" 2>&1
code=$?
took=$(($(date +%s) - start))
cat "$work/budget.log"
echo "--budget 25: exit $code in $took s"
# Within the budget, but for starting and stopping processes, which a busy machine slows
# (gpu-run waits up to 5 s for a step it stopped).
[ "$took" -le 40 ] || fail "--budget 25 took $took s"
[ $code -eq 0 ] || [ $code -eq 2 ] || fail "--budget 25 exited $code"
grep -qE '^\| [a-z0-9-]+ \| (skipped: -?[0-9]+ s left|timed out)' "$work/out60/report.md" || fail "--budget 25 reports no step it skipped or cut"
# The bundle's fafo finds the shipped model beside itself (bin/../data) when no -m is given.
(cd "$work" && env -u FAFO_MODEL LD_LIBRARY_PATH="$bundle/lib" "$bundle/bin/fafo" run -p "Once upon a time" -n 8 --temp 0 \
  > "$work/default.out" 2> "$work/default.err") || fail "the bundle's fafo without -m failed: $(cat "$work/default.err")"
grep -q "$bundle/data/stories260K.gguf (the default" "$work/default.err" || fail "the bundle's fafo did not open bin/../data/stories260K.gguf: $(cat "$work/default.err")"

[ $fails -eq 0 ] && echo "gpu bundle: all checks passed" || echo "gpu bundle: $fails checks failed"
[ $fails -eq 0 ]
