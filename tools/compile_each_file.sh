#!/usr/bin/env bash
# Checks that every C++ source file compiles on its own: the builds are unity builds
# (batches of files in one compiler run, where a file may silently use what an earlier
# file of its batch included), so this configures BUILD_DIR (default build-files) file by
# file, builds only the precompiled headers (each target's, as the build uses them), and
# runs clang's front end (-fsyntax-only, no code generated) over each file, as many at a
# time as there are cores. The build's warnings are errors here. Without Vulkan and
# CUDA (the sanitizer job's configuration).
# Usage: tools/compile_each_file.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build-files}"
command -v clang++ >/dev/null || { echo "tools/compile_each_file.sh: clang++ not found (run tools/setup.sh)" >&2; exit 1; }
mkdir -p "$build"
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="" \
  -DFAFO_FUZZ=ON -DFAFO_VULKAN=OFF -DFAFO_CUDA=OFF -DCMAKE_UNITY_BUILD=OFF \
  -DCMAKE_EXPORT_COMPILE_COMMANDS=ON > "$build/configure.log" 2>&1 ||
  { cat "$build/configure.log" >&2; echo "tools/compile_each_file.sh: configuring $build failed" >&2; exit 1; }
# Each compile command as a -fsyntax-only run (no object written); the precompiled
# headers' own commands are left out and their files listed for ninja.
python3 - "$build/compile_commands.json" "$build/pch_files.txt" > "$build/syntax_commands.txt" <<'EOF'
import json, os, shlex, sys
pchs = set()
for e in json.load(open(sys.argv[1])):
    if e["file"].endswith("cmake_pch.hxx.cxx"):
        continue
    args, out, skip = shlex.split(e["command"]), [], False
    pchs.update(a for a in args if a.endswith(".hxx.pch"))
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-o", "-c"):
            skip = a == "-o"
            continue
        out.append(a)
    out[1:1] = ["-fsyntax-only", "-Werror"]
    print("cd " + shlex.quote(e["directory"]) + " && " + " ".join(shlex.quote(a) for a in out))
with open(sys.argv[2], "w") as f:
    for p in sorted(pchs):
        f.write(os.path.relpath(p, os.path.dirname(os.path.abspath(sys.argv[1]))) + "\n")
EOF
if [ -s "$build/pch_files.txt" ]; then
  # shellcheck disable=SC2046
  ninja -C "$build" $(cat "$build/pch_files.txt") > "$build/pch.log" 2>&1 ||
    { cat "$build/pch.log" >&2; echo "tools/compile_each_file.sh: building the precompiled headers failed" >&2; exit 1; }
fi
n=$(wc -l < "$build/syntax_commands.txt")
echo "tools/compile_each_file.sh: $n files, $(nproc) at a time"
if ! tr '\n' '\0' < "$build/syntax_commands.txt" | xargs -0 -P"$(nproc)" -I{} bash -c '{}'; then
  echo "tools/compile_each_file.sh: a file does not compile on its own (above)" >&2
  exit 1
fi
echo "tools/compile_each_file.sh: every file compiles on its own"
