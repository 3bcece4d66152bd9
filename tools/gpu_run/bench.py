"""The GPU run's measurements of fafo: the strategies side by side on stories260K, the
8B benches per backend (each part sized from the measured step costs to its share of the
time left), the kernel profile, the F16 file, and the roofline."""
from __future__ import annotations

import time

from common import bench_json, tail
from peers import fmt, ratio
from run import Run


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
            # GPUs is integer products for the block formats but Q2_K, IQ2 and IQ3), and the wide
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
