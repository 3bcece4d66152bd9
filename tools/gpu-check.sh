#!/usr/bin/env bash
# The GPU run on a machine that has an NVIDIA GPU *and* fafo's build dependencies (a
# developer's workstation): configures and builds BUILD_DIR (default build-gpu) with CUDA,
# makes the bundle (tools/gpu-bundle.sh), unpacks it and runs it (gpu-run.sh). A GPU
# machine without the build dependencies gets the bundle made elsewhere: README.md, "GPU run".
#
#   tools/gpu-check.sh [gpu-run.sh options] [OUT_DIR]     (default OUT_DIR: gpu-check/run)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$here/build-gpu}
args=("$@")
if [ ${#args[@]} -eq 0 ] || [[ ${args[-1]} == -* ]] || [[ ${#args[@]} -ge 2 && ${args[-2]} =~ ^--(budget|steps)$ ]]; then
  args+=("$here/gpu-check/run")  # no OUT_DIR given
fi
cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$build"
"$here/tools/gpu-bundle.sh" "$build" "$here/gpu-check"
unpacked=$(mktemp -d)
trap 'rm -rf "$unpacked"' EXIT
tar -xJf "$here/gpu-check/fafo-gpu.tar.xz" -C "$unpacked"
"$unpacked/fafo-gpu/gpu-run.sh" "${args[@]}"
