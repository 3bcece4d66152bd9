"""The GPU run's state: the budget and its clock, the programs it starts (each in its own
process group, with a time limit), the 8B files written in the background, and the
report rewritten after every step."""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import time
from pathlib import Path

from common import kill_group

STEPS = ["env", "synth", "devices", "conformance", "greedy", "strategies", "bench-cuda", "bench-vulkan", "peer-torch",
         "peer-llama", "f16", "profile", "split", "kv", "moe", "roofline", "side-by-side"]
TITLES = {
    "env": "1. Environment",
    "synth": "2. The 8B Q4_K_M file",
    "devices": "3. Devices",
    "conformance": "4. Op conformance",
    "greedy": "5. Greedy text of every strategy",
    "strategies": "6. stories260K: strategies side by side",
    "bench-cuda": "7a. 8B Q4_K_M bench: cuda",
    "bench-vulkan": "7b. 8B Q4_K_M bench: vulkan",
    "peer-torch": "7c. PyTorch on the same GPU: the 8B products through cuBLAS",
    "peer-llama": "7d. llama.cpp on the same GPU: llama-bench on the same 8B Q4_K_M file",
    "f16": "8. 8B F16 bench",
    "profile": "8b. Kernel profile (8B Q4_K_M): cuda, then Vulkan",
    "split": "8c. 8B Q4_K_M split with the CPU: --gpu-layers beside llama.cpp's -ngl",
    "kv": "8d. 8B Q4_K_M at a long context by KV cache type: --depth beside llama.cpp's -d",
    "moe": "8e. Qwen3-30B-A3B-shaped Q4_K_M (8 layers): a mixture of experts' tg and step cost",
    "roofline": "9. Roofline",
    "side-by-side": "10. Side by side: fafo, llama.cpp and PyTorch; strategies projected at 8B",
}
# The order the steps run in: the 8B file is written in the background from the first
# second, and the run waits for it only where the benches need it.


