#!/usr/bin/env python3
"""The GPU run: fafo's checks and measurements on a machine with a GPU, in a fixed time.

Runs from an unpacked bundle (tools/gpu-bundle.sh); tools/gpu-run.sh starts it:

    gpu-run.sh [--budget SECONDS] [--quick] [--tiny] [--peers DIR] [--steps LIST] OUT_DIR

Every step is its own process with a timeout cut to what is left of the budget; a step
that no longer fits is reported as skipped; OUT_DIR/report.md is rewritten after every
step, so a run cut short still returns what it measured. Large files (the 8B models) go
to a work folder outside OUT_DIR ($FAFO_GPU_WORK, default /tmp/fafo-gpu-work), which a
second run on the same machine reuses. OUT_DIR holds at most 4 files: report.md,
results.json (every figure, and what --steps keeps from an earlier run), steps.log and
conformance.log.

Exit status: 0 every step that ran passed; 1 a step failed; 2 none failed, but the budget
cut at least one short.
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import time
from pathlib import Path

from bench import bench_model, step_f16, step_profile, step_roofline, step_strategies
from checks import step_conformance, step_devices, step_env, step_greedy, step_synth
from peers import llama_builds, step_peer_llama, step_peer_torch, step_side_by_side, unpack_peers
from common import LOG_LIMIT
from run import STEPS, Run
from kv import step_kv
from moe import step_moe
from split import step_split

RUN_ORDER = ["env", "devices", "conformance", "greedy", "strategies", "peer-torch", "synth", "bench-cuda", "bench-vulkan",
             "peer-llama", "f16", "profile", "split", "kv", "moe", "roofline", "side-by-side"]


def default_peers() -> str | None:
    if os.environ.get("FAFO_PEERS") is not None:
        return os.environ["FAFO_PEERS"] or None
    return next((p for p in ("gpu-check/peers", "gpu-check/peers.tar.xz") if os.path.exists(p)), None)


def main() -> int:
    parser = argparse.ArgumentParser(prog="gpu-run.sh", description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", type=float, default=420.0, help="seconds for the whole run (default 420)")
    parser.add_argument("--quick", action="store_true", help="small sizes: a 2-layer 8B-shaped file, pp64, tg16, curve 1,8")
    parser.add_argument("--tiny", action="store_true",
                        help="--quick with a toy model (dim 256) for the benches and only the RmsNorm rows of the op table: "
                             "the rehearsal on a machine without a GPU, whose CPU Vulkan driver (lavapipe) reads an "
                             "8B-shaped layer at ~0.2 GB/s")
    parser.add_argument("--steps", help=f"only these steps, comma-separated: {','.join(STEPS)}")
    parser.add_argument("--peers", default=default_peers(),
                        help="the llama.cpp builds to run beside fafo: a folder holding llama-cuda/llama-bench, "
                             "llama-vulkan/llama-bench (each with its libraries beside it), or an archive of one "
                             "(.tar.xz); default $FAFO_PEERS, else ./gpu-check/peers or ./gpu-check/peers.tar.xz")
    parser.add_argument("out_dir", metavar="OUT_DIR")
    args = parser.parse_args()
    args.steps_given = args.steps is not None
    if args.steps_given:
        args.steps = [s.strip() for s in args.steps.split(",") if s.strip()]
        unknown = [s for s in args.steps if s not in STEPS]
        if unknown:
            parser.error(f"unknown steps {','.join(unknown)} (the steps: {','.join(STEPS)})")
    else:
        args.steps = list(STEPS)
    if args.budget < 10:
        parser.error("--budget must be at least 10 seconds")
    root = Path(__file__).resolve().parent.parent  # the bundle: bin/, data/, gpu_run/
    if not (root / "bin" / "fafo").exists():
        print(f"gpu-run: {root}/bin/fafo not found: run the gpu-run.sh of an unpacked bundle (tools/gpu-bundle.sh makes one)",
              file=sys.stderr)
        return 1

    r = Run(args)
    unpack_peers(r, min(120.0, args.budget / 4))  # an archive of llama.cpp builds, before the clock of any step
    # A SIGTERM (the machine's own timeout) still writes the report and stops the children.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    needs_q4 = any(s in args.steps for s in ("synth", "bench-cuda", "bench-vulkan", "profile", "split", "kv"))
    if needs_q4:
        r.start_synth("Q4_K_M")  # from the first second; the steps before the benches run beside it
    if "devices" not in args.steps and "devices" not in r.results:
        args.steps.insert(0, "devices")  # the steps that follow need the device list
    order = [s for s in RUN_ORDER if s in args.steps]
    functions = {
        "env": step_env, "synth": step_synth, "devices": step_devices, "conformance": step_conformance,
        "greedy": step_greedy, "strategies": step_strategies,
        "bench-cuda": lambda run: bench_model(run, "cuda", "Q4_K_M", "bench_q4"),
        "bench-vulkan": lambda run: bench_model(run, "vulkan", "Q4_K_M", "bench_q4"),
        "peer-torch": step_peer_torch,
        "peer-llama": step_peer_llama,
        "f16": step_f16,
        "profile": step_profile,
        "split": step_split,
        "kv": step_kv,
        "moe": step_moe,
        "roofline": step_roofline,
        "side-by-side": step_side_by_side,
    }
    minimum = {"env": 5, "synth": 5, "devices": 5, "conformance": 30, "greedy": 10, "strategies": 15,
               "bench-cuda": 30, "bench-vulkan": 30, "peer-torch": 20, "peer-llama": 20, "f16": 60, "profile": 20,
               "split": 20, "kv": 20, "moe": 20, "roofline": 0, "side-by-side": 0}
    # The most a step may take of a 420 s budget (scaled with larger budgets), so that
    # one slow step leaves time for the 8B benches after it.
    cap = {"env": 60, "synth": 300, "devices": 30, "conformance": 120, "greedy": 60, "strategies": 45,
           "bench-cuda": 100, "bench-vulkan": 100, "peer-torch": 60, "peer-llama": 90, "f16": 300, "profile": 40,
           "split": 60, "kv": 60, "moe": 60, "roofline": 10, "side-by-side": 10}
    # A rehearsal (--quick, --tiny) runs on slow devices (lavapipe), often beside other
    # work: its caps are twice as long; the budget still bounds the whole run.
    scale = max(1.0, args.budget / 420.0) * (2.0 if r.quick else 1.0)
    f16_runs = args.budget >= 450 or args.steps_given

    def reserve_after(i: int) -> float:
        """The least time the selected steps after order[i] need, on the devices found."""
        later = set(order[i + 1:])
        if "devices" in r.results:
            if not r.devices("cuda"):
                later.discard("bench-cuda")
            if not r.devices("vulkan"):
                later -= {"bench-vulkan", "profile"}
        if not f16_runs:
            later.discard("f16")
        return float(sum(needs(s) for s in later))

    def needs(step: str) -> float:
        """A step's minimum, 0 for a peer step that has nothing to run here."""
        if step == "peer-torch" and not shutil.which("nvidia-smi") or step == "peer-llama" and not llama_builds(r):
            return 0.0
        return float(minimum[step])

    worst = 0
    r.write_report()
    try:
        for i, step in enumerate(order):
            if step == "f16":
                if not f16_runs:
                    r.section(step, "skipped: only with --budget 450 or more, or --steps f16", "", 0)
                    continue
                r.start_synth("F16")
            if r.left() < needs(step):
                r.section(step, f"skipped: {r.left():.0f} s left of the budget, the step needs {needs(step):.0f} s or more", "", 0)
                worst = max(worst, 2)
                continue
            print(f"gpu-run: {step} ({r.elapsed():.0f} s of {r.budget:.0f})", flush=True)
            t0 = time.monotonic()
            # Its cap, and the time the steps after it need, but never less than its own minimum.
            end_of_budget = r.started + r.budget - 3.0
            r.step_deadline = max(t0 + needs(step), min(t0 + cap[step] * scale, end_of_budget - reserve_after(i)))
            try:
                status, body = functions[step](r)
            except Exception as e:  # a bug of the runner's: reported, the run goes on
                status, body = f"FAILED: the runner: {type(e).__name__}: {e}", ""
            r.step_deadline = None
            r.section(step, status, body, time.monotonic() - t0)
            print(f"gpu-run: {step}: {status}", flush=True)
            if status.startswith("FAILED"):
                worst = 1
            elif status == "timed out":
                worst = max(worst, 2)
    finally:
        r.stop_background()
        r.write_report()
        r.log.close()
        if r.log_path.stat().st_size > LOG_LIMIT:
            data = r.log_path.read_bytes()[-LOG_LIMIT:]
            r.log_path.write_bytes(data)
    print(f"gpu-run: report {r.out / 'report.md'} after {r.elapsed():.0f} s", flush=True)
    return worst


if __name__ == "__main__":
    sys.exit(main())
