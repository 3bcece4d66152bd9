#!/usr/bin/env python3
"""Writes shaders/iq_grids.inc, the codebooks of the IQ2_XXS, IQ2_XS, IQ3_XXS and IQ3_S
weight formats, from a llama.cpp checkout (not part of fafo's build):

    python3 tools/peer/iq_grids.py $LLAMA > shaders/iq_grids.inc

Each codebook entry is a short vector of small positive values drawn from a handful of
levels. ggml stores the expanded vectors (ggml-common.h: iq2xxs_grid ... iq3s_grid, one
byte per value); its quantizer (ggml-quants.c) lists the same entries as level indices
packed into 16 bits (2 bits per value for the 8-value IQ2 entries, 3 bits for the 4-value
IQ3 entries). The .inc keeps the packed form and the levels; this script checks that
they expand to ggml's bytes before writing anything.
"""
import re
import sys

LEVELS = {  # format: (bits per value, values per entry, levels)
    "IQ2XXS": (2, 8, [8, 25, 43]),
    "IQ2XS": (2, 8, [8, 25, 43]),
    "IQ3XXS": (3, 4, [4, 12, 20, 28, 36, 44, 52, 62]),
    "IQ3S": (3, 4, [1, 3, 5, 7, 9, 11, 13, 15]),
}
SOURCES = {  # format: (expanded table in ggml-common.h, packed table, function that lists it)
    "IQ2XXS": ("iq2xxs_grid", "kgrid_2bit_256", "iq2xs_init_impl"),
    "IQ2XS": ("iq2xs_grid", "kgrid_2bit_512", "iq2xs_init_impl"),
    "IQ3XXS": ("iq3xxs_grid", "kgrid_256", "iq3xs_init_impl"),
    "IQ3S": ("iq3s_grid", "kgrid_512", "iq3xs_init_impl"),
}


def expanded(common, name):
    m = re.search(r"GGML_TABLE_BEGIN\([^,]+, " + name + r", \d+\)(.*?)GGML_TABLE_END", common, re.S)
    return [int(x, 16) for x in re.findall(r"0x[0-9a-fA-F]+", m.group(1))]


def packed(quants, name, function):
    body = quants[quants.index(function):]
    m = re.search(r"static const uint16_t " + name + r"\[\d+\] = \{(.*?)\};", body, re.S)
    return [int(x) for x in re.findall(r"\d+", m.group(1))]


def main():
    root = sys.argv[1]
    common = open(f"{root}/ggml/src/ggml-common.h").read()
    quants = open(f"{root}/ggml/src/ggml-quants.c").read()
    out = [
        "// The codebooks of the IQ2_XXS, IQ2_XS, IQ3_XXS and IQ3_S weight formats, shared by",
        "// the C++ (runtime/src/quant/iq_grids.h), CUDA (cuda_backend/src/block_decode.h) and",
        "// GLSL (shaders/dequant.glsl) decoders. Written by tools/peer/iq_grids.py from",
        "// llama.cpp's tables, whose expansion it checks; do not edit by hand.",
        "//",
        "// Entry e of a codebook is a vector of 8 (IQ2) or 4 (IQ3) values; value j is",
        "// LEVELS[(e >> (BITS * j)) & (2^BITS - 1)].",
    ]
    for fmt, (bits, width, levels) in LEVELS.items():
        full_name, packed_name, function = SOURCES[fmt]
        full = expanded(common, full_name)
        entries = packed(quants, packed_name, function)
        if len(full) != len(entries):
            sys.exit(f"{fmt}: {len(full)} expanded entries, {len(entries)} packed")
        for e, f in zip(entries, full):
            got = sum(levels[(e >> (bits * j)) & ((1 << bits) - 1)] << (8 * j) for j in range(width))
            if got != f:
                sys.exit(f"{fmt}: packed entry {e} does not expand to {f:#x}")
        out.append("")
        out.append(f"#define FAFO_{fmt}_BITS {bits}")
        out.append(f"#define FAFO_{fmt}_LEVELS " + ", ".join(map(str, levels)))
        out.append(f"#define FAFO_{fmt}_SIZE {len(entries)}")
        lines = [", ".join(map(str, entries[i:i + 16])) for i in range(0, len(entries), 16)]
        out.append(f"#define FAFO_{fmt}_GRID \\")
        out.extend("  " + line + (", \\" if i + 1 < len(lines) else "") for i, line in enumerate(lines))
    print("\n".join(out))


if __name__ == "__main__":
    main()
