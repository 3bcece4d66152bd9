"""The GPU run's KV cache step: generation at a long context with each KV cache type
(`fafo bench --depth D --cache-type T`: f16, q8_0, q4_0) on the first GPU device (cuda
where found), and llama.cpp's llama-bench with the same `-d D -ctk T -ctv T -fa 1` where a
build of the same API was carried: the cache's memory per token, and tg at that depth."""
from __future__ import annotations

from common import bench_json, tail
from peers import fmt, llama_builds, llama_env, llama_summary, parse_llama_bench, ratio
from run import Run

KV_TYPES = ["f16", "q8_0", "q4_0"]


def step_kv(r: Run) -> tuple[str, str]:
    d, path, why_not = r.first_gpu_and_q4()
    if d is None or path is None:
        return why_not
    label = f"{d['backend']}:{d['index']}"
    depth, tg = ("64", "4") if r.quick else ("4096", "32")
    llama = dict(llama_builds(r)).get(d["backend"])  # the peer build of the same API
    lines = [f"{path.name} on {label} ({d['name']}): tg{tg} after {depth} tokens in the cache, by cache type; "
             f"llama.cpp's `-d {depth} -ctk T -ctv T -fa 1` beside it"
             + ("" if llama else f" (no llama.cpp {d['backend']} build carried)") + ".", "",
             "| engine | cache | KiB / token | tg t/s |", "|---|---|---:|---:|"]
    status, notes = "ok", []
    store = r.results.setdefault("kv", {})
    runs = len(KV_TYPES) * (2 if llama else 1)
    done = 0
    for kv in KV_TYPES:
        share = r.left() / max(1, runs - done)
        if share < 8:
            notes.append(f"- {kv}: skipped ({r.left():.0f} s left)")
            status = "timed out" if status == "ok" else status
            continue
        argv = [str(r.bin / "fafo"), "bench", "-m", str(path), "--backend", d["backend"], "--device", str(d["index"]),
                "--cache-type", kv, "--depth", depth, "--pp", "0", "--tg", tg, "--curve", "", "-r", "1", "--json"]
        code, text = r.run(argv, share, f"kv fafo {kv}")
        done += 1
        try:
            j = bench_json(text)
        except ValueError:
            notes.append(f"- fafo {kv}: **{'timed out' if code is None else f'failed (exit {code})'}**\n\n{tail(text)}")
            status = (f"FAILED: fafo --cache-type {kv}" if code is not None else
                      ("timed out" if status == "ok" else status))
            continue
        store[f"fafo {kv}"] = j
        per_token = j.get("kv_cache", {}).get("bytes_per_token")
        lines.append(f"| fafo | {kv} | {fmt(per_token / 1024 if per_token else None, '.1f')} | "
                     f"{fmt(j.get('tg', {}).get('tokens_per_s'), '.2f')} |")
        if not llama:
            continue
        out_file = r.work / f"llama-bench-kv-{kv}.json"
        out_file.unlink(missing_ok=True)
        argv = [str(llama), "-m", str(path), "-ngl", "99", "-d", depth, "-p", "0", "-n", tg, "-ctk", kv, "-ctv", kv,
                "-fa", "1", "-r", "1", "-o", "json"]
        code, text = r.run(argv, r.left() / max(1, runs - done), f"kv llama-bench {kv}",
                           env=llama_env(r, d["backend"], llama.parent), stdout=out_file)
        done += 1
        try:
            s = llama_summary(parse_llama_bench(out_file.read_text(errors="replace") if out_file.exists() else ""))
        except ValueError as e:
            notes.append(f"- llama.cpp {kv}: **{'timed out' if code is None else f'failed (exit {code})'}**: {e}")
            continue
        store[f"llama {kv}"] = s
        lines.append(f"| llama.cpp | {kv} | - | {fmt(s.get('tg', {}).get('tokens_per_s'), '.2f')} |")
        notes.append(f"- {kv}: fafo ÷ llama.cpp tg at depth {depth}: "
                     f"{fmt(ratio(j.get('tg', {}).get('tokens_per_s'), s.get('tg', {}).get('tokens_per_s')), '.2f', '×')}")
    return status, "\n".join(lines + [""] + notes)
