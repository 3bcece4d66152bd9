#!/usr/bin/env bash
# ctest ShaderVariants.BatchedCompilerWritesGlslangValidatorsBytes: the headers (and the
# DOT4 variants' SPIR-V modules) that fafo-compile-shaders wrote for the build
# (tools/compile_shaders; its manifest lists every batched variant) are byte for byte what
# glslangValidator writes with the same flags, for the first variant of each source and
# every 25th of the manifest; the DOT4 headers that tools/spirv_dot4.py --manifest wrote
# in one run are those it writes for each module alone (a sample); and both tools fail
# clearly on bad input.
#
#   tests/compile_shaders_test.sh TOOL MANIFEST GLSLANGVALIDATOR \
#       [PYTHON DOT4_MANIFEST SPIRV_DIS SPIRV_AS SPIRV_VAL]
set -uo pipefail
tool=$1 manifest=$2 glslang=$3 python=${4:-python3} dot4_manifest=${5:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# The first variant of each source, the first binary module (DOT4) and every 25th.
n=0 checked=0 modules=0 seen=" "
while IFS=$'\t' read -r name source header defines; do
  n=$((n + 1))
  case "$seen" in *" $source "*) first=0 ;; *) first=1; seen+="$source " ;; esac
  module=0
  case "$header" in *.spv) module=1 ;; esac
  [ $first -eq 1 ] || [ $(((n - 1) % 25)) -eq 0 ] || [ $((module && modules == 0)) -eq 1 ] || continue
  flags=()
  for d in $defines; do flags+=("-D$d"); done
  [ $module -eq 1 ] || flags+=(--vn "$name")
  if ! "$glslang" --quiet --target-env vulkan1.2 -V "${flags[@]}" -I"$(dirname "$source")" -o "$tmp/expected.h" \
       "$source"; then
    fail "glslangValidator does not compile $name"
    continue
  fi
  cmp -s "$tmp/expected.h" "$header" || fail "$name: $header is not glslangValidator's output"
  checked=$((checked + 1)) modules=$((modules + module))
done < "$manifest"
echo "compared $checked of the $n variants with glslangValidator's output ($modules binary modules)"
[ $checked -ge 20 ] || fail "only $checked variants compared"
if [ -n "$dot4_manifest" ] && [ $modules -eq 0 ]; then fail "no binary module (DOT4) compared"; fi

# A variant that does not compile: exit 1, its name and glslang's log.
printf 'void main() { undefined_thing(); }\n' > "$tmp/bad.comp"
sed -i '1i #version 450' "$tmp/bad.comp"
printf 'bad_variant\t%s\t%s\tX=1\n' "$tmp/bad.comp" "$tmp/bad.h" > "$tmp/bad.tsv"
out=$("$tool" "$tmp/bad.tsv" 2>&1); code=$?
[ $code -eq 1 ] || fail "a shader that does not compile: exit $code, not 1"
grep -q "bad_variant" <<< "$out" && grep -q "undefined_thing" <<< "$out" ||
  fail "the error does not name the variant and glslang's message: $out"
[ ! -e "$tmp/bad.h" ] || fail "a header was written for a variant that does not compile"

# A malformed manifest line: exit 2 and the line's number.
printf 'only\ttwo fields\n' > "$tmp/malformed.tsv"
out=$("$tool" "$tmp/malformed.tsv" 2>&1); code=$?
[ $code -eq 2 ] || fail "a malformed manifest: exit $code, not 2"
grep -q "malformed.tsv:1" <<< "$out" || fail "the error does not name the manifest's line: $out"

# The DOT4 headers of the one spirv_dot4.py run against a run for each module alone:
# every 10th, and a bad manifest line (exit 2) and a missing module (exit 1, named).
if [ -n "$dot4_manifest" ]; then
  script=$(dirname "$0")/../tools/spirv_dot4.py
  spirv=(--spirv-dis "$6" --spirv-as "$7" --spirv-val "$8")
  n=0 checked=0
  while IFS=$'\t' read -r spv header name; do
    n=$((n + 1))
    [ $(((n - 1) % 10)) -eq 0 ] || continue
    "$python" "$script" "$spv" "$tmp/dot4.h" "$name" "${spirv[@]}" ||
      { fail "spirv_dot4.py does not rewrite $spv alone"; continue; }
    cmp -s "$tmp/dot4.h" "$header" || fail "$header is not what spirv_dot4.py writes for $spv alone"
    grep -q "OpSDot" <("$6" "$spv" 2>/dev/null) && fail "$spv already has OpSDot before the rewrite"
    checked=$((checked + 1))
  done < "$dot4_manifest"
  echo "compared $checked of the $n DOT4 headers with spirv_dot4.py's output for each alone"
  [ $checked -ge 5 ] || fail "only $checked DOT4 headers compared"
  printf 'only\ttwo\n' > "$tmp/bad_dot4.tsv"
  out=$("$python" "$script" --manifest "$tmp/bad_dot4.tsv" "${spirv[@]}" 2>&1); code=$?
  [ $code -eq 2 ] && grep -q "bad_dot4.tsv:1" <<< "$out" || fail "a malformed DOT4 manifest: exit $code, $out"
  # A missing module: exit 1, named, and the header of an earlier run gone.
  printf '%s/missing.spv\t%s/missing.h\tmissing\n' "$tmp" "$tmp" > "$tmp/missing.tsv"
  echo "an earlier run's header" > "$tmp/missing.h"
  out=$("$python" "$script" --manifest "$tmp/missing.tsv" "${spirv[@]}" 2>&1); code=$?
  [ $code -eq 1 ] && grep -q "missing.spv" <<< "$out" || fail "a missing DOT4 module: exit $code, $out"
  [ ! -e "$tmp/missing.h" ] || fail "a missing module's header of an earlier run was left in place"
fi

[ $fails -eq 0 ] && echo "fafo-compile-shaders: all checks passed"
exit $((fails > 0))
