#!/bin/sh
# The GPU run of an unpacked bundle (tools/gpu-bundle.sh): fafo's checks and measurements
# on a GPU machine in a fixed time, step by step, each step its own process.
#
#   gpu-run.sh [--budget SECONDS] [--quick] [--tiny] [--peers DIR|ARCHIVE] [--steps LIST] OUT_DIR
#
# --budget: seconds for the whole run (default 420); --quick: small sizes, a rehearsal;
# --tiny: --quick with a toy model for the benches (a machine without a GPU);
# --peers: llama.cpp builds to measure beside fafo; --steps: only these steps (after a
# fix), e.g. --steps conformance,bench-vulkan.
# The steps and the report: the gpu_run/ folder beside this file, and docs/gpu-run.md.
here=$(dirname "$0")
command -v python3 > /dev/null || { echo "gpu-run: python3 is needed (the runner is $here/gpu_run/)" >&2; exit 1; }
exec python3 "$here/gpu_run" "$@"
