"""The GPU run's checks: the machine, the devices fafo finds (and why NVIDIA's Vulkan
driver gives none, where it does not), the op-conformance table and the greedy texts.
Each step returns (status, markdown body); status is "ok", "FAILED: why", "timed out"
or "skipped: why"."""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

from common import LOG_LIMIT, NVIDIA_ICD, bench_json, code_block, ldconfig_find, shell_out, tail
from run import Run

STRATEGIES = ["ar", "jacobi", "lookahead", "fafo", "auto"]

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
        if r.tiny:  # a rehearsal of the step on this machine, whose suite runs the whole table
            pattern = pattern.replace("EveryBackendAndDevice/*/", "EveryBackendAndDevice/BackendOps.RmsNorm/")
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
    if r.tiny:
        summary.append("- --tiny: the RmsNorm rows only (a rehearsal; the test suite runs the whole table)")
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
