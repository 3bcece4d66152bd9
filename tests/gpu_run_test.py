#!/usr/bin/env python3
"""ctest GpuRun.PeersAndProjections: the GPU runner's peer figures and its side-by-side
tables, from results as the steps store them (tools/gpu_run/peers.py). The steps themselves
run in GpuBundle.QuickRehearsal; the peers need a GPU (PyTorch) or a llama.cpp build
(never part of the repository), so their parsing and arithmetic are checked here.

    python3 tests/gpu_run_test.py SOURCE_DIR
"""
import json
import subprocess
import sys
import tempfile
import types
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(sys.argv.pop(1) if len(sys.argv) > 1 else ".").resolve() / "tools" / "gpu_run"))
import peers as gpu_run  # noqa: E402


def record(n_prompt: int, n_gen: int, avg_ns: float, stddev_ns: float = 0.0) -> dict:
    """One record of `llama-bench -o json`, with the fields of build d32676d77's output."""
    tokens = n_prompt or n_gen
    return {"build_commit": "d32676d77", "build_number": 9749, "cpu_info": "Intel(R) Xeon(R) Processor", "gpu_info": "NVIDIA H200",
            "backends": "CUDA", "model_type": "llama 8B Q4_K - Medium", "n_ubatch": 512, "n_gpu_layers": 99,
            "flash_attn": -1, "n_prompt": n_prompt, "n_gen": n_gen, "n_depth": 0, "avg_ns": avg_ns, "stddev_ns": stddev_ns,
            "avg_ts": tokens / (avg_ns / 1e9), "stddev_ts": 0.5, "samples_ns": [avg_ns], "samples_ts": [tokens / (avg_ns / 1e9)]}


def curve(*points: tuple[int, float]) -> list[dict]:
    return [{"T": t, "ms": ms, "sd": 0.0} for t, ms in points]


class Curves(unittest.TestCase):
    def test_linear_between_measured_sizes_and_never_beyond(self):
        c = curve((1, 5.0), (8, 6.0), (64, 10.0), (128, 20.0))
        self.assertEqual(gpu_run.curve_at(c, 8), 6.0)
        self.assertAlmostEqual(gpu_run.curve_at(c, 65), 10.0 + 10.0 / 64)
        self.assertAlmostEqual(gpu_run.curve_at(c, 36), 8.0)
        self.assertIsNone(gpu_run.curve_at(c, 129))
        self.assertIsNone(gpu_run.curve_at(c, 0))
        self.assertAlmostEqual(gpu_run.curve_ratio(c, 64), 2.0)
        self.assertIsNone(gpu_run.curve_ratio(curve((8, 6.0), (64, 10.0)), 64))  # no t(1)


class LlamaBench(unittest.TestCase):
    def test_json_gives_pp_tg_and_a_curve(self):
        records = [record(512, 0, 40e6), record(1, 0, 2.0e6), record(8, 0, 2.4e6, 0.1e6), record(64, 0, 5.0e6),
                   record(0, 128, 128 * 2.5e6)]
        text = json.dumps(records, indent=2)
        s = gpu_run.llama_summary(gpu_run.parse_llama_bench(text))
        self.assertEqual(s["pp"]["tokens"], 512)
        self.assertAlmostEqual(s["pp"]["tokens_per_s"], 512 / 0.040)
        self.assertEqual(s["tg"]["tokens"], 128)
        self.assertAlmostEqual(s["tg"]["tokens_per_s"], 400.0)
        self.assertEqual([p["T"] for p in s["step_cost"]], [1, 8, 64, 512])
        self.assertAlmostEqual(s["step_cost"][1]["ms"], 2.4)
        self.assertAlmostEqual(s["step_cost"][1]["sd"], 0.1)
        self.assertEqual(s["build_commit"], "d32676d77")
        self.assertEqual(s["backends"], "CUDA")

    def test_a_run_cut_short_keeps_the_records_it_finished(self):
        # llama-bench prints each record when its test ends, the closing bracket at exit
        text = json.dumps([record(512, 0, 40e6), record(1, 0, 2.0e6)], indent=2)
        cut = text[:text.rindex("]")].rstrip() + ',\n  {\n    "build_commit": "d32676d77",\n    "n_pr'
        records = gpu_run.parse_llama_bench(cut)
        self.assertEqual([r["n_prompt"] for r in records], [512, 1])
        self.assertEqual(len(gpu_run.parse_llama_bench(text[:text.rindex("]")])), 2)  # no closing bracket

    def test_output_without_json_is_an_error(self):
        with self.assertRaises(ValueError):
            gpu_run.parse_llama_bench("error: failed to load model\n")
        with self.assertRaises(ValueError):
            gpu_run.parse_llama_bench("[1, 2]")


