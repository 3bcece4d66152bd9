"""The GPU run's layer-split step: the 8B Q4_K_M file with a quarter, half and three
quarters of its layers on the first GPU device and the rest on the cpu backend
(`fafo bench --gpu-layers N`, each device's part of every step of t(T)), and llama.cpp's
llama-bench with the same `-ngl N` where a build of the same API was carried."""
from __future__ import annotations

from common import bench_json, tail
from peers import fmt, llama_builds, llama_env, llama_summary, parse_llama_bench, ratio
from run import Run


def split_counts(r: Run) -> list[int]:
    """Layers on the GPU: a quarter, half, three quarters of the 8B's 32 (the rehearsal's
    two-layer file: one)."""
    return [1] if r.quick else [8, 16, 24]


def step_split(r: Run) -> tuple[str, str]:
    d, path, why_not = r.first_gpu_and_q4()
    if d is None or path is None:
        return why_not
    label = f"{d['backend']}:{d['index']}"
    pp, tg, curve = ("16", "4", "1,8") if r.quick else ("128", "32", "1,8,64")
    counts = split_counts(r)
    llama = dict(llama_builds(r)).get(d["backend"])  # the peer build of the same API
    lines = [f"{path.name}: the last N layers on {label} ({d['name']}), the others on the cpu backend; "
             f"pp{pp}, tg{tg}, t(T) at {curve}; llama.cpp's `-ngl N` beside it"
             + ("" if llama else f" (no llama.cpp {d['backend']} build carried)") + ".", "",
             "| engine | N | pp t/s | tg t/s | t(1) ms | t(8) ms | t(64) ms | t(1) on the cpu / on the GPU, ms |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    status, notes = "ok", []
    store = r.results.setdefault("split", {})
    runs = len(counts) * (2 if llama else 1)
    for i, n in enumerate(counts):
        share = r.left() / max(1, runs - i * (2 if llama else 1))
        if share < 8:
            notes.append(f"- N = {n}: skipped ({r.left():.0f} s left)")
            status = "timed out" if status == "ok" else status
            continue
        argv = [str(r.bin / "fafo"), "bench", "-m", str(path), "--backend", d["backend"], "--device", str(d["index"]),
                "--gpu-layers", str(n), "--pp", pp, "--tg", tg, "--curve", curve, "-r", "1", "--json"]
        code, text = r.run(argv, share, f"split fafo {n}")
        try:
            j = bench_json(text)
        except ValueError:
            notes.append(f"- fafo N = {n}: **{'timed out' if code is None else f'failed (exit {code})'}**\n\n{tail(text)}")
            status = (f"FAILED: fafo --gpu-layers {n}" if code is not None else
                      ("timed out" if status == "ok" else status))
            continue
        store[f"fafo {n}"] = j
        cost = {p["T"]: p for p in j.get("step_cost", [])}
        parts = cost.get(1, {}).get("device_ms", [])
        lines.append(f"| fafo | {n} | {fmt(j.get('pp', {}).get('tokens_per_s'), '.1f')} | "
                     f"{fmt(j.get('tg', {}).get('tokens_per_s'), '.2f')} | "
                     + " | ".join(fmt(cost.get(T, {}).get("ms"), ".2f") for T in (1, 8, 64))
                     + f" | {' / '.join(f'{x:.2f}' for x in parts) or '-'} |")
        if not llama:
            continue
        out_file = r.work / f"llama-bench-split-{n}.json"
        out_file.unlink(missing_ok=True)
        argv = [str(llama), "-m", str(path), "-ngl", str(n), "-p", f"{pp},{curve}", "-n", tg, "-r", "1", "-o", "json"]
        code, text = r.run(argv, r.left() / max(1, runs - i * 2 - 1), f"split llama-bench {n}",
                           env=llama_env(r, d["backend"], llama.parent), stdout=out_file)
        try:
            s = llama_summary(parse_llama_bench(out_file.read_text(errors="replace") if out_file.exists() else ""))
        except ValueError as e:
            notes.append(f"- llama.cpp -ngl {n}: **{'timed out' if code is None else f'failed (exit {code})'}**: {e}")
            continue
        store[f"llama {n}"] = s
        lcost = {p["T"]: p for p in s.get("step_cost", [])}
        lines.append(f"| llama.cpp | {n} | {fmt(s.get('pp', {}).get('tokens_per_s'), '.1f')} | "
                     f"{fmt(s.get('tg', {}).get('tokens_per_s'), '.2f')} | "
                     + " | ".join(fmt(lcost.get(T, {}).get("ms"), ".2f") for T in (1, 8, 64)) + " | - |")
        tg_ratio = ratio(j.get("tg", {}).get("tokens_per_s"), s.get("tg", {}).get("tokens_per_s"))
        pp_ratio = ratio(j.get("pp", {}).get("tokens_per_s"), s.get("pp", {}).get("tokens_per_s"))
        notes.append(f"- N = {n}: fafo ÷ llama.cpp: tg {fmt(tg_ratio, '.2f', '×')}, pp {fmt(pp_ratio, '.2f', '×')}")
    return status, "\n".join(lines + [""] + notes)
