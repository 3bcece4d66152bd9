#!/usr/bin/env bash
# ctest ShaderVariants.BatchedCompilerWritesGlslangValidatorsBytes: the headers that
# fafo-compile-shaders wrote for the build (tools/compile_shaders; its manifest lists every
# batched variant) are byte for byte what glslangValidator writes with the same flags, for
# the first variant of each source and every 25th of the manifest; and the tool fails
# clearly on a variant that does not compile and on a malformed manifest.
#
#   tests/compile_shaders_test.sh TOOL MANIFEST GLSLANGVALIDATOR
set -uo pipefail
tool=$1 manifest=$2 glslang=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

n=0 checked=0 seen=" "
while IFS=$'\t' read -r name source header defines; do
  n=$((n + 1))
  case "$seen" in *" $source "*) first=0 ;; *) first=1; seen+="$source " ;; esac
  [ $first -eq 1 ] || [ $(((n - 1) % 25)) -eq 0 ] || continue
  flags=()
  for d in $defines; do flags+=("-D$d"); done
  if ! "$glslang" --quiet --target-env vulkan1.2 -V "${flags[@]}" -I"$(dirname "$source")" --vn "$name" -o "$tmp/expected.h" "$source"; then
    fail "glslangValidator does not compile $name"
    continue
  fi
  cmp -s "$tmp/expected.h" "$header" || fail "$name: $header is not glslangValidator's output"
  checked=$((checked + 1))
done < "$manifest"
echo "compared $checked of the $n variants with glslangValidator's output"
[ $checked -ge 20 ] || fail "only $checked variants compared"

# A variant that does not compile: exit 1, its name and glslang's log.
printf 'void main() { undefined_thing(); }\n' > "$tmp/bad.comp"
sed -i '1i #version 450' "$tmp/bad.comp"
printf 'bad_variant\t%s\t%s\tX=1\n' "$tmp/bad.comp" "$tmp/bad.h" > "$tmp/bad.tsv"
out=$("$tool" "$tmp/bad.tsv" 2>&1); code=$?
[ $code -eq 1 ] || fail "a shader that does not compile: exit $code, not 1"
grep -q "bad_variant" <<< "$out" && grep -q "undefined_thing" <<< "$out" || fail "the error does not name the variant and glslang's message: $out"
[ ! -e "$tmp/bad.h" ] || fail "a header was written for a variant that does not compile"

# A malformed manifest line: exit 2 and the line's number.
printf 'only\ttwo fields\n' > "$tmp/malformed.tsv"
out=$("$tool" "$tmp/malformed.tsv" 2>&1); code=$?
[ $code -eq 2 ] || fail "a malformed manifest: exit $code, not 2"
grep -q "malformed.tsv:1" <<< "$out" || fail "the error does not name the manifest's line: $out"

[ $fails -eq 0 ] && echo "fafo-compile-shaders: all checks passed"
exit $((fails > 0))
