#!/usr/bin/env python3
"""The PyTorch peer: a model's layer products through the device's own BLAS.

What cuBLAS does with the bytes of a Llama-3-8B (by default) in 16-bit floats, so that
fafo's step costs and generation have a measured anchor on the same GPU:

- a step of T tokens: per layer the QKV product, the O product (of the step's Q part:
  attention itself is left out, it is a small share of a step at short contexts), the
  gate+up product, SwiGLU and the down product, each product after an RMS norm and
  added to the residual; then the output head. Weights are random normal (never zeros)
  in the chosen type, laid out [out, in] as checkpoints store them (F.linear: cuBLAS).
- t(T) for T = 1, 2, 4 ... 256: each size captured once as a CUDA graph and replayed, the
  median over rounds of a round's mean.
- a generation loop: one-token steps whose input is the embedding row of the previous
  step's argmax, all inside one graph, replayed for --tg tokens.

Prints a table as it goes and, after every part, a JSON object on its own line with
everything measured so far (the runner takes the last one, so a run cut short still
counts): {"peer": "pytorch", "weight_bytes_per_token", "tg": {...}, "step_cost": [...]}.

    torch_steps.py [--device cuda|cpu] [--dtype bf16|f16|f32] [--shape llama3-8b|tiny]
                   [--layers N] [--steps 1,2,4,...] [--tg N] [--rounds N]

Exit status 3 with one line when PyTorch or the device is missing.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

SHAPES = {
    # Llama-3-8B: 32 heads of 128, 8 KV heads, SwiGLU 14336, 128256 tokens.
    "llama3-8b": {"dim": 4096, "kv_dim": 1024, "ffn": 14336, "vocab": 128256, "layers": 32},
    # A toy of the same structure, for checking the script on a CPU.
    "tiny": {"dim": 256, "kv_dim": 64, "ffn": 768, "vocab": 1024, "layers": 2},
}
DEFAULT_STEPS = "1,2,4,8,16,32,64,128,256"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="torch_steps.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "f32"], help="the weights' type (default bf16)")
    p.add_argument("--shape", default="llama3-8b", choices=sorted(SHAPES), help="the model's shapes (default llama3-8b)")
    p.add_argument("--layers", type=int, help="layers (default: the shape's)")
    p.add_argument("--steps", default=DEFAULT_STEPS, help=f"step sizes T to time (default {DEFAULT_STEPS}; '' for none)")
    p.add_argument("--tg", type=int, default=128, help="tokens of the generation loop (default 128; 0: none)")
    p.add_argument("--rounds", type=int, default=5, help="timed rounds per figure, the median taken (default 5)")
    p.add_argument("--no-graphs", action="store_true", help="launch each step's kernels one by one (always so on a CPU)")
    a = p.parse_args(argv)
    try:
        a.steps = [int(t) for t in a.steps.split(",") if t.strip()]
    except ValueError:
        p.error(f"--steps: not a list of integers: {a.steps!r}")
    if any(t < 1 for t in a.steps):
        p.error("--steps: every size must be at least 1")
    if a.rounds < 1 or a.tg < 0 or (a.layers is not None and a.layers < 1):
        p.error("--rounds and --layers must be at least 1, --tg at least 0")
    return a


def median_sd(values: list[float]) -> tuple[float, float]:
    return statistics.median(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


class Peer:
    def __init__(self, torch, args: argparse.Namespace):
        self.torch = torch
        self.F = torch.nn.functional
        self.args = args
        shape = dict(SHAPES[args.shape])
        if args.layers:
            shape["layers"] = args.layers
        self.shape = shape
        self.device = torch.device(args.device)
        self.cuda = self.device.type == "cuda"
        self.graphs = self.cuda and not args.no_graphs
        self.dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[args.dtype]
        d, kv, f = shape["dim"], shape["kv_dim"], shape["ffn"]
        gen = torch.Generator(device=self.device)
        gen.manual_seed(1)

        def weight(rows: int, cols: int):
            return torch.empty(rows, cols, dtype=self.dtype, device=self.device).normal_(0.0, 0.02, generator=gen)

        self.layers = [{"qkv": weight(d + 2 * kv, d), "o": weight(d, d), "gate_up": weight(2 * f, d), "down": weight(d, f)}
                       for _ in range(shape["layers"])]
        self.head = weight(shape["vocab"], d)
        self.embedding = weight(shape["vocab"], d)  # one row a token: not counted among the bytes a token reads
        self.weight_bytes = sum(w.numel() * w.element_size() for layer in self.layers for w in layer.values()) + \
            self.head.numel() * self.head.element_size()

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def rms(self, x):
        return x * self.torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5).to(x.dtype)

    def step(self, x):
        """One forward pass of x's T rows: [T, dim] -> logits [T, vocab]."""
        d, f = self.shape["dim"], self.shape["ffn"]
        for layer in self.layers:
            qkv = self.F.linear(self.rms(x), layer["qkv"])
            x = x + self.F.linear(qkv[:, :d], layer["o"])
            gate_up = self.F.linear(self.rms(x), layer["gate_up"])
            x = x + self.F.linear(self.F.silu(gate_up[:, :f]) * gate_up[:, f:], layer["down"])
        return self.F.linear(self.rms(x), self.head)

    def runner(self, body):
        """A function that runs body() once: a replay of its CUDA graph, or body itself."""
        if not self.graphs:
            return body
        torch = self.torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up on a side stream, as capture requires
            for _ in range(2):
                body()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            body()
        return graph.replay

    def time_calls(self, run, calls: int) -> float:
        """Seconds for `calls` calls of run, the device finished before and after."""
        self.sync()
        if self.cuda:
            start, stop = self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                run()
            stop.record()
            stop.synchronize()
            return start.elapsed_time(stop) / 1e3
        t0 = time.perf_counter()
        for _ in range(calls):
            run()
        return time.perf_counter() - t0

    def step_cost(self, T: int) -> tuple[float, float]:
        """Seconds per step of T tokens: median and sd over rounds of about 50 ms each."""
        x = self.torch.randn(T, self.shape["dim"], dtype=self.dtype, device=self.device, generator=None)
        with self.torch.no_grad():
            run = self.runner(lambda: self.step(x))
            once = self.time_calls(run, 1)
            calls = max(1, min(200, int(0.05 / max(once, 1e-6))))
            per_step = [self.time_calls(run, calls) / calls for _ in range(self.args.rounds)]
        return median_sd(per_step)

    def generate(self, tokens: int) -> tuple[float, float]:
        """Tokens per second of a greedy loop: median and sd over rounds of `tokens` steps."""
        torch = self.torch
        token = torch.zeros(1, dtype=torch.long, device=self.device)

        def one_token():
            logits = self.step(self.embedding.index_select(0, token))
            token.copy_(logits.argmax(-1))

        with torch.no_grad():
            run = self.runner(one_token)
            self.time_calls(run, min(8, tokens))
            rates = [tokens / self.time_calls(run, tokens) for _ in range(self.args.rounds)]
        return median_sd(rates)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        import torch
    except ImportError as e:
        print(f"torch_steps: no PyTorch here ({e})", flush=True)
        return 3
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("torch_steps: no CUDA device visible to PyTorch", flush=True)
        return 3
    started = time.monotonic()
    try:
        peer = Peer(torch, args)
    except RuntimeError as e:  # out of memory, or a device PyTorch cannot use
        print(f"torch_steps: could not place the weights on {args.device}: {str(e).splitlines()[0]}", flush=True)
        return 1
    name = torch.cuda.get_device_name(peer.device) if peer.cuda else "cpu"
    result: dict = {
        "peer": "pytorch", "torch": torch.__version__, "cuda": torch.version.cuda, "device": name,
        "dtype": args.dtype, "shape": args.shape, "layers": peer.shape["layers"], "graphs": peer.graphs,
        "weight_bytes_per_token": peer.weight_bytes, "step_cost": [],
    }

    def report() -> None:
        result["seconds"] = round(time.monotonic() - started, 1)
        print(json.dumps(result), flush=True)

    print(f"PyTorch {torch.__version__} on {name}: {args.shape} x {peer.shape['layers']} layers, {args.dtype}, "
          f"{peer.weight_bytes / 1e9:.3f} GB of weights a token, "
          f"{'a CUDA graph per step' if peer.graphs else 'kernels launched one by one'}", flush=True)
    if args.tg:
        tps, sd = peer.generate(args.tg)
        result["tg"] = {"tokens": args.tg, "tokens_per_s": tps, "sd": sd,
                        "effective_gb_per_s": tps * peer.weight_bytes / 1e9}
        print(f"tg{args.tg}: {tps:.2f} +- {sd:.2f} tokens/s, {tps * peer.weight_bytes / 1e9:.1f} GB/s of weights", flush=True)
        report()
    if args.steps:
        print("| T | ms per step | ms per token | vs T=1 |", flush=True)
    t1 = None
    for T in args.steps:
        seconds, sd = peer.step_cost(T)
        t1 = seconds if T == 1 else t1
        result["step_cost"].append({"T": T, "ms": seconds * 1e3, "sd": sd * 1e3})
        ratio = f"{seconds / t1:.2f}x" if t1 else ""
        print(f"| {T} | {seconds * 1e3:.3f} +- {sd * 1e3:.3f} | {seconds * 1e3 / T:.4f} | {ratio} |", flush=True)
        report()
    if not args.tg and not args.steps:
        report()
    return 0


if __name__ == "__main__":
    sys.exit(main())
