#!/usr/bin/env python3
"""Gives a compiled shader the integer dot product instruction, which Debian 12's glslang
cannot compile from GLSL (GL_EXT_integer_dot_product): the body of the shader's function
`iu_sdot4(uint a, uint b)` (shaders/int_units.glsl with DOT4=1: a placeholder) becomes

    OpSDot %int a b PackedVectorFormat4x8Bit

(the sum of the four products of the signed bytes of a and b), with the capabilities
DotProduct and DotProductInput4x8BitPacked and the extension SPV_KHR_integer_dot_product.
The result is assembled and validated by SPIRV-Tools and written as the C array glslang's
--vn would write.

Usage: spirv_dot4.py <in.spv> <out.spv.h> <array name> [--spirv-dis P --spirv-as P --spirv-val P]
       spirv_dot4.py --manifest <file> [--spirv-dis P ...]
The manifest lists one shader a line, <in.spv> <tab> <out.spv.h> <tab> <array name>, all
rewritten in one run (the build's DOT4 variants: one Python start instead of one each),
as many at a time as there are cores; a failure names its shader and exits 1.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

FUNCTION = "iu_sdot4(u1;u1;"
TARGET_ENV = "vulkan1.2"


def rewrite(text: str) -> str:
    lines = text.splitlines()
    names = dict(re.findall(r'^\s*OpName (%\w+) "([^"]*)"', text, re.M))
    ids = [i for i, n in names.items() if n == FUNCTION]
    if len(ids) != 1:
        raise SystemExit(f"spirv_dot4: expected one function {FUNCTION!r}, found {len(ids)}")
    fn = ids[0]
    ints = dict(re.findall(r"^\s*(%\w+) = OpTypeInt 32 ([01])$", text, re.M))
    int_type = next((i for i, s in ints.items() if s == "1"), None)
    uint_type = next((i for i, s in ints.items() if s == "0"), None)
    if not int_type or not uint_type:
        raise SystemExit("spirv_dot4: the module has no 32-bit int and uint types")
    pointers = {i: (sc, t) for i, sc, t in re.findall(r"^\s*(%\w+) = OpTypePointer (\w+) (%\w+)$", text, re.M)}
    start = next(k for k, l in enumerate(lines) if re.match(rf"^\s*{re.escape(fn)} = OpFunction ", l))
    end = next(k for k in range(start, len(lines)) if lines[k].strip() == "OpFunctionEnd")
    params = []
    label = None
    for l in lines[start + 1:end]:
        m = re.match(r"^\s*(%\w+) = OpFunctionParameter (%\w+)$", l)
        if m:
            params.append(m.groups())
        elif re.match(r"^\s*%\w+ = OpLabel$", l):
            label = l
            break
    if len(params) != 2 or label is None:
        raise SystemExit(f"spirv_dot4: {FUNCTION} has {len(params)} parameters (2 expected) or no body")
    body = []
    operands = []
    for k, (pid, ptype) in enumerate(params):
        if ptype in pointers:  # glslang passes parameters by pointer without optimization
            if pointers[ptype][1] != uint_type:
                raise SystemExit(f"spirv_dot4: parameter {k} of {FUNCTION} is not a uint")
            body.append(f"%fafo_dot4_in{k} = OpLoad {uint_type} {pid}")
            operands.append(f"%fafo_dot4_in{k}")
        elif ptype == uint_type:
            operands.append(pid)
        else:
            raise SystemExit(f"spirv_dot4: parameter {k} of {FUNCTION} is not a uint")
    body.append(f"%fafo_dot4_sum = OpSDot {int_type} {operands[0]} {operands[1]} PackedVectorFormat4x8Bit")
    body.append("OpReturnValue %fafo_dot4_sum")
    head = lines[start:start + 1 + len(params)] + [label]
    lines = lines[:start] + head + body + lines[end:]
    # Capabilities first, then extensions, then the rest.
    last_cap = max(k for k, l in enumerate(lines) if l.strip().startswith("OpCapability"))
    lines[last_cap + 1:last_cap + 1] = ["OpCapability DotProduct", "OpCapability DotProductInput4x8BitPacked",
                                         'OpExtension "SPV_KHR_integer_dot_product"']
    return "\n".join(lines) + "\n"


def c_array(words: bytes, name: str) -> str:
    values = [int.from_bytes(words[i:i + 4], "little") for i in range(0, len(words), 4)]
    rows = [",".join(f"0x{v:08x}" for v in values[i:i + 8]) for i in range(0, len(values), 8)]
    return ("// Written by tools/spirv_dot4.py (glslang's SPIR-V with OpSDot).\n#pragma once\n"
            f"const uint32_t {name}[] = {{\n\t" + ",\n\t".join(rows) + "\n};\n")


def convert(tools: argparse.Namespace, src: str, out: str, name: str) -> None:
    dis = subprocess.run([tools.spirv_dis, "--raw-id", src], check=True, capture_output=True, text=True).stdout
    with tempfile.TemporaryDirectory() as tmp:
        asm, spv = Path(tmp) / "dot4.spvasm", Path(tmp) / "dot4.spv"
        asm.write_text(rewrite(dis))
        subprocess.run([tools.spirv_as, "--target-env", TARGET_ENV, str(asm), "-o", str(spv)], check=True)
        subprocess.run([tools.spirv_val, "--target-env", TARGET_ENV, str(spv)], check=True)
        # Whole or not at all: a failed run leaves no header that looks current.
        partial = Path(out + ".partial")
        partial.write_text(c_array(spv.read_bytes(), name))
        os.replace(partial, out)


def convert_listed(tools: argparse.Namespace, manifest: str) -> int:
    jobs = []
    for number, line in enumerate(Path(manifest).read_text().splitlines(), 1):
        if not line:
            continue
        fields = line.split("\t")
        if len(fields) != 3 or not all(fields):
            print(f"spirv_dot4: {manifest}:{number}: expected <in.spv> <tab> <out.spv.h> <tab> <array name>",
                  file=sys.stderr)
            return 2
        jobs.append(fields)

    def convert_job(job: list) -> str:
        try:
            convert(tools, *job)
            return ""
        except (Exception, SystemExit) as e:  # every shader's error reported, none a traceback
            Path(job[1]).unlink(missing_ok=True)
            Path(job[1] + ".partial").unlink(missing_ok=True)
            detail = e.stderr if isinstance(e, subprocess.CalledProcessError) and e.stderr else str(e)
            return f"spirv_dot4: {job[0]}: {detail}"

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        errors = [e for e in pool.map(convert_job, jobs) if e]
    for e in errors:
        print(e, file=sys.stderr)
    return 1 if errors else 0


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("input", nargs="?")
    p.add_argument("output", nargs="?")
    p.add_argument("name", nargs="?")
    p.add_argument("--manifest")
    p.add_argument("--spirv-dis", default="spirv-dis")
    p.add_argument("--spirv-as", default="spirv-as")
    p.add_argument("--spirv-val", default="spirv-val")
    a = p.parse_args()
    if a.manifest:
        if a.input:
            p.error("--manifest takes no other shader")
        return convert_listed(a, a.manifest)
    if not a.name:
        p.error("expected <in.spv> <out.spv.h> <array name>, or --manifest <file>")
    convert(a, a.input, a.output, a.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
