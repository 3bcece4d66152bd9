#!/usr/bin/env python3
"""Makes tests/data/families/<preset>.json: llama.cpp's logits for a family's small
synthetic model, the reference tests/test_model_families.cpp compares fafo with.

  tools/peer/families_reference.py --preset qwen3-tiny --synth build/tools/synth/fafo-synth --fafo build/app/cli/fafo \
      --llama-logits /tmp/llama-logits --llama-commit 3f545bec [--ctx 256] \
      [--vocab vocab/ggml-vocab-phi-3.gguf | --vocab-convert tokenizers/qwen3-from-npm/tokenizer.json \
       --convert build/tools/convert_tokenizer/fafo-convert-tokenizer] --out tests/data/families/qwen3-tiny.json

Writes the model with fafo-synth (the preset, F32 weights unless --type, seed 1, the vocabulary
given: what the test writes), draws 5 sequences of 64 token ids (a fixed seed), runs llama_logits.cpp on
them (teacher-forced, F32 KV cache) and keeps, for every position, llama.cpp's 8
largest logits with their token ids (best first; ties: the lower id first).
"""
import argparse
import heapq
import json
import os
import random
import struct
import subprocess
import tempfile

PROMPTS, LENGTH, TOP = 5, 64, 8


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", required=True)
    ap.add_argument("--synth", required=True, help="fafo-synth")
    ap.add_argument("--fafo", required=True, help="fafo (its info command reads the vocabulary size)")
    ap.add_argument("--llama-logits", required=True, help="llama_logits.cpp built against llama.cpp")
    ap.add_argument("--llama-commit", required=True, help="the llama.cpp commit it was built from")
    ap.add_argument("--ctx", type=int, default=256, help="the context both sides use (LongRoPE picks by it)")
    ap.add_argument("--shared", default="../shared", help="the shared data folder")
    ap.add_argument("--vocab", help="a vocab GGUF under --shared (e.g. vocab/ggml-vocab-phi-3.gguf)")
    ap.add_argument("--vocab-convert", help="a tokenizer.json under --shared, converted by --convert")
    ap.add_argument("--convert", help="fafo-convert-tokenizer")
    ap.add_argument("--logit-tolerance", type=float,
                    help="the largest logit difference the test allows for this family (default 1e-3)")
    ap.add_argument("--tolerance-reason", help="why this family needs a wider one than 1e-3")
    ap.add_argument("--type", default="F32",
                    help="fafo-synth's weight type (default F32; the codebook formats: random codes)")
    ap.add_argument("--argmax-margin", type=float,
                    help="compare the argmax only where llama.cpp's top two logits are further apart "
                         "than this (default 1e-3); for weights whose products llama.cpp rounds")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "m.gguf")
        # general.name "synthetic": llama.cpp gives a file named like Phi-3 attributes of
        # Phi-3's special tokens, which a synthetic vocabulary lacks (names change no logit).
        synth = [a.synth, "--preset", a.preset, "--type", a.type, "--name", "synthetic", "-o", model]
        vocab = {}
        if a.vocab:
            synth += ["--vocab-from", os.path.join(a.shared, a.vocab)]
            vocab = {"shared": a.vocab}
        elif a.vocab_convert:
            converted = os.path.join(tmp, "vocab.gguf")
            subprocess.run([a.convert, os.path.join(a.shared, a.vocab_convert), "-o", converted], check=True)
            synth += ["--vocab-from", converted]
            vocab = {"converted_from": a.vocab_convert}
        subprocess.run(synth, check=True, capture_output=True)
        info = subprocess.run([a.fafo, "info", "-m", model], check=True, capture_output=True, text=True).stdout
        n_vocab = int(info.split("vocabulary:")[1].split()[0])
        rng = random.Random("fafo-families-" + a.preset)
        prompts = [[rng.randrange(3, n_vocab) for _ in range(LENGTH)] for _ in range(PROMPTS)]
        ids = os.path.join(tmp, "prompts.txt")
        with open(ids, "w") as f:
            for p in prompts:
                f.write(" ".join(map(str, p)) + "\n")
        out = os.path.join(tmp, "logits.f32")
        subprocess.run([a.llama_logits, model, ids, out, "2", str(a.ctx)], check=True)
        data = open(out, "rb").read()
    assert len(data) == PROMPTS * LENGTH * n_vocab * 4, "unexpected logits size"
    top = []
    for p in range(PROMPTS):
        rows = []
        for i in range(LENGTH):
            offset = ((p * LENGTH) + i) * n_vocab * 4
            row = struct.unpack_from("<%df" % n_vocab, data, offset)
            best = heapq.nsmallest(TOP, range(n_vocab), key=lambda v: (-row[v], v))
            rows.append([[v, float("%.7g" % row[v])] for v in best])
        top.append(rows)
    doc = {
        "preset": a.preset,
        "weights": a.type,
        "n_ctx": a.ctx,
        "vocab": vocab,
        "n_vocab": n_vocab,
        "made_by": "tools/peer/families_reference.py with tools/peer/llama_logits.cpp (CPU, F32 KV cache, "
                   "flash attention off)",
        "llama_cpp_commit": a.llama_commit,
        "prompts": prompts,
        "top": top,
    }
    if a.logit_tolerance is not None:
        doc["logit_tolerance"] = a.logit_tolerance
        doc["tolerance_reason"] = a.tolerance_reason or ""
    if a.argmax_margin is not None:
        doc["argmax_margin"] = a.argmax_margin
    with open(a.out, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print("wrote", a.out, "(%d positions)" % (PROMPTS * LENGTH))


if __name__ == "__main__":
    main()
