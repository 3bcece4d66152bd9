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
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

STEPS = ["env", "synth", "devices", "conformance", "greedy", "strategies", "bench-cuda", "bench-vulkan", "peer-torch",
         "peer-llama", "f16", "profile", "roofline", "side-by-side"]
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
    "roofline": "9. Roofline",
    "side-by-side": "10. Side by side: fafo, llama.cpp and PyTorch; strategies projected at 8B",
}
# The order the steps run in: the 8B file is written in the background from the first
# second, and the run waits for it only where the benches need it.
RUN_ORDER = ["env", "devices", "conformance", "greedy", "strategies", "peer-torch", "synth", "bench-cuda", "bench-vulkan",
             "peer-llama", "f16", "profile", "roofline", "side-by-side"]
STRATEGIES = ["ar", "jacobi", "lookahead", "fafo", "auto"]
LOG_LIMIT = 16 * 1024 * 1024
NVIDIA_ICD = "/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json"


class Run:
    def __init__(self, args: argparse.Namespace):
        self.started = time.monotonic()
        self.step_deadline: float | None = None  # the current step's cap (main() sets it)
        self.fallback_reason = ""
        self.budget = args.budget
        self.quick = args.quick or args.tiny
        self.tiny = args.tiny
        self.root = Path(__file__).resolve().parent
        self.bin = self.root / "bin"
        self.data = self.root / "data"
        self.out = Path(args.out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.work = Path(os.environ.get("FAFO_GPU_WORK", "/tmp/fafo-gpu-work"))
        self.work.mkdir(parents=True, exist_ok=True)
        self.selected = args.steps
        self.peers = Path(args.peers) if args.peers else None
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


def kill_group(p: subprocess.Popen) -> None:
    """SIGTERM to the process group, SIGKILL 1.5 s later (within the 3 s kept at the end)."""
    try:
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout=1.5)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def code_block(text: str, max_lines: int = 80) -> str:
    lines = text.rstrip().splitlines()
    if len(lines) > max_lines:
        lines = lines[: max_lines // 2] + [f"... ({len(lines) - max_lines} lines left out: steps.log has them)"] + lines[-max_lines // 2:]
    return "```\n" + "\n".join(lines) + "\n```"


def tail(text: str, n: int = 15) -> str:
    return code_block("\n".join(text.rstrip().splitlines()[-n:]), n + 1)


def shell_out(argv: list[str], timeout: float = 10) -> str:
    """What the command printed on stdout when it succeeded; "" when it failed or did not finish."""
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        return r.stdout.strip() if r.returncode == 0 else ""
    except (OSError, subprocess.TimeoutExpired):
        return ""


def ldconfig_find(name: str) -> str:
    """The path ldconfig's cache gives for a library, or ""."""
    ldconfig = next((c for c in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if os.path.exists(c)), "ldconfig")
    for line in shell_out([ldconfig, "-p"]).splitlines():
        if line.strip().startswith(name + " ") and "=>" in line:
            return line.split("=>", 1)[1].strip()
    return ""


# ---- the steps: each returns (status, markdown body) ---------------------------------------------
# status: "ok", "FAILED: why", "timed out", "skipped: why"

COPY_BANDWIDTH = r"""
import sys, torch
if not torch.cuda.is_available():
    print("no CUDA device visible to PyTorch"); sys.exit(3)
n = 1 << 30
a = torch.empty(n, dtype=torch.uint8, device="cuda"); b = torch.empty_like(a)
a.fill_(1); b.copy_(a); torch.cuda.synchronize()
start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
best = 0.0
for _ in range(5):
    start.record()
    for _ in range(4): b.copy_(a)
    stop.record(); torch.cuda.synchronize()
    best = max(best, 4 * 2 * n / (start.elapsed_time(stop) / 1e3) / 1e9)
print(f"copy_gbps {best:.1f} {torch.cuda.get_device_name(0)}")
"""


def step_env(r: Run) -> tuple[str, str]:
    rows = []
    missing = []
    os_name = "unknown"
    if os.path.exists("/etc/os-release"):
        m = re.search(r'^PRETTY_NAME="?([^"\n]*)', Path("/etc/os-release").read_text(), re.M)
        os_name = m.group(1) if m else os_name
    rows.append(("machine", f"{os_name}, {os.uname().machine}, {os.cpu_count()} cores, {os.confstr('CS_GNU_LIBC_VERSION')}"))
    smi = shutil.which("nvidia-smi")
    if smi:
        gpu = shell_out([smi, "--query-gpu=name,memory.total,driver_version,compute_cap", "--format=csv,noheader"])
        rows.append(("GPU (nvidia-smi)", gpu or "**nvidia-smi found no GPU** (or failed)"))
        r.results["gpu"] = gpu
    else:
        rows.append(("GPU (nvidia-smi)", "**no nvidia-smi**: no NVIDIA GPU here"))
        missing.append("an NVIDIA GPU")
    libcuda = ldconfig_find("libcuda.so.1")
    if not libcuda:
        for d in r.env.get("LD_LIBRARY_PATH", "").split(":"):
            if d and os.path.exists(os.path.join(d, "libcuda.so.1")):
                libcuda = os.path.join(d, "libcuda.so.1")
                break
    rows.append(("libcuda.so.1", libcuda or "**not found** (the cuda backend finds no device)"))
    if not libcuda:
        missing.append("libcuda.so.1")
    bundled_loader = r.root / "lib" / "libvulkan.so.1"
    rows.append(("Vulkan loader", f"the bundle's ({bundled_loader})" if bundled_loader.exists() else
                 ldconfig_find("libvulkan.so.1") or "**none** (vulkan has no device)"))
    icd = r.env.get("VK_DRIVER_FILES") or r.env.get("VK_ICD_FILENAMES")
    if icd:
        rows.append(("Vulkan driver (ICD)", f"VK_DRIVER_FILES={icd}" + ("" if os.path.exists(icd.split(":")[0]) else " **(file missing)**")))
    else:
        found = [str(p) for d in ("/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d", "/usr/local/share/vulkan/icd.d",
                                  str(Path(NVIDIA_ICD).parent))
                 if os.path.isdir(d) for p in sorted(Path(d).glob("*.json"))]
        rows.append(("Vulkan driver (ICD)", ", ".join(found) if found else
                     f"**none found** (no {NVIDIA_ICD}, nothing in /usr/share/vulkan/icd.d or /etc/vulkan/icd.d)"))
        if not found:
            missing.append("a Vulkan driver")
    fallback = r.fallback_reason
    rows.append(("libstdc++", "the bundle's fallback (the machine's is older)" if "fallback" in r.env["LD_LIBRARY_PATH"]
                 else ("the machine's" if not fallback else f"**fafo does not start**: {fallback}")))
    rows.append(("LD_LIBRARY_PATH", r.env["LD_LIBRARY_PATH"]))
    copy = "not measured"
    python = shutil.which("python3")
    if smi and python:
        code, text = r.run([python, "-c", COPY_BANDWIDTH], min(90.0, r.left()), "copy bandwidth (PyTorch)", dict(os.environ))
        m = re.search(r"copy_gbps ([0-9.]+)", text)
        if m:
            r.results["copy_gbps"] = float(m.group(1))
            copy = f"{m.group(1)} GB/s (bytes read + written per second, 1 GiB device-to-device copy, best of 5)"
        else:
            copy = f"not measured: {text.strip().splitlines()[-1] if text.strip() else 'exit ' + str(code)}"
    rows.append(("copy bandwidth", copy))
    body = "| what | found |\n|---|---|\n" + "\n".join(f"| {k} | {v} |" for k, v in rows)
    if missing:
        body += "\n\nMissing: " + ", ".join(missing) + "."
    status = "ok" if (r.bin / "fafo").exists() and not fallback or "fallback" in r.env["LD_LIBRARY_PATH"] else "FAILED: fafo does not start"
    return status, body


def step_synth(r: Run) -> tuple[str, str]:
    path, why = r.wait_model("Q4_K_M", r.left())
    if path is None:
        status = "timed out" if "still writing" in why else f"FAILED: {why}"
        return status, why
    size = path.stat().st_size
    return "ok", f"`{path.name}`: {size / 1e9:.2f} GB, {why} (fafo-synth {' '.join(r.synth_shape())} -t Q4_K_M)"


def parse_devices(text: str) -> list[dict]:
    devices = []
    backend = None
    for line in text.splitlines():
        m = re.match(r"backend (\S+):", line)
        if m:
            backend = m.group(1)
            continue
        m = re.match(r"device (\d+): (.*)", line)
        if m and backend:
            devices.append({"backend": backend, "index": int(m.group(1)), "name": m.group(2).strip()})
    return devices


def find_library(r: Run, name: str) -> str:
    dirs = [d for d in r.env.get("LD_LIBRARY_PATH", "").split(":") if d]
    return next((os.path.join(d, name) for d in dirs if os.path.exists(os.path.join(d, name))), "") or ldconfig_find(name)


def try_egl_icd(r: Run) -> tuple[str, str]:
    """NVIDIA's ICD file names libGLX_nvidia.so.0, whose vk_icdGetInstanceProcAddr gives no
    vkCreateInstance on some machines without a display; the same driver's EGL library
    (libEGL_nvidia.so.0) carries the Vulkan entry points too. Returns (ICD file written, or
    "", what happened)."""
    egl = find_library(r, "libEGL_nvidia.so.0")
    if not egl:
        return "", "no libEGL_nvidia.so.0 on this machine to try instead"
    try:
        icd = json.loads(Path(NVIDIA_ICD).read_text())
    except (OSError, ValueError):
        icd = {"file_format_version": "1.0.1", "ICD": {"api_version": "1.3.0"}}
    icd.setdefault("ICD", {})["library_path"] = egl
    path = r.work / "nvidia_egl_icd.json"
    path.write_text(json.dumps(icd, indent=1))
    return str(path), f"tried {egl} through {path}"


def step_devices(r: Run) -> tuple[str, str]:
    code, text = r.run([str(r.bin / "fafo"), "devices"], min(60.0, r.left()), "fafo devices")
    if code is None:
        return "timed out", tail(text)
    devices = parse_devices(text)
    notes = ""
    if "no Vulkan devices found" in text and os.path.exists(NVIDIA_ICD):
        notes = "\n\n" + vulkan_diagnosis(r)
        if not any(os.environ.get(v) for v in ("VK_DRIVER_FILES", "VK_ICD_FILENAMES", "VK_ADD_DRIVER_FILES")):
            icd, what = try_egl_icd(r)
            if icd:
                env = dict(r.env)
                env["VK_DRIVER_FILES"] = env["VK_ICD_FILENAMES"] = icd
                code2, text2 = r.run([str(r.bin / "fafo"), "devices"], min(30.0, r.left()), "fafo devices (EGL ICD)", env)
                if code2 == 0 and any(d["backend"] == "vulkan" for d in parse_devices(text2)):
                    r.env = env
                    code, text, devices = code2, text2, parse_devices(text2)
                    notes += f"\n\n**The EGL library works**: {what} gave Vulkan devices; the rest of the run uses it."
                else:
                    notes += f"\n\nThe EGL library gave no Vulkan device either ({what}):\n\n" + code_block(tail(text2, 12))
            else:
                notes += f"\n\n{what}."
    r.results["devices"] = devices
    r.results["vulkan_icd"] = r.env.get("VK_DRIVER_FILES", "")
    summary = ", ".join(f"{d['backend']}:{d['index']} ({d['name']})" for d in devices) or "none"
    gpus = [d for d in devices if d["backend"] in ("cuda", "vulkan")]
    body = f"Devices: {summary}\n\n" + code_block(text, 120)
    if not any(d["backend"] == "cuda" for d in devices):
        body += "\n\nNo cuda device: " + ("this build has no CUDA backend." if "backend cuda" not in text
                                          else "the CUDA backend found no GPU (see above).")
    body += notes
    if code != 0:
        return f"FAILED: exit {code}", body
    return ("ok" if gpus else "ok (no GPU device)"), body


def vulkan_diagnosis(r: Run) -> str:
    """Why NVIDIA's Vulkan driver gave no device: what its ICD file names, whether that
    library and the driver's other Vulkan pieces are on this machine, and what the loader said."""
    lines = ["NVIDIA's Vulkan driver is declared but fafo found no device through it:", ""]
    try:
        icd = json.loads(Path(NVIDIA_ICD).read_text())
        lib = icd.get("ICD", {}).get("library_path", "")
        lines.append(f"- `{NVIDIA_ICD}`: library `{lib}`, API {icd.get('ICD', {}).get('api_version', '?')}")
        where = lib if os.path.isabs(lib) and os.path.exists(lib) else find_library(r, lib)
        lines.append(f"- that library: {where or '**not on this machine** (the container has no graphics driver libraries)'}")
        lines.append(f"- libEGL_nvidia.so.0: {find_library(r, 'libEGL_nvidia.so.0') or 'not found'}")
    except (OSError, ValueError) as e:
        lines.append(f"- `{NVIDIA_ICD}` unreadable: {e}")
    pieces = sorted({f.name for d in ("/usr/local/nvidia/lib64", "/usr/lib/x86_64-linux-gnu") if os.path.isdir(d)
                     for f in Path(d).iterdir() if re.match(r"lib(GLX_nvidia|EGL_nvidia|nvidia-(glvkspirv|gpucomp|glcore|eglcore|vulkan))", f.name)})
    lines.append(f"- the driver's Vulkan/graphics libraries present: {', '.join(pieces) or '**none**'}")
    lines.append(f"- device nodes: {', '.join(sorted(p.name for p in Path('/dev').glob('nvidia*'))) or 'none'}")
    lines.append(f"- NVIDIA_DRIVER_CAPABILITIES={os.environ.get('NVIDIA_DRIVER_CAPABILITIES', '(unset)')}")
    env = dict(r.env)
    env["VK_LOADER_DEBUG"] = "error,warn,driver"
    env["VK_DRIVER_FILES"] = env["VK_ICD_FILENAMES"] = NVIDIA_ICD
    _, text = r.run([str(r.bin / "fafo"), "devices"], min(30.0, r.left()), "fafo devices (Vulkan loader debug)", env)
    loader = [l for l in text.splitlines() if l.startswith(("ERROR", "WARNING", "DRIVER", "[Vulkan Loader]")) or "loader" in l.lower()]
    lines += ["", "The Vulkan loader (VK_LOADER_DEBUG=error,warn,driver):", "", code_block("\n".join(loader[-40:]) or text, 45)]
    return "\n".join(lines)


def parse_conformance(text: str) -> tuple[dict, list[str], list[str]]:
    """Per target and op: cases, largest error, failures; the failed tests; the pair lines."""
    table: dict[tuple[str, str], dict] = {}
    for line in text.splitlines():
        m = re.match(r"\s+(\S+)\s+(\S+)\s+(.*?)\s+(\d+) step sizes\s+(exact|tolerance)\s+max error (\S+)(\s+FAILED)?", line)
        if not m:
            continue
        key = (m.group(1), m.group(2))
        e = table.setdefault(key, {"cases": 0, "max_error": 0.0, "failed": 0, "mode": m.group(5), "worst": ""})
        e["cases"] += 1
        err = float(m.group(6))
        if err > e["max_error"] or not e["worst"]:
            e["max_error"] = max(e["max_error"], err)
            e["worst"] = m.group(3).strip()
        if m.group(7):
            e["failed"] += 1
    failed = sorted(set(re.findall(r"^\[  FAILED  \] (\S+)", text, re.M)))
    pairs = [l.strip() for l in text.splitlines() if l.lstrip().startswith("pair ")]
    return table, failed, pairs


def step_conformance(r: Run) -> tuple[str, str]:
    """The table in one process per backend (a CUDA fault is sticky: it must not take the
    Vulkan rows with it), GPUs first, then the CUDA-Vulkan pairs, then cpu and reference.
    The CUDA backend's host emulation and the cpu-only tests are the same on every machine
    and run in CI."""
    groups = []
    if r.devices("vulkan"):
        groups.append(("vulkan", "EveryBackendAndDevice/*/vulkan_*"))
    if r.devices("cuda"):
        groups.append(("cuda", "EveryBackendAndDevice/*/cuda_?"))
        groups.append(("cuda, warp kernels", "EveryBackendAndDevice/*/cuda_?"))  # FAFO_CUDA_KERNELS=warp
        groups.append(("cuda, plain kernels", "EveryBackendAndDevice/*/cuda_?"))  # FAFO_CUDA_KERNELS=plain
        groups.append(("cuda, graphs", "EveryBackendAndDevice/*/cuda_?"))  # FAFO_CUDA_GRAPHS=1
    if r.devices("vulkan") and r.devices("cuda"):
        groups.append(("cuda against vulkan", "BackendPairs.CudaAndVulkan*"))
        groups.append(("cuda against vulkan, warp kernels", "BackendPairs.CudaAndVulkan*"))  # float products on both
    groups.append(("cpu and reference", "EveryBackendAndDevice/*/cpu_*:EveryBackendAndDevice/*/reference_*"))
    texts, failed, summary, cut = [], [], [], False
    table: dict[tuple[str, str], dict] = {}
    for name, pattern in groups:
        if r.left() < 5:
            summary.append(f"- {name}: skipped (budget)")
            cut = True
            continue
        kernels = "plain" if "plain kernels" in name else "warp" if "warp kernels" in name else None
        env = dict(r.env, FAFO_CUDA_KERNELS=kernels) if kernels else None
        if name == "cuda against vulkan, warp kernels":
            env = dict(r.env, FAFO_CUDA_KERNELS="warp", FAFO_VULKAN_INT8="0")  # float products on both
        if name == "cuda, graphs":
            env, kernels = dict(r.env, FAFO_CUDA_GRAPHS="1"), "graphs, fast"
        # The table's many small shapes are not worth tuning (VulkanBackendOptions::tune: on by
        # default on GPUs); the bench tunes the model's.
        env = dict(env or r.env, FAFO_VULKAN_TUNE="0")
        code, text = r.run([str(r.bin / "test_backend_ops"), "--gtest_color=no", f"--gtest_filter={pattern}"], r.left(),
                           f"op-conformance table: {name}", env=env)
        texts.append(f"==== {name}: {pattern}\n{text}")
        for (t, op), e in parse_conformance(text)[0].items():  # cuda's rows once per kernel set
            table[(f"{t} ({kernels} kernels)" if kernels else t, op)] = e
        passed = re.search(r"\[  PASSED  \] (\d+) tests?", text)
        group_failed = sorted(set(re.findall(r"^\[  FAILED  \] (\S+)", text, re.M)))
        failed += group_failed
        if code is None:
            summary.append(f"- {name}: **timed out**")
            cut = True
        elif code != 0 and not group_failed:
            summary.append(f"- {name}: **exit {code}** (crashed?)\n\n{tail(text, 12)}")
            failed.append(f"{name} (exit {code})")
        else:
            summary.append(f"- {name}: {passed.group(1) if passed else 0} tests passed, {len(group_failed)} failed"
                           + (f": {', '.join(group_failed)}" if group_failed else ""))
    text = "\n".join(texts)
    (r.out / "conformance.log").write_bytes(text.encode("utf-8", "replace")[-LOG_LIMIT:])
    pairs = [l.strip()[5:] for l in text.splitlines() if l.lstrip().startswith("pair cuda_")]
    skipped_pair = re.search(r"needs a CUDA GPU and a Vulkan GPU \([^)]*\)", text)
    lines = summary + ["", "(conformance.log has every case)", "",
                       "Largest error against the reference, per backend and op (exact: bit for bit; tolerance: "
                       "within the backend's declared tolerance):", "",
                       "| target | op | cases | mode | max error | worst case | failed |", "|---|---|---:|---|---:|---|---:|"]
    for (t, op), e in sorted(table.items()):
        lines.append(f"| {t} | {op} | {e['cases']} | {e['mode']} | {e['max_error']:.3g} | {e['worst']} | {e['failed']} |")
    lines += ["", "CUDA against Vulkan on the same GPU, bit for bit (one summation order):", ""]
    if pairs:
        lines += [f"- {p}" for p in pairs]
    else:
        lines.append("- not compared: " + (skipped_pair.group(0) if skipped_pair else
                                             "this machine has no cuda device and vulkan device to pair"))
    r.results["conformance"] = {"failed": failed, "pairs": pairs,
                                "max_errors": {f"{t}/{op}": e["max_error"] for (t, op), e in table.items()}}
    body = "\n".join(lines)
    if failed:
        return f"FAILED: {len(failed)} tests", body
    return ("timed out" if cut else "ok"), body


def step_greedy(r: Run) -> tuple[str, str]:
    model = r.data / "stories260K.gguf"
    golden = (r.data / "stories260K.greedy_256steps.golden.txt").read_text()
    golden = golden[:-1] if golden.endswith("\n") else golden  # the newline `fafo run` prints after the text
    n_tokens = 64 if r.quick else 256  # --quick: the golden text's start
    # GPUs first; cuda again with its steps captured as graphs (FAFO_CUDA_GRAPHS=1)
    targets = [(d["backend"], d["index"], False) for d in r.gpu_devices()]
    targets += [("cuda", d["index"], True) for d in r.devices("cuda")] + [("cpu", None, False)]
    rows, problems, cut = [], [], False
    for backend, index, graphs in targets:
        ar_text = None
        for strategy in STRATEGIES:
            if r.left() < 5:
                rows.append(f"| {backend}{'' if index is None else ':' + str(index)} | {strategy} | skipped: budget | | | |")
                cut = True
                continue
            argv = [str(r.bin / "fafo"), "run", "-m", str(model), "-n", str(n_tokens), "--temp", "0", "--json",
                    "--strategy", strategy, "--backend", backend]
            if index is not None:
                argv += ["--device", str(index)]
            label = f"{backend}{'' if index is None else ':' + str(index)}{' graphs' if graphs else ''}"
            code, text = r.run(argv, min(120.0, r.left()), f"greedy {label} {strategy}",
                               env=dict(r.env, FAFO_CUDA_GRAPHS="1") if graphs else None)
            if code is None:
                rows.append(f"| {label} | {strategy} | timed out | | | |")
                problems.append(f"{label} {strategy} timed out")
                cut = True
                continue
            try:
                j = bench_json(text)
            except ValueError:
                rows.append(f"| {label} | {strategy} | FAILED (exit {code}) | | | |")
                problems.append(f"{label} {strategy}: exit {code}: {text.strip().splitlines()[-1] if text.strip() else ''}")
                continue
            got = j.get("text", "")
            if got.startswith(" ") and not golden.startswith(" "):
                got = got[1:]  # the text's leading space, which the streamed text leaves out (SentencePiece)
            if strategy == "ar":
                ar_text = got
            same = got == golden if n_tokens == 256 else bool(got) and golden.startswith(got)
            if not same:
                at = next((i for i, (a, b) in enumerate(zip(got, golden)) if a != b), min(len(got), len(golden)))
                problems.append(f"{label} {strategy}: differs from the golden text at character {at}: "
                                f"{got[max(0, at - 20):at + 20]!r} vs {golden[max(0, at - 20):at + 20]!r}")
            rows.append(f"| {label} | {strategy} | {'yes' if same else '**no**'} | "
                        f"{'yes' if ar_text is not None and got == ar_text else '**no**'} | {j.get('tau', 0):.2f} | "
                        f"{j.get('tokens_per_s', 0):.0f} |")
    body = f"stories260K, {n_tokens} tokens from BOS, greedy, against llama.cpp's golden text" \
           f"{' (its start)' if n_tokens < 256 else ''}:\n\n" \
           "| backend | strategy | = golden | = ar here | tokens/step | tokens/s |\n|---|---|---|---|---:|---:|\n" + "\n".join(rows)
    if problems:
        body += "\n\n" + "\n".join(f"- {p}" for p in problems)
    failed = [p for p in problems if "timed out" not in p]
    r.results["greedy"] = {"problems": problems}
    if failed:
        return f"FAILED: {len(failed)} runs", body
    return ("timed out" if cut else "ok"), body


def bench_json(text: str) -> dict:
    """The last JSON object a program printed at the start of a line (stderr's lines, merged
    into the same text, may come before or after it)."""
    decoder = json.JSONDecoder()
    starts = [m.start() for m in re.finditer(r"(?m)^\{", text)]
    for at in reversed(starts):
        try:
            value, _ = decoder.raw_decode(text, at)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    raise ValueError("no JSON object in the output")


def step_strategies(r: Run) -> tuple[str, str]:
    """stories260K's strategies side by side, one process per GPU device."""
    gpus = r.gpu_devices()
    if not gpus:
        return "skipped: no GPU device", "No cuda or vulkan device found."
    n_prompts, n_predict = (2, 24) if r.quick else (20, 64)
    lines = [f"{n_prompts} MT-Bench prompts, {n_predict} tokens each, greedy; speedup: tokens/s over ar's on the same device:",
             "", "| device | strategy | tokens/s | speedup | tokens/step | prompts = ar |", "|---|---|---:|---:|---:|---:|"]
    status, notes, measured = "ok", [], []
    for d in gpus:
        label = f"{d['backend']}:{d['index']}"
        if r.left() < 5:
            notes.append(f"- {label}: skipped (budget)")
            status = "timed out" if status == "ok" else status
            continue
        argv = [str(r.bin / "fafo"), "bench", "-m", str(r.data / "stories260K.gguf"), "--backend", d["backend"],
                "--device", str(d["index"]), "--strategies", "ar,jacobi,lookahead,fafo", "--prompts",
                str(r.data / "mt_bench_20.jsonl"), "--n-prompts", str(n_prompts), "-n", str(n_predict), "--pp", "0",
                "--tg", "0", "--curve", "", "-r", "1", "--json"]
        code, text = r.run(argv, r.left(), f"strategies {label}")
        if code is None:
            notes.append(f"- {label}: **timed out**")
            status = "timed out" if status == "ok" else status
            continue
        try:
            j = bench_json(text)
        except ValueError:
            notes.append(f"- {label}: **failed** (exit {code})\n\n{tail(text)}")
            status = f"FAILED: {label}"
            continue
        measured.append({"label": label, **j})
        for row in j.get("strategies", []):
            lines.append(f"| {label} | {row['strategy']} | {row['tokens_per_s']:.1f} | {row.get('speedup', 0):.2f}× | "
                         f"{row['tau']:.2f} | {row['ids_equal_ar']}/{row['prompts']} |")
            if row.get("ids_equal_ar") != row.get("prompts"):
                notes.append(f"- **{label}: {row['strategy']} equals ar on {row['ids_equal_ar']} of {row['prompts']} prompts**")
                status = "FAILED: output differs from ar"
        if j.get("error"):
            notes.append(f"- {label}: **error**: {j['error']}")
            status = f"FAILED: {label}"
    r.results["strategies"] = measured
    return status, "\n".join(lines + [""] + notes)


def bench_model(r: Run, backend: str, kind: str, key: str, profile: bool = False) -> tuple[str, str]:
    devices = r.devices(backend)
    if not devices:
        return f"skipped: no {backend} device", f"No {backend} device found (step 3)."
    path, why = r.wait_model(kind, r.left() - 20)
    if path is None:
        return ("timed out" if "still writing" in why else f"FAILED: {why}"), f"No {kind} file: {why}"
    pp, tg, curve, reps = (64, 16, "1,8", "1") if r.quick else (512, 128, "1,2,4,8,16,32,64,128,256", "2")
    if kind != "Q4_K_M":
        curve = "1,8" if r.quick else "1,16,64"
    lines, status = [], "ok"
    store = r.results.setdefault(key, {})
    for d in devices:
        label = f"{backend}:{d['index']}"
        store[label] = {"device": d["name"]}  # nothing of an earlier run survives a failed rerun
        base = [str(r.bin / "fafo"), "bench", "-m", str(path), "--backend", backend, "--device", str(d["index"]),
                "--json"]
        # The small steps' costs first, then tg, the large steps and pp sized from them: a slow
        # backend (cuda's plain kernels: 0.39 s a token at 8B on an H100) still reports every
        # part, smaller, instead of timing out in the first. Each part gets a share of what is left.
        Ts = [int(t) for t in curve.split(",")]
        small, large = Ts[:len(Ts) // 2 + 1], Ts[len(Ts) // 2 + 1:]
        parts = ["t(T) small", "tg", "t(T) large", "pp"]
        if backend == "cuda":
            # Side by side: the warp kernels with float products (FAFO_CUDA_KERNELS=warp), the fast
            # kernels with each step a CUDA graph (FAFO_CUDA_GRAPHS=1), and the wide steps' integer
            # products with blocks of 16 and 32 tokens (FAFO_CUDA_WIDE_TOKENS; 64 by default).
            parts[1:1] = ["warp t(T)", "graphs t(T)", "wide16 t(T)", "wide32 t(T)"]
        elif backend == "vulkan":
            # Side by side: float products for every format (FAFO_VULKAN_INT8=0; the default on
            # GPUs is integer products for Q4_K, Q5_K, Q6_K and Q8_0 weights), and the wide
            # steps' integer products without matrix tiles (FAFO_VULKAN_TILES=0; the default
            # takes them where the device has 8-bit cooperative matrices), and attention by one
            # head per workgroup (FAFO_VULKAN_ATTENTION=workgroup; the default groups a KV head's
            # heads and a tile of rows for steps of several rows).
            parts[1:1] = ["float t(T)", "split t(T)", "heads t(T)"]
        if profile:
            parts = ["profile"]
        costs: dict[int, float] = {}  # T -> seconds per step, from the small curve
        overhead = 10.0  # seconds to load the model and prefill the curve's context, until measured
        for name in parts:
            if r.left() < 10:
                lines.append(f"- {label} {name}: skipped (budget)")
                status = "timed out"
                continue
            share = r.left() * {"t(T) small": 0.4, "warp t(T)": 0.2, "graphs t(T)": 0.2, "wide16 t(T)": 0.2, "wide32 t(T)": 0.2,
                             "float t(T)": 0.2, "split t(T)": 0.2, "heads t(T)": 0.2, "tg": 0.45,
                             "t(T) large": 0.6}.get(name, 1.0)
            if name == "profile":
                extra = ["--pp", "0", "--tg", "0", "--curve", "", "-r", "1", "--profile",
                         "--profile-tokens", "8" if r.quick else "64"]
            elif name == "t(T) small":
                extra = ["--pp", "0", "--tg", "0", "--curve", ",".join(map(str, small)), "-r", "1"]
            elif name in ("warp t(T)", "graphs t(T)", "float t(T)"):
                extra = ["--pp", "0", "--tg", "0", "--curve", "1,8", "-r", "1"]
            elif name in ("wide16 t(T)", "wide32 t(T)", "split t(T)", "heads t(T)"):
                extra = ["--pp", "0", "--tg", "0", "--curve", "16,64" if kind == "Q4_K_M" else "16", "-r", "1"]
            elif name == "tg":
                n, k = tg, int(reps)
                t1 = costs.get(1, 0.0)
                while overhead + n * k * t1 > share and (k > 1 or n > 16):
                    if k > 1:
                        k = 1
                    else:
                        n //= 2
                if (n, k) != (tg, int(reps)):
                    lines.append(f"- {label}: tg{n} × {k} (tg{tg} × {reps} would need ~{overhead + tg * int(reps) * t1:.0f} s "
                                 f"at t(1) = {t1 * 1e3:.0f} ms; {share:.0f} s were its share)")
                extra = ["--pp", "0", "--tg", str(n), "--curve", "", "-r", str(k)]
            elif name == "t(T) large":
                per_token = costs[max(costs)] / max(costs) if costs else 0.0  # the widest small step's
                keep, total = [], overhead
                for t in large:
                    total += 3 * t * per_token
                    if total > share:
                        break
                    keep.append(t)
                if len(keep) < len(large):
                    dropped = ",".join(map(str, large[len(keep):]))
                    lines.append(f"- {label}: t(T) at T = {dropped} not measured (~{3 * per_token:.2f} s per row a step "
                                 f"needs more than the {share:.0f} s share)")
                if not keep:
                    continue
                extra = ["--pp", "0", "--tg", "0", "--curve", ",".join(map(str, keep)), "-r", "1"]
            else:  # pp
                n, k = pp, int(reps)
                per_token = costs[max(costs)] / max(costs) if costs else 0.0
                while overhead + n * k * per_token > share and (k > 1 or n > 64):
                    if k > 1:
                        k = 1
                    else:
                        n //= 2
                if (n, k) != (pp, int(reps)):
                    lines.append(f"- {label}: pp{n} × {k} (pp{pp} × {reps} would need ~{overhead + pp * int(reps) * per_token:.0f} s; "
                                 f"{share:.0f} s were left)")
                extra = ["--pp", str(n), "--tg", "0", "--curve", "", "-r", str(k)]
            t0 = time.monotonic()
            kernel_set = {"warp t(T)": "warp", "graphs t(T)": "graphs", "wide16 t(T)": "wide16",
                          "wide32 t(T)": "wide32", "float t(T)": "float", "split t(T)": "split", "heads t(T)": "heads"}.get(name)
            env = None
            if kernel_set == "float":
                env = dict(r.env, FAFO_VULKAN_INT8="0")
            elif kernel_set == "split":
                env = dict(r.env, FAFO_VULKAN_TILES="0")
            elif kernel_set == "heads":
                env = dict(r.env, FAFO_VULKAN_ATTENTION="workgroup")
            elif kernel_set == "graphs":
                env = dict(r.env, FAFO_CUDA_GRAPHS="1")
            elif kernel_set in ("wide16", "wide32"):
                env = dict(r.env, FAFO_CUDA_WIDE_TOKENS=kernel_set[4:])
            elif kernel_set:
                env = dict(r.env, FAFO_CUDA_KERNELS=kernel_set)
            code, text = r.run(base + extra, max(10.0, share), f"bench {kind} {label} {name}", env=env)
            if code is None:
                lines.append(f"- {label} {name}: **timed out**")
                status = "timed out"
                continue
            try:
                j = bench_json(text)
            except ValueError:
                lines.append(f"- {label} {name}: **failed** (exit {code})\n\n{tail(text)}")
                status = f"FAILED: {label} {name}"
                continue
            entry = (store.setdefault(f"{label} {kernel_set}", {"device": store[label]["device"]}) if kernel_set
                     else store[label])
            entry["description"] = j.get("description", entry.get("description", ""))
            for key in ("pp", "tg"):
                if j.get(key):
                    entry[key] = j[key]
            if name == "t(T) small" and j.get("step_cost"):  # (the warp kernels' costs size the rest)
                costs = {c["T"]: c["ms"] / 1e3 for c in j["step_cost"]}
                overhead = max(1.0, time.monotonic() - t0 - 3 * sum(costs.values()))
            if j.get("step_cost"):
                earlier = [c for c in entry.get("step_cost", []) if c["T"] not in {p["T"] for p in j["step_cost"]}]
                entry["step_cost"] = sorted(earlier + j["step_cost"], key=lambda c: c["T"])
            if profile and j.get("profile"):
                entry["profile"] = j["profile"]
                at = text.find("profile of a")
                entry["profile_text"] = text[at:text.find("\n{", at)].strip() if at >= 0 else ""
            if j.get("error"):
                lines.append(f"- {label} {name}: **error**: {j['error']}")
                status = f"FAILED: {label} {name}"
    for label, e in store.items():
        if not label.startswith(backend + ":"):
            continue
        lines.append(f"\n**{label}**: {e.get('description') or e.get('device')}\n")
        if e.get("pp"):
            lines.append(f"- pp{e['pp']['tokens']}: {e['pp']['tokens_per_s']:.1f} ± {e['pp']['sd']:.1f} tokens/s")
        if e.get("tg"):
            tg = e["tg"]
            lines.append(f"- tg{tg['tokens']}: {tg['tokens_per_s']:.2f} ± {tg['sd']:.2f} tokens/s, "
                         f"{tg.get('weight_bytes_per_token', 0) / 1e9:.3f} GB of weights per token, "
                         f"{tg.get('effective_gb_per_s', 0):.1f} GB/s")
        if e.get("step_cost"):
            t1 = next((p["ms"] for p in e["step_cost"] if p["T"] == 1), None)
            lines.append("\n| T | ms per step | ms per token | vs T=1 |\n|---:|---:|---:|---:|")
            for p in e["step_cost"]:
                ratio = f"{p['ms'] / t1:.2f}×" if t1 else ""
                lines.append(f"| {p['T']} | {p['ms']:.2f} ± {p.get('sd', 0):.2f} | {p['ms'] / p['T']:.3f} | {ratio} |")
        if profile and e.get("profile_text"):
            lines.append("\n" + e["profile_text"])
    return status, "\n".join(lines)


def step_profile(r: Run) -> tuple[str, str]:
    """Per-kernel device time at 8B Q4_K_M: cuda (events around each launch, the warp
    kernels) first, then Vulkan (timestamp queries)."""
    bodies, statuses = [], []
    for backend in ("cuda", "vulkan"):
        s, b = bench_model(r, backend, "Q4_K_M", f"profile_{backend}", profile=True)
        bodies.append(b)
        statuses.append(s)
    status = next((s for s in statuses if s.startswith("FAILED")), None) or \
        next((s for s in statuses if s == "timed out"), None) or "ok"
    return status, "\n\n".join(bodies)


def step_f16(r: Run) -> tuple[str, str]:
    bodies, statuses = [], []
    for backend in ("cuda", "vulkan"):
        s, b = bench_model(r, backend, "F16", "bench_f16")
        bodies.append(b)
        statuses.append(s)
    status = next((s for s in statuses if s.startswith("FAILED")), None) or \
        next((s for s in statuses if s == "timed out"), None) or "ok"
    return status, "\n\n".join(bodies)


# ---- the peers: PyTorch (cuBLAS) and llama.cpp (llama-bench) on the same GPU -------------------

# The FAFO paper's tau (tokens per step) for Llama-3-8B-Instruct on MT-Bench, greedy, batch 1
# (seeds/000): FAFO-Stream 2.12 and Lookahead 2.01, measured there at 1.58x and 1.49x of plain
# decoding on an A100.
PAPER_TAU = {"fafo": 2.12, "lookahead": 2.01}
LLAMA_BUILDS = ("cuda", "vulkan", "cpu")  # PEERS/llama-<name>/llama-bench


def curve_at(points: list[dict], T: int) -> float | None:
    """t(T) in ms from a step-cost curve ([{"T", "ms"}]), linear between measured sizes;
    None outside them (never extrapolated)."""
    pts = sorted((int(p["T"]), float(p["ms"])) for p in points)
    for (a, ta), (b, tb) in zip(pts, pts[1:] + [(None, None)]):
        if a == T:
            return ta
        if b is not None and a < T < b:
            return ta + (tb - ta) * (T - a) / (b - a)
    return None


def curve_ratio(points: list[dict], T: int) -> float | None:
    """t(T)/t(1), or None where either is not measured."""
    t1, tT = curve_at(points, 1), curve_at(points, T)
    return tT / t1 if t1 and tT is not None else None


def fmt(value: float | None, spec: str = ".2f", suffix: str = "") -> str:
    return "n/a" if value is None else f"{value:{spec}}{suffix}"


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def step_peer_torch(r: Run) -> tuple[str, str]:
    """PyTorch's products of the 8B shapes in bf16 through cuBLAS, a CUDA graph a step."""
    script = r.root / "peer" / "torch_steps.py"
    if not shutil.which("nvidia-smi"):
        return "skipped: no NVIDIA GPU", "PyTorch's peer runs through CUDA; this machine has no nvidia-smi."
    argv = [shutil.which("python3") or "python3", str(script), "--device", "cuda"]
    if r.quick:
        argv += ["--layers", "2", "--steps", "1,8", "--tg", "16", "--rounds", "3"]
    code, text = r.run(argv, r.left(), "PyTorch peer", env=dict(os.environ))
    try:
        j = bench_json(text)
    except ValueError:
        if code == 3:  # no PyTorch, or it sees no CUDA device
            return f"skipped: {text.strip().splitlines()[-1] if text.strip() else 'no PyTorch'}", tail(text)
        return ("timed out" if code is None else f"FAILED: exit {code}"), tail(text)
    r.results["peer_torch"] = j
    copy = r.results.get("copy_gbps")
    lines = [f"PyTorch {j['torch']} (CUDA {j.get('cuda')}) on {j['device']}: the {j['shape']} products "
             f"({j['layers']} layers: QKV, O, gate+up, down; the output head), {j['dtype']} weights, "
             f"{j['weight_bytes_per_token'] / 1e9:.3f} GB a token, "
             f"{'a CUDA graph a step' if j.get('graphs') else 'kernels launched one by one'}; "
             "attention is left out (`peer/torch_steps.py`).", ""]
    if j.get("tg"):
        tg = j["tg"]
        share = f", {100 * tg['effective_gb_per_s'] / copy:.0f}% of the copy bandwidth" if copy else ""
        lines.append(f"- tg{tg['tokens']}: {tg['tokens_per_s']:.2f} ± {tg['sd']:.2f} tokens/s, "
                     f"{tg['effective_gb_per_s']:.1f} GB/s of weights{share}")
    if j.get("step_cost"):
        lines += ["", "| T | ms per step | ms per token | vs T=1 |", "|---:|---:|---:|---:|"]
        for p in j["step_cost"]:
            lines.append(f"| {p['T']} | {p['ms']:.3f} ± {p['sd']:.3f} | {p['ms'] / p['T']:.4f} | "
                         f"{fmt(curve_ratio(j['step_cost'], p['T']), '.2f', '×')} |")
    status = "ok" if code == 0 else "timed out" if code is None else f"FAILED: exit {code}"
    return status, "\n".join(lines)


def parse_llama_bench(text: str) -> list[dict]:
    """The records of `llama-bench -o json` (one JSON array on its stdout)."""
    at = text.find("[")
    if at < 0:
        raise ValueError("no JSON array in llama-bench's output")
    records = json.loads(text[at:])
    if not isinstance(records, list) or not all(isinstance(x, dict) for x in records):
        raise ValueError("llama-bench's JSON is not a list of records")
    return records


def llama_summary(records: list[dict]) -> dict:
    """pp (the largest prompt), tg and the step-cost curve (a prompt of T tokens in one batch:
    t(T) = its time) from llama-bench's records."""
    out: dict = {"step_cost": []}
    for rec in records:
        for key in ("build_commit", "build_number", "backends", "gpu_info", "cpu_info", "model_type", "n_gpu_layers",
                    "flash_attn", "n_ubatch"):
            if key in rec:
                out.setdefault(key, rec[key])
        n_prompt, n_gen = int(rec.get("n_prompt", 0)), int(rec.get("n_gen", 0))
        if n_prompt > 0 and n_gen == 0:
            out["step_cost"].append({"T": n_prompt, "ms": rec["avg_ns"] / 1e6, "sd": rec.get("stddev_ns", 0) / 1e6})
            if n_prompt >= out.get("pp", {}).get("tokens", 0):
                out["pp"] = {"tokens": n_prompt, "tokens_per_s": rec["avg_ts"], "sd": rec.get("stddev_ts", 0.0)}
        elif n_gen > 0 and n_prompt == 0:
            out["tg"] = {"tokens": n_gen, "tokens_per_s": rec["avg_ts"], "sd": rec.get("stddev_ts", 0.0)}
    out["step_cost"].sort(key=lambda p: p["T"])
    return out


def llama_builds(r: Run) -> list[tuple[str, Path]]:
    if not r.peers:
        return []
    return [(name, r.peers / f"llama-{name}" / "llama-bench") for name in LLAMA_BUILDS
            if os.access(r.peers / f"llama-{name}" / "llama-bench", os.X_OK)]


def llama_env(r: Run, name: str, folder: Path) -> dict:
    """The build's own libraries first; for Vulkan, the driver files fafo used (its EGL ICD
    file where NVIDIA's GLX one gives no instance: docs/gpu-run.md)."""
    env = dict(r.env)
    env["LD_LIBRARY_PATH"] = ":".join(p for p in (str(folder), str(folder / "lib"), env.get("LD_LIBRARY_PATH", "")) if p)
    if name == "vulkan" and not env.get("VK_DRIVER_FILES"):
        written = sorted(str(p) for p in (r.work / "cache" / "vulkan").glob("*.json"))
        if written:
            env["VK_DRIVER_FILES"] = env["VK_ICD_FILENAMES"] = ":".join(written)
    return env


def step_peer_llama(r: Run) -> tuple[str, str]:
    """llama.cpp's llama-bench on the same 8B Q4_K_M file, each build found in --peers."""
    builds = llama_builds(r)
    if not builds:
        where = f"{r.peers}/llama-{{{','.join(LLAMA_BUILDS)}}}/llama-bench" if r.peers else "no --peers folder given"
        return "skipped: no llama-bench", f"No llama.cpp build found ({where}); docs/gpu-run.md says what to carry."
    path, why = r.wait_model("Q4_K_M", r.left() - 10)
    if path is None:
        return ("timed out" if "still writing" in why else f"FAILED: {why}"), f"No Q4_K_M file: {why}"
    prompts, gen, reps = ("64,1,8", "16", "1") if r.quick else ("512,1,2,4,8,16,32,64,128,256", "128", "2")
    lines, status = [], "ok"
    store = r.results.setdefault("peer_llama", {})
    for i, (name, exe) in enumerate(builds):
        share = r.left() / (len(builds) - i)
        if share < 10:
            lines.append(f"- llama.cpp {name}: skipped ({r.left():.0f} s left)")
            status = "timed out"
            continue
        argv = [str(exe), "-m", str(path), "-ngl", "99", "-p", prompts, "-n", gen, "-r", reps, "-o", "json"]
        out_file = r.work / f"llama-bench-{name}.json"
        out_file.unlink(missing_ok=True)
        code, text = r.run(argv, share, f"llama-bench {name}", env=llama_env(r, name, exe.parent), stdout=out_file)
        stdout = out_file.read_text(errors="replace") if out_file.exists() else ""
        r.log.write(stdout)
        try:
            summary = llama_summary(parse_llama_bench(stdout))
        except ValueError as e:
            lines.append(f"- llama.cpp {name}: **{'timed out' if code is None else f'failed (exit {code})'}**: {e}\n\n{tail(text)}")
            status = "timed out" if code is None and status == "ok" else f"FAILED: llama.cpp {name}"
            continue
        store[name] = summary
        lines.append(f"\n**llama.cpp {name}**: build {summary.get('build_commit', '?')} "
                     f"(#{summary.get('build_number', '?')}), backends {summary.get('backends', '?')}, "
                     f"{summary.get('gpu_info') or summary.get('cpu_info', '')}, -ngl {summary.get('n_gpu_layers', '?')}, "
                     f"flash attention {summary.get('flash_attn', '?')}\n")
        if summary.get("pp"):
            lines.append(f"- pp{summary['pp']['tokens']}: {summary['pp']['tokens_per_s']:.1f} ± {summary['pp']['sd']:.1f} tokens/s")
        if summary.get("tg"):
            lines.append(f"- tg{summary['tg']['tokens']}: {summary['tg']['tokens_per_s']:.2f} ± {summary['tg']['sd']:.2f} tokens/s")
        if summary["step_cost"]:
            lines += ["", "t(T): a prompt of T tokens in one batch (from an empty cache)", "",
                      "| T | ms per step | ms per token | vs T=1 |", "|---:|---:|---:|---:|"]
            for p in summary["step_cost"]:
                lines.append(f"| {p['T']} | {p['ms']:.2f} ± {p['sd']:.2f} | {p['ms'] / p['T']:.3f} | "
                             f"{fmt(curve_ratio(summary['step_cost'], p['T']), '.2f', '×')} |")
        if code is None:
            status = "timed out" if status == "ok" else status
            lines.append(f"- llama.cpp {name}: **timed out** (the rows above finished)")
        elif code != 0:
            status = f"FAILED: llama.cpp {name} exit {code}"
            lines.append(f"- llama.cpp {name}: **exit {code}**\n\n{tail(text)}")
    return status, "\n".join(lines)


# fafo's backends and the llama.cpp build that uses the same API
PEER_OF = {"cuda": "cuda", "vulkan": "vulkan"}


def engine_rows(results: dict) -> list[dict]:
    """Every engine measured on the 8B Q4_K_M file (and PyTorch's bf16 products): label,
    tg, pp, curve, weight bytes a token."""
    rows = []
    q4 = results.get("bench_q4", {})
    fafo_bytes = next((e["tg"].get("weight_bytes_per_token") for e in q4.values() if e.get("tg")), None)
    for label, e in sorted(q4.items()):
        if " " in label:  # the side-by-side kernel sets ("cuda:0 warp")
            continue
        rows.append({"engine": "fafo", "label": label, "backend": label.split(":")[0], "file": "Q4_K_M",
                     "tg": e.get("tg", {}).get("tokens_per_s"), "pp": e.get("pp", {}).get("tokens_per_s"),
                     "curve": e.get("step_cost", []), "bytes": fafo_bytes})
    for name, e in sorted(results.get("peer_llama", {}).items()):
        rows.append({"engine": "llama.cpp", "label": f"llama.cpp {name}", "backend": name, "file": "Q4_K_M",
                     "tg": e.get("tg", {}).get("tokens_per_s"), "pp": e.get("pp", {}).get("tokens_per_s"),
                     "curve": e.get("step_cost", []), "bytes": fafo_bytes})
    t = results.get("peer_torch")
    if t:
        rows.append({"engine": "PyTorch", "label": "PyTorch cuBLAS", "backend": "cuda", "file": f"{t['dtype']} products",
                     "tg": t.get("tg", {}).get("tokens_per_s"), "pp": None, "curve": t.get("step_cost", []),
                     "bytes": t.get("weight_bytes_per_token")})
    return rows


def side_by_side(results: dict) -> str:
    """The summary a note copies: every engine's figures, fafo over each peer, and each
    strategy's speedup at 8B projected from the curves (tau x t(1) / t(T))."""
    copy = results.get("copy_gbps")
    rows = engine_rows(results)
    lines = ["Every engine on this GPU, 8B shapes (fafo and llama.cpp: the same Q4_K_M file; PyTorch: the "
             "same products with 16-bit weights):", "",
             "| engine | device | weights | tg tokens/s | pp tokens/s | t(8)/t(1) | t(64)/t(1) | weight GB/s in tg | % of copy |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for e in rows:
        gbps = e["tg"] * e["bytes"] / 1e9 if e["tg"] and e["bytes"] else None
        lines.append(f"| {e['engine']} | {e['label']} | {e['file']} | {fmt(e['tg'])} | {fmt(e['pp'], '.1f')} | "
                     f"{fmt(curve_ratio(e['curve'], 8), '.2f', '×')} | {fmt(curve_ratio(e['curve'], 64), '.2f', '×')} | "
                     f"{fmt(gbps, '.1f')} | {fmt(ratio(gbps, copy) and 100 * ratio(gbps, copy), '.0f', '%')} |")
    if not rows:
        lines.append("| (nothing measured) | | | | | | | | |")
    lines += ["", "fafo over each peer (tg and pp: above 1 is fafo faster; t(T)/t(1): above 1 is fafo's curve steeper; "
              "against PyTorch, tg compares weight GB/s, since its weights are 16-bit):", "",
              "| fafo | peer | tg | pp | t(8)/t(1) | t(64)/t(1) |", "|---|---|---:|---:|---:|---:|"]
    compared = False
    for f in (e for e in rows if e["engine"] == "fafo"):
        for p in rows:
            if p["engine"] == "llama.cpp" and p["backend"] == PEER_OF.get(f["backend"]):
                tg = ratio(f["tg"], p["tg"])
            elif p["engine"] == "PyTorch":
                tg = ratio(f["tg"] and f["bytes"] and f["tg"] * f["bytes"], p["tg"] and p["bytes"] and p["tg"] * p["bytes"])
            else:
                continue
            compared = True
            lines.append(f"| {f['label']} | {p['label']} | {fmt(tg, '.2f', '×')} | {fmt(ratio(f['pp'], p['pp']), '.2f', '×')} | "
                         f"{fmt(ratio(curve_ratio(f['curve'], 8), curve_ratio(p['curve'], 8)), '.2f', '×')} | "
                         f"{fmt(ratio(curve_ratio(f['curve'], 64), curve_ratio(p['curve'], 64)), '.2f', '×')} |")
    if not compared:
        lines.append("| (no peer measured) | | | | | |")
    lines += ["", projections(results, rows)]
    return "\n".join(lines)


def projections(results: dict, rows: list[dict]) -> str:
    """Each strategy's speedup over plain decoding at 8B, projected: tau x t(1) / t(T) at the
    strategy's step size T, with tau measured on stories260K in this run and with the FAFO
    paper's tau for Llama-3-8B on MT-Bench."""
    taus: dict[str, dict] = {}  # strategy -> its row (tau, step_tokens) from the first device that ran it
    for device in results.get("strategies", []):
        for row in device.get("strategies", []):
            taus.setdefault(row["strategy"], row)
    lines = ["**Projections, not measurements**: the 8B file's weights are random, so its own tau means nothing. "
             "Speedup over plain decoding = tau × t(1) / t(T), T the most tokens a step of the strategy holds, "
             "t from each engine's 8B curve above (linear between measured sizes); tau from stories260K in this run "
             "(step 6) and from the FAFO paper (Llama-3-8B-Instruct, MT-Bench: FAFO-Stream 2.12, Lookahead 2.01; "
             "1.58× and 1.49× measured there on an A100).", "",
             "| curve | strategy | T | t(T)/t(1) | tau here | projected | tau paper | projected |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    any_row = False
    for e in rows:
        for name, row in taus.items():
            T = row.get("step_tokens") or 0
            if name == "ar" or T < 2:
                continue
            rel = curve_ratio(e["curve"], T)
            paper = PAPER_TAU.get(name)
            any_row = True
            lines.append(f"| {e['label']} | {name} | {T} | {fmt(rel, '.2f', '×')} | {row['tau']:.2f} | "
                         f"{fmt(rel and row['tau'] / rel, '.2f', '×')} | {fmt(paper)} | "
                         f"{fmt(rel and paper and paper / rel, '.2f', '×')} |")
    if not any_row:
        lines.append("| (no strategy tau or no 8B curve measured) | | | | | | | |")
    return "\n".join(lines)


def step_side_by_side(r: Run) -> tuple[str, str]:
    return "ok", side_by_side(r.results)


def step_roofline(r: Run) -> tuple[str, str]:
    copy = r.results.get("copy_gbps")
    torch_peer = r.results.get("peer_torch", {})
    torch_gbps = torch_peer.get("tg", {}).get("effective_gb_per_s")
    lines = ["| model | device | tg tokens/s | weight GB/s | % of copy bandwidth | tg roof (tokens/s) | ÷ PyTorch's GB/s |",
             "|---|---|---:|---:|---:|---:|---:|"]
    any_row = False
    for key, kind in (("bench_q4", "Q4_K_M"), ("bench_f16", "F16"), ("peer_llama", "Q4_K_M")):
        model = r.model_path(kind).name
        bytes_q4 = next((e["tg"].get("weight_bytes_per_token", 0) for e in r.results.get("bench_q4", {}).values()
                         if e.get("tg")), 0)
        for label, e in r.results.get(key, {}).items():
            if not e.get("tg"):
                continue
            any_row = True
            tg = e["tg"]["tokens_per_s"]
            # llama.cpp reads the bytes fafo reads from the same file
            bytes_per_token = bytes_q4 if key == "peer_llama" else e["tg"].get("weight_bytes_per_token", 0)
            gbps = tg * bytes_per_token / 1e9
            share = f"{100 * gbps / copy:.0f}%" if copy else "n/a"
            roof = f"{copy * 1e9 / bytes_per_token:.0f}" if copy and bytes_per_token else "n/a"
            device = f"llama.cpp {label}" if key == "peer_llama" else label
            lines.append(f"| {model} | {device} | {tg:.2f} | {gbps:.1f} | {share} | {roof} | "
                         f"{fmt(ratio(gbps, torch_gbps), '.2f', '×')} |")
    if torch_gbps:
        any_row = True
        tg = torch_peer["tg"]["tokens_per_s"]
        b = torch_peer["weight_bytes_per_token"]
        lines.append(f"| PyTorch {torch_peer['dtype']} products | {torch_peer['device']} | {tg:.2f} | {torch_gbps:.1f} | "
                     f"{f'{100 * torch_gbps / copy:.0f}%' if copy else 'n/a'} | "
                     f"{f'{copy * 1e9 / b:.0f}' if copy else 'n/a'} | 1.00× |")
    if not any_row:
        lines.append("| (no tg measured) | | | | | | |")
    lines.append("")
    lines.append(f"Copy bandwidth: {f'{copy:.0f} GB/s' if copy else 'not measured (step 1)'}; the roof is that "
                 "bandwidth over the weight bytes one token reads. The last column: weight GB/s in tg over "
                 "PyTorch's (cuBLAS, 16-bit weights of the same shapes, step 7c)"
                 f"{'' if torch_gbps else ': not measured'}.")
    return "ok", "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(prog="gpu-run.sh", description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", type=float, default=420.0, help="seconds for the whole run (default 420)")
    parser.add_argument("--quick", action="store_true", help="small sizes: a 2-layer 8B-shaped file, pp64, tg16, curve 1,8")
    parser.add_argument("--tiny", action="store_true",
                        help="--quick with a toy model (dim 256) for the benches: the rehearsal on a machine without a GPU, "
                             "whose CPU Vulkan driver (lavapipe) reads an 8B-shaped layer at ~0.2 GB/s")
    parser.add_argument("--steps", help=f"only these steps, comma-separated: {','.join(STEPS)}")
    parser.add_argument("--peers", default=os.environ.get("FAFO_PEERS") or ("gpu-check/peers" if os.path.isdir("gpu-check/peers") else None),
                        help="a folder of peer builds: llama-cuda/llama-bench, llama-vulkan/llama-bench (each with its "
                             "libraries beside it); default $FAFO_PEERS, else ./gpu-check/peers where it exists")
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
    root = Path(__file__).resolve().parent
    if not (root / "bin" / "fafo").exists():
        print(f"gpu-run: {root}/bin/fafo not found: run the gpu-run.sh of an unpacked bundle (tools/gpu-bundle.sh makes one)",
              file=sys.stderr)
        return 1

    r = Run(args)
    # A SIGTERM (the machine's own timeout) still writes the report and stops the children.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    needs_q4 = any(s in args.steps for s in ("synth", "bench-cuda", "bench-vulkan", "profile"))
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
        "roofline": step_roofline,
        "side-by-side": step_side_by_side,
    }
    minimum = {"env": 5, "synth": 5, "devices": 5, "conformance": 30, "greedy": 10, "strategies": 15,
               "bench-cuda": 30, "bench-vulkan": 30, "peer-torch": 20, "peer-llama": 20, "f16": 60, "profile": 20,
               "roofline": 0, "side-by-side": 0}
    # The most a step may take of a 420 s budget (scaled with larger budgets), so that
    # one slow step leaves time for the 8B benches after it.
    cap = {"env": 60, "synth": 300, "devices": 30, "conformance": 120, "greedy": 60, "strategies": 45,
           "bench-cuda": 100, "bench-vulkan": 100, "peer-torch": 60, "peer-llama": 90, "f16": 300, "profile": 40,
           "roofline": 10, "side-by-side": 10}
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