class PeersArchive(unittest.TestCase):
    def test_builds_are_found_in_a_folder_or_an_archive_of_one(self):
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            exe = tmp / "peers" / "llama-cuda" / "llama-bench"
            exe.parent.mkdir(parents=True)
            exe.write_text("#!/bin/sh\n")
            exe.chmod(0o755)
            (tmp / "peers" / "llama-vulkan").mkdir()  # no llama-bench in it: not a build
            run = lambda peers: types.SimpleNamespace(peers=peers, work=tmp / "work", results={})  # noqa: E731
            r = run(tmp / "peers")
            self.assertEqual(gpu_run.llama_builds(r), [("cuda", exe)])
            for archive, what in ((tmp / "folder.tar.xz", ["-C", str(tmp), "peers"]),
                                  (tmp / "contents.tar.xz", ["-C", str(tmp / "peers"), "."])):
                subprocess.run(["tar", "-cJf", str(archive), *what], check=True)
                r = run(archive)
                gpu_run.unpack_peers(r, 60)
                builds = gpu_run.llama_builds(r)
                self.assertEqual([name for name, _ in builds], ["cuda"], archive.name)
                self.assertTrue(builds[0][1].is_relative_to(tmp / "work" / "peers"), builds[0][1])
                self.assertIn("unpacked into", r.results["peers_unpacked"])
            (tmp / "broken.tar.xz").write_text("not an archive")
            r = run(tmp / "broken.tar.xz")
            gpu_run.unpack_peers(r, 60)
            self.assertEqual(gpu_run.llama_builds(r), [])
            self.assertIn("could not be unpacked", r.results["peers_unpacked"])


def results() -> dict:
    """An H200-like run: fafo cuda and vulkan, llama.cpp cuda, PyTorch, stories260K's taus."""
    tg = lambda tps: {"tokens": 128, "tokens_per_s": tps, "sd": 0.1, "weight_bytes_per_token": 4.0e9,  # noqa: E731
                      "effective_gb_per_s": tps * 4.0}
    return {
        "copy_gbps": 4000.0,
        "bench_q4": {
            "cuda:0": {"tg": tg(100.0), "pp": {"tokens": 512, "tokens_per_s": 1000.0, "sd": 1.0},
                       "step_cost": curve((1, 10.0), (8, 20.0), (64, 80.0), (128, 120.0))},
            "cuda:0 warp": {"tg": tg(50.0), "step_cost": curve((1, 20.0))},  # a side-by-side kernel set: no row
            "vulkan:0": {"tg": tg(40.0), "step_cost": curve((1, 25.0), (8, 100.0))},
        },
        "peer_llama": {"cuda": {"tg": {"tokens": 128, "tokens_per_s": 200.0, "sd": 1.0},
                                "pp": {"tokens": 512, "tokens_per_s": 8000.0, "sd": 1.0},
                                "step_cost": curve((1, 5.0), (8, 6.0), (64, 10.0), (128, 20.0))}},
        "peer_torch": {"dtype": "bf16", "device": "NVIDIA H200", "weight_bytes_per_token": 16.0e9,
                       "tg": {"tokens": 128, "tokens_per_s": 200.0, "sd": 1.0, "effective_gb_per_s": 3200.0},
                       "step_cost": curve((1, 5.0), (8, 5.5), (64, 7.5))},
        "strategies": [{"label": "cuda:0", "strategies": [
            {"strategy": "ar", "tau": 1.0, "step_tokens": 1},
            {"strategy": "lookahead", "tau": 1.5, "step_tokens": 65},
            {"strategy": "fafo", "tau": 1.6, "step_tokens": 200}]}],
    }


