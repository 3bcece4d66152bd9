"""The GPU run's mixture-of-experts step: a Qwen3-30B-A3B-shaped Q4_K_M file (8 of its 48
layers, each with all 128 experts of 768, 8 per token; 2 layers with --quick, the toy
qwen3moe-tiny with --tiny), written here by fafo-synth, then `fafo bench` on the first
device of each GPU backend: pp, tg, and the step cost t(T) with the experts a step runs
per layer (a step's rows route to different experts: the MoE step-cost curve). Each
MoE layer reads its router's logits back inside the step (Backend::sync_step): this
step prices that. Then gpt-oss-tiny (MXFP4 experts with biases and the clamped SwiGLU,
attention sinks, a window of 16, YaRN), greedy for 40 tokens with every strategy on each
GPU backend: each strategy's text must be the cpu backend's plain decoding's."""
from __future__ import annotations

from common import bench_json, tail
from peers import fmt
from run import Run


def moe_shape(r: Run) -> tuple[str, list[str]]:
    """The file's name and fafo-synth's arguments for it."""
    if r.tiny:
        return "qwen3moe-tiny.gguf", ["--preset", "qwen3moe-tiny", "-t", "Q4_K_M"]
    if r.quick:
        return "qwen3-30b-a3b-2layers.gguf", ["--preset", "qwen3-30b-a3b", "--layers", "2", "--vocab", "32000"]
    return "qwen3-30b-a3b-8layers.gguf", ["--preset", "qwen3-30b-a3b", "--layers", "8"]


GPT_OSS_STRATEGIES = ["ar", "jacobi", "lookahead", "fafo"]


def gpt_oss_greedy(r: Run, targets: list) -> tuple[bool, list[str]]:
    """gpt-oss-tiny's greedy texts on the GPU backends against the cpu backend's AR text."""
    path = r.work / "gpt-oss-tiny-mxfp4.gguf"
    if not path.exists():
        code, text = r.run([str(r.bin / "fafo-synth"), "--preset", "gpt-oss-tiny", "-t", "MXFP4_MOE", "-o", str(path)],
                           min(60.0, r.left()), "gpt-oss synth")
        if code != 0:
            return False, [f"- gpt-oss-tiny: **fafo-synth failed** (exit {code})", "", tail(text), ""]
    lines = ["gpt-oss-tiny (MXFP4_MOE), greedy, 40 tokens, each strategy against the cpu backend's plain decoding:", "",
             "| backend | " + " | ".join(GPT_OSS_STRATEGIES) + " |", "|---|" + "---|" * len(GPT_OSS_STRATEGIES)]
    want, ok = None, True
    for backend, d in [("cpu", None)] + targets:
        label = backend if d is None else f"{backend}:{d['index']}"
        cells = []
        for strategy in GPT_OSS_STRATEGIES if d is not None else ["ar"]:
            argv = [str(r.bin / "fafo"), "run", "-m", str(path), "-p", "a b c d e f g", "-n", "40", "--temp", "0",
                    "--ignore-eos", "--json", "--strategy", strategy, "--backend", backend]
            if d is not None:
                argv += ["--device", str(d["index"])]
            code, text = r.run(argv, min(60.0, r.left()), f"gpt-oss {label} {strategy}")
            try:
                got = bench_json(text).get("text")
            except ValueError:
                got = None
            if d is None:
                want = got
                cells.append("plain decoding" if got is not None else f"**failed (exit {code})**")
            else:
                same = got is not None and got == want
                cells.append("yes" if same else ("**no**" if got is not None else f"**failed (exit {code})**"))
            ok = ok and got is not None and got == want
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return ok, lines + [""]


def step_moe(r: Run) -> tuple[str, str]:
    targets = [(b, r.devices(b)[0]) for b in ("cuda", "vulkan") if r.devices(b)]
    if not targets:
        return "skipped: no GPU device", ""
    name, shape = moe_shape(r)
    path = r.work / name
    if not path.exists():
        code, text = r.run([str(r.bin / "fafo-synth"), *shape, "-o", str(path) + ".tmp"], r.left() / 3, "moe synth")
        if code != 0:
            return (f"FAILED: fafo-synth (exit {code})" if code is not None else "timed out"), tail(text)
        (r.work / (name + ".tmp")).rename(path)
    pp, tg, curve = ("32", "8", "1,8") if r.quick else ("128", "32", "1,2,4,8,16,32,64")
    lines = [f"`{name}` (fafo-synth {' '.join(shape)}): pp{pp}, tg{tg} and t(T) with the experts each step ran per layer.",
             ""]
    store = r.results.setdefault("moe", {})
    status = "ok"
    for k, (backend, d) in enumerate(targets):
        label = f"{backend}:{d['index']}"
        argv = [str(r.bin / "fafo"), "bench", "-m", str(path), "--backend", backend, "--device", str(d["index"]),
                "--pp", pp, "--tg", tg, "--curve", curve, "-r", "1", "--json"]
        code, text = r.run(argv, r.left() / (len(targets) - k), f"moe {label}")
        try:
            j = bench_json(text)
        except ValueError:
            lines += [f"- {label}: **{'timed out' if code is None else f'failed (exit {code})'}**", "", tail(text), ""]
            status = f"FAILED: {backend}" if code is not None else ("timed out" if status == "ok" else status)
            continue
        store[label] = j
        lines.append(f"**{label}** ({d['name']}): pp{pp} {fmt(j.get('pp', {}).get('tokens_per_s'), '.1f')} tokens/s, "
                     f"tg{tg} {fmt(j.get('tg', {}).get('tokens_per_s'), '.2f')} tokens/s")
        costs = j.get("step_cost", [])
        if costs:
            t1 = costs[0]["ms"]
            lines += ["", "| T | ms / step | t(T) / t(1) | experts / layer |", "|---:|---:|---:|---:|"]
            lines += [f"| {c['T']} | {c['ms']:.2f} | {c['ms'] / t1:.2f} | {c.get('experts_per_layer', 0):.1f} |"
                      for c in costs]
        lines.append("")
    same, more = gpt_oss_greedy(r, targets)
    lines += more
    if not same and status == "ok":
        status = "FAILED: gpt-oss-tiny's greedy texts differ"
    return status, "\n".join(lines)
