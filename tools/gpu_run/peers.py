"""The GPU run's peers on the same GPU: PyTorch's products through cuBLAS
(peer/torch_steps.py) and llama.cpp's llama-bench on the same 8B file, and the summary
that sets fafo beside them, with each strategy's speedup at 8B projected from the curves."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from common import NVIDIA_ICD, bench_json, tail
from run import Run

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
    """The records of `llama-bench -o json`: one JSON array on its stdout, each record
    printed when its test ends and the closing bracket at exit, so a run stopped by its
    time limit still gives the records it finished."""
    at = text.find("[")
    if at < 0:
        raise ValueError("no JSON array in llama-bench's output")
    decoder, records, at = json.JSONDecoder(), [], at + 1
    while True:
        while at < len(text) and text[at] in " \t\r\n,":
            at += 1
        if at >= len(text) or text[at] == "]":
            break
        try:
            record, at = decoder.raw_decode(text, at)
        except ValueError:
            break  # a record cut short
        if not isinstance(record, dict):
            raise ValueError("llama-bench's JSON is not a list of records")
        records.append(record)
    if not records:
        raise ValueError("no complete record in llama-bench's output")
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


def unpack_peers(r: Run, timeout: float) -> None:
    """--peers given as an archive (.tar.xz, .tar.gz, .tar: the carry to a GPU machine is
    64 MiB, and llama.cpp's CUDA libraries are large): unpacked into the work folder, once,
    before the steps (__main__.py), within `timeout` seconds."""
    if not r.peers or not r.peers.is_file():
        return
    archive, folder = r.peers, r.work / "peers"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    try:
        subprocess.run(["tar", "-xf", str(archive), "-C", str(folder)], check=True, capture_output=True,
                       timeout=max(1.0, timeout))
        # an archive of one folder named peers/ holds the builds one level down
        inner = folder / "peers"
        r.peers = inner if inner.is_dir() and not any((folder / f"llama-{b}").exists() for b in LLAMA_BUILDS) else folder
        r.results["peers_unpacked"] = f"{archive} unpacked into {r.peers}"
    except (OSError, subprocess.SubprocessError) as e:
        r.results["peers_unpacked"] = f"{archive} could not be unpacked: {e}"
        r.peers = None


def llama_builds(r: Run) -> list[tuple[str, Path]]:
    """The llama-bench builds in the --peers folder (unpack_peers has unpacked an archive)."""
    if not r.peers or not r.peers.is_dir():
        return []
    return [(name, r.peers / f"llama-{name}" / "llama-bench") for name in LLAMA_BUILDS
            if os.access(r.peers / f"llama-{name}" / "llama-bench", os.X_OK)]


def llama_env(r: Run, name: str, folder: Path) -> dict:
    """The build's own libraries first; for Vulkan, the driver file fafo wrote (its EGL ICD
    file, where NVIDIA's GLX one gives no instance: docs/gpu-run.md), else NVIDIA's ICD
    file where the machine has one outside the loader's folders."""
    env = dict(r.env)
    env["LD_LIBRARY_PATH"] = ":".join(p for p in (str(folder), str(folder / "lib"), env.get("LD_LIBRARY_PATH", "")) if p)
    if name == "vulkan" and not env.get("VK_DRIVER_FILES"):
        written = sorted(str(p) for p in (r.work / "cache" / "vulkan").glob("*.json"))
        if not written and os.path.exists(NVIDIA_ICD):
            written = [NVIDIA_ICD]
        if written:
            env["VK_DRIVER_FILES"] = env["VK_ICD_FILENAMES"] = ":".join(written)
    return env


def step_peer_llama(r: Run) -> tuple[str, str]:
    """llama.cpp's llama-bench on the same 8B Q4_K_M file, each build found in --peers."""
    builds = llama_builds(r)
    unpacked = r.results.get("peers_unpacked", "")
    if not builds:
        where = f"{r.peers}/llama-{{{','.join(LLAMA_BUILDS)}}}/llama-bench" if r.peers else "no --peers given"
        return "skipped: no llama-bench", (f"No llama.cpp build found ({where}); docs/gpu-run.md says what to carry."
                                           + (f" ({unpacked})" if unpacked else ""))
    path, why = r.wait_model("Q4_K_M", r.left() - 10)
    if path is None:
        return ("timed out" if "still writing" in why else f"FAILED: {why}"), f"No Q4_K_M file: {why}"
    prompts, gen, reps = ("64,1,8", "16", "1") if r.quick else ("512,1,2,4,8,16,32,64,128,256", "128", "2")
    lines, status = ([f"({unpacked})"] if unpacked else []), "ok"
    store = r.results.setdefault("peer_llama", {})
    for i, (name, exe) in enumerate(builds):
        share = r.left() / (len(builds) - i)
        if share < 10:
            lines.append(f"- llama.cpp {name}: skipped ({r.left():.0f} s left)")
            status = "timed out" if status == "ok" else status
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
            if code is not None:
                status = f"FAILED: llama.cpp {name}"
            elif status == "ok":
                status = "timed out"
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