def row(text: str, start: str) -> str:
    found = [line for line in text.splitlines() if line.startswith(start)]
    assert len(found) == 1, f"{len(found)} rows start with {start!r} in:\n{text}"
    return found[0]


class SideBySide(unittest.TestCase):
    def test_every_engine_has_its_row(self):
        text = gpu_run.side_by_side(results())
        # fafo cuda: tg 100 at 4 GB a token = 400 GB/s = 10 % of 4000; t(8)/t(1) 2, t(64)/t(1) 8
        self.assertIn("| fafo | cuda:0 | Q4_K_M | 100.00 | 1000.0 | 2.00× | 8.00× | 400.0 | 10% |", text)
        self.assertIn("| fafo | vulkan:0 | Q4_K_M | 40.00 | n/a | 4.00× | n/a | 160.0 | 4% |", text)
        self.assertIn("| llama.cpp | llama.cpp cuda | Q4_K_M | 200.00 | 8000.0 | 1.20× | 2.00× | 800.0 | 20% |", text)
        self.assertIn("| PyTorch | PyTorch cuBLAS | bf16 products | 200.00 | n/a | 1.10× | 1.50× | 3200.0 | 80% |", text)
        self.assertNotIn("warp", text)

    def test_fafo_over_each_peer(self):
        text = gpu_run.side_by_side(results())
        # over llama.cpp's CUDA build: tg 0.5, pp 0.125, curves 2/1.2 and 8/2
        self.assertEqual(row(text, "| cuda:0 | llama.cpp cuda |"), "| cuda:0 | llama.cpp cuda | 0.50× | 0.12× | 1.67× | 4.00× |")
        # over PyTorch: weight GB/s 400 / 3200
        self.assertEqual(row(text, "| cuda:0 | PyTorch cuBLAS |"), "| cuda:0 | PyTorch cuBLAS | 0.12× | n/a | 1.82× | 5.33× |")
        self.assertEqual(row(text, "| vulkan:0 | PyTorch cuBLAS |"), "| vulkan:0 | PyTorch cuBLAS | 0.05× | n/a | 3.64× | n/a |")
        self.assertNotIn("| vulkan:0 | llama.cpp cuda |", text)  # each fafo backend against the build of its own API

    def test_projections_take_each_curve_at_the_strategy_step(self):
        text = gpu_run.side_by_side(results())
        # lookahead, T = 65 on fafo cuda: t(65) = 80 + 40/64 = 80.625 ms, 8.0625x t(1); tau 1.5 -> 0.186; paper 2.01 -> 0.249
        self.assertEqual(row(text, "| cuda:0 | lookahead |"), "| cuda:0 | lookahead | 65 | 8.06× | 1.50 | 0.19× | 2.01 | 0.25× |")
        # on llama.cpp's curve: t(65) = 10 + 10/64 = 10.156 ms, 2.03x; paper 2.01 -> 0.99
        self.assertEqual(row(text, "| llama.cpp cuda | lookahead |"),
                         "| llama.cpp cuda | lookahead | 65 | 2.03× | 1.50 | 0.74× | 2.01 | 0.99× |")
        # fafo's step (200 tokens) is past every curve: not extrapolated
        self.assertEqual(row(text, "| cuda:0 | fafo |"), "| cuda:0 | fafo | 200 | n/a | 1.60 | n/a | 2.12 | n/a |")
        self.assertNotIn("| cuda:0 | ar |", text)

    def test_nothing_measured_says_so(self):
        text = gpu_run.side_by_side({})
        self.assertIn("| (nothing measured) |", text)
        self.assertIn("| (no peer measured) |", text)
        self.assertIn("| (no strategy tau or no 8B curve measured) |", text)


if __name__ == "__main__":
    unittest.main(verbosity=2)
