#!/usr/bin/env python3
"""Renders a chat template with Jinja2 as Hugging Face transformers does, for fafo's
template tests: tests/data/templates/<name>.json holds the template's renderings of
a few conversations (with and without the generation prompt, and with extra
variables), which tests/test_chat_template.cpp compares fafo's interpreter with.

  tools/peer/render_template.py --config ../shared/tokenizers/qwen3-from-npm/tokenizer_config.json \
      --name qwen3 --out tests/data/templates/qwen3.json
  tools/peer/render_template.py --config gpt-oss-tokenizer_config.json --name gpt-oss --embed \
      --out tests/data/templates/gpt-oss.json   # a template ../shared lacks, kept in the data

The environment is the one ../shared/golden/templates/renderings.json names:
ImmutableSandboxedEnvironment(trim_blocks, lstrip_blocks, loopcontrols), tojson,
raise_exception, strftime_now (a fixed date, 2026-11-22).
"""
import argparse
import json

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

CONVERSATIONS = {
    "system_multiturn": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Hello! What is 2+2?"},
        {"role": "assistant", "content": "2+2 is 4."},
        {"role": "user", "content": "And times 3?"},
    ],
    "thinking": [
        {"role": "user", "content": "Is 91 prime?"},
        {"role": "assistant", "content": "<think>\n91 = 7 * 13.\n</think>\n\nNo: 91 = 7 x 13."},
        {"role": "user", "content": "And 97?"},
        {"role": "assistant", "content": "<think>\nNo divisor up to 9.\n</think>\n\nYes, 97 is prime."},
    ],
    "no_system": [
        {"role": "user", "content": "Write a haiku about GPUs."},
        {"role": "assistant", "content": "Silicon rivers\nthousands of small cores humming\nthe fan sings at night"},
        {"role": "user", "content": "Now one about caches."},
    ],
}
# Extra variables a caller may pass (the server's chat_template_kwargs); {} = none.
VARIANTS = {"": {}, "no_thinking": {"enable_thinking": False}}


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, help="a tokenizer_config.json holding chat_template")
    ap.add_argument("--name", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--embed", action="store_true",
                    help="keep the template in the output (for a template ../shared does not hold)")
    a = ap.parse_args()
    config = json.load(open(a.config))
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: "2026-11-22" if fmt == "%Y-%m-%d" else fmt
    template = env.from_string(config["chat_template"])
    bos, eos = config.get("bos_token") or "", config.get("eos_token") or ""
    renderings = {}
    for conversation, messages in CONVERSATIONS.items():
        for variant, extra in VARIANTS.items():
            for gen in (0, 1):
                key = "%s.gen%d%s" % (conversation, gen, "." + variant if variant else "")
                try:
                    text = template.render(messages=messages, add_generation_prompt=bool(gen), bos_token=bos,
                                           eos_token=eos, **extra)
                    renderings[key] = {"ok": True, "text": text}
                except jinja2.exceptions.TemplateError as e:
                    renderings[key] = {"ok": False, "error": "%s: %s" % (type(e).__name__, e)}
    doc = {"jinja2_version": jinja2.__version__, "template_from": a.config.split("shared/")[-1], "bos_token": bos,
           "eos_token": eos, "conversations": CONVERSATIONS, "variants": VARIANTS, "renderings": renderings}
    if a.embed:
        doc["chat_template"] = config["chat_template"]
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print("wrote", a.out, "(%d renderings)" % len(renderings))


if __name__ == "__main__":
    main()