class Run:
    def __init__(self, args: argparse.Namespace):
        self.started = time.monotonic()
        self.step_deadline: float | None = None  # the current step's cap (main() sets it)
        self.fallback_reason = ""
        self.budget = args.budget
        self.quick = args.quick or args.tiny
        self.tiny = args.tiny
        self.root = Path(__file__).resolve().parent.parent  # the bundle: bin/, data/, gpu_run/
        self.bin = self.root / "bin"
        self.data = self.root / "data"
        self.out = Path(args.out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.work = Path(os.environ.get("FAFO_GPU_WORK", "/tmp/fafo-gpu-work"))
        self.work.mkdir(parents=True, exist_ok=True)
        self.selected = args.steps
        self.peers = Path(args.peers).resolve() if args.peers else None  # a folder, or an archive (peers.unpack_peers)
        self.results: dict = {}
        previous = self.out / "results.json"
        if args.steps_given and previous.exists():  # --steps: keep what the earlier run measured
            try:
                self.results = json.loads(previous.read_text())
            except (OSError, ValueError):
                self.results = {}
        self.results.setdefault("steps", {})
        self.results["run"] = {
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "budget_s": self.budget,
            "quick": self.quick,
            "steps": self.selected,
        }
        self.log_path = self.out / "steps.log"
        self.log = open(self.log_path, "a" if args.steps_given else "w", encoding="utf-8", errors="replace")
        self.env = self.program_env()
        self.synth_jobs: dict[str, subprocess.Popen] = {}
        self.synth_started: dict[str, float] = {}

    # ---- time ------------------------------------------------------------------------
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def left(self) -> float:
        """Seconds left to the current step: to the end of the budget (less 3 s kept for
        the last report), or to the step's own cap, whichever comes first."""
        left = self.budget - self.elapsed() - 3.0
        if self.step_deadline is not None:
            left = min(left, self.step_deadline - time.monotonic())
        return left

    # ---- processes -------------------------------------------------------------------
    def program_env(self) -> dict:
        """The environment of fafo's programs: the bundle's libraries before the machine's
        (whose LD_LIBRARY_PATH finds libcuda and the Vulkan driver), NVIDIA's Vulkan driver
        where the machine has it, and the bundle's libstdc++ only if the machine's is older."""
        env = dict(os.environ)
        paths = [str(self.root / "lib")]
        if self.needs_fallback_libstdcxx(paths):
            paths.append(str(self.root / "lib" / "fallback"))
        if env.get("LD_LIBRARY_PATH"):
            paths.append(env["LD_LIBRARY_PATH"])
        env["LD_LIBRARY_PATH"] = ":".join(paths)
        # No Vulkan driver variable is set: fafo finds NVIDIA's driver itself (its ICD file under
        # /usr/local/nvidia, through libEGL_nvidia.so.0 without a display; driver_files.h), and
        # step_devices() checks that it did.
        env["FAFO_CACHE_DIR"] = str(self.work / "cache")
        return env

    def needs_fallback_libstdcxx(self, paths: list[str]) -> bool:
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = ":".join(paths + ([env["LD_LIBRARY_PATH"]] if env.get("LD_LIBRARY_PATH") else []))
        try:
            r = subprocess.run([str(self.bin / "fafo"), "--version"], env=env, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired) as e:
            self.fallback_reason = f"`fafo --version` did not finish: {e}"
            return False
        self.fallback_reason = r.stderr.strip() if r.returncode != 0 else ""
        return r.returncode != 0 and any(v in r.stderr for v in ("GLIBCXX_", "CXXABI_", "GCC_"))

    def run(self, argv: list[str], limit: float, label: str, env: dict | None = None,
            stdout: Path | None = None) -> tuple[int | None, str]:
        """Runs one program in its own process group; returns (exit status or None when it
        ran out of time, stdout + stderr). Everything goes to steps.log too. `env`: the
        machine's own programs (PyTorch) get os.environ, untouched by the bundle's libraries.
        `stdout`: a file for the program's stdout alone (a peer's JSON), the text then
        being its stderr."""
        self.log.write(f"\n== {label}: {' '.join(argv)}  (limit {limit:.0f} s)\n")
        self.log.flush()
        t0 = time.monotonic()
        try:
            with open(stdout, "wb") if stdout else open(os.devnull, "wb") as sink:
                p = subprocess.Popen(argv, env=self.env if env is None else env,
                                     stdout=sink if stdout else subprocess.PIPE,
                                     stderr=subprocess.PIPE if stdout else subprocess.STDOUT,
                                     start_new_session=True, cwd=self.work)
        except OSError as e:
            self.log.write(f"could not start: {e}\n")
            return 127, f"could not start {argv[0]}: {e}"
        try:
            out, err = p.communicate(timeout=max(1.0, limit))
            code: int | None = p.returncode
        except subprocess.TimeoutExpired:
            kill_group(p)
            try:
                out, err = p.communicate(timeout=5)
            except subprocess.TimeoutExpired:  # a child that ignores SIGKILL (stuck in the driver): give up on it
                out = err = b"(the process did not end after SIGKILL)"
            code = None
        text = ((err or b"") if stdout else (out or b"")).decode("utf-8", errors="replace")
        self.log.write(text)
        self.log.write(f"-- {label}: {'timed out' if code is None else f'exit {code}'} after {time.monotonic() - t0:.1f} s\n")
        self.log.flush()
        return code, text

    # ---- the 8B files (written in the background) -------------------------------------
    def model_path(self, kind: str) -> Path:
        shape = "tiny" if self.tiny else "llama3-8b-2layers" if self.quick else "llama3-8b"
        return self.work / f"{shape}-{kind}.gguf"

    def synth_shape(self) -> list[str]:
        if self.tiny:  # dim 256: the smallest the K-quants' 256-value blocks allow
            return ["--preset", "tiny", "--layers", "2", "--dim", "256", "--heads", "4", "--kv-heads", "2", "--ffn", "768",
                    "--vocab", "1024"]
        if self.quick:  # the 8B layer shapes, 2 layers and a 32000-token vocabulary: ~1/3 of the writing
            return ["--preset", "llama3-8b", "--layers", "2", "--vocab", "32000"]
        return ["--preset", "llama3-8b"]

    def start_synth(self, kind: str) -> None:
        path = self.model_path(kind)
        if kind in self.synth_jobs or Path(str(path) + ".done").exists():
            return
        argv = [str(self.bin / "fafo-synth"), *self.synth_shape(), "-t", kind, "-o", str(path)]
        log = open(self.work / f"synth-{kind}.log", "w")
        self.synth_jobs[kind] = subprocess.Popen(argv, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                                 start_new_session=True)
        self.synth_started[kind] = time.monotonic()

    def wait_model(self, kind: str, limit: float) -> tuple[Path | None, str]:
        """The finished file, or None and why not."""
        path = self.model_path(kind)
        done = Path(str(path) + ".done")
        if done.exists():
            return path, "reused from an earlier run"
        job = self.synth_jobs.get(kind)
        if job is None:
            return None, "not being written"
        try:
            code = job.wait(timeout=max(1.0, limit))
        except subprocess.TimeoutExpired:
            return None, f"fafo-synth still writing it after {time.monotonic() - self.synth_started[kind]:.0f} s"
        seconds = time.monotonic() - self.synth_started[kind]
        log = (self.work / f"synth-{kind}.log").read_text(errors="replace")
        self.log.write(f"\n== fafo-synth {kind}: exit {code} after {seconds:.1f} s\n{log}")
        if code != 0:
            return None, f"fafo-synth failed (exit {code}): {log.strip()[-300:]}"
        done.write_text(f"{seconds:.1f}\n")
        self.results.setdefault("synth", {})[kind] = {"seconds": round(seconds, 1), "bytes": path.stat().st_size}
        return path, f"written in {seconds:.1f} s"

    def stop_background(self) -> None:
        for kind, job in self.synth_jobs.items():
            if job.poll() is None:
                kill_group(job)
                try:
                    job.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
                self.model_path(kind).unlink(missing_ok=True)

    # ---- devices ---------------------------------------------------------------------
    def devices(self, backend: str) -> list[dict]:
        return [d for d in self.results.get("devices", []) if d["backend"] == backend]

    def gpu_devices(self) -> list[dict]:
        return [d for d in self.results.get("devices", []) if d["backend"] in ("cuda", "vulkan")]

    def first_gpu_and_q4(self) -> tuple[dict | None, Path | None, tuple[str, str]]:
        """The first GPU device (cuda where found) and the finished Q4_K_M file, or a step's
        (status, body) saying why not (no GPU device, no file in time)."""
        gpus = self.gpu_devices()
        if not gpus:
            return None, None, ("skipped: no GPU device", "No cuda or vulkan device found.")
        d = next((g for g in gpus if g["backend"] == "cuda"), gpus[0])
        path, why = self.wait_model("Q4_K_M", self.left() - 10)
        if path is None:
            return d, None, (("timed out" if "still writing" in why else f"FAILED: {why}"), f"No Q4_K_M file: {why}")
        return d, path, ("", "")

    # ---- the report ------------------------------------------------------------------
    def section(self, step: str, status: str, body: str, seconds: float) -> None:
        self.results["steps"][step] = {"status": status, "seconds": round(seconds, 1), "body": body}
        self.write_report()

    def write_report(self) -> None:
        manifest = (self.root / "MANIFEST").read_text(errors="replace") if (self.root / "MANIFEST").exists() else ""
        lines = ["# fafo GPU run", ""]
        lines.append(f"- run: {self.results['run']['date']}, budget {self.budget:.0f} s"
                     f"{' (--quick: small sizes, a rehearsal)' if self.quick else ''}, steps {','.join(self.selected)}")
        for key in ("commit", "CUDA backend", "needs"):
            m = re.search(rf"^{re.escape(key)}: (.*)$", manifest, re.M)
            if m:
                lines.append(f"- bundle {key}: {m.group(1)}")
        lines.append(f"- elapsed: {self.elapsed():.0f} s")
        lines += ["", "| step | status | seconds |", "|---|---|---:|"]
        for step in STEPS:
            s = self.results["steps"].get(step)
            lines.append(f"| {step} | {s['status'] if s else 'not run'} | {s['seconds'] if s else ''} |")
        for step in STEPS:
            s = self.results["steps"].get(step)
            lines += ["", f"## {TITLES[step]}", ""]
            if not s:
                lines.append("(not run)")
                continue
            lines.append(f"_{s['status']}, {s['seconds']} s_")
            lines += ["", s["body"].rstrip()]
        tmp = self.out / "report.md.tmp"
        tmp.write_text("\n".join(lines) + "\n")
        tmp.replace(self.out / "report.md")
        data = {k: v for k, v in self.results.items()}
        (self.out / "results.json.tmp").write_text(json.dumps(data, indent=1))
        (self.out / "results.json.tmp").replace(self.out / "results.json")
