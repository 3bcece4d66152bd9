#!/usr/bin/env bash
# ctest Readme.*: README.md is a true way in. Runs every command of its ```sh blocks
# that starts with build/app/cli/fafo (the built binary put in its place), one by one
# from an empty folder with no ../shared and no $FAFO_MODEL, so on the shipped model,
# and checks exit status 0; a block right after a line `<!-- not run: REASON -->` is
# left out. Also: the first run prints a story, the README has at most 250 lines, and
# every relative link of README.md and docs/*.md names a file that exists.
#
#   tests/readme_test.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
src=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
readme=$src/README.md
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

lines=$(wc -l < "$readme")
[ "$lines" -le 250 ] || fail "README.md has $lines lines (at most 250)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The runnable commands: lines of ```sh blocks not marked `not run`.
awk '
  /^<!-- not run:/ { skip = 1; next }
  /^```sh[[:space:]]*$/ { inside = 1; run = !skip; skip = 0; next }
  /^```/ { if (inside) { inside = 0; next } }
  { if (!inside) { if ($0 !~ /^[[:space:]]*$/) skip = 0; next } }
  inside && run && /^build\/app\/cli\/fafo / { print }
' "$readme" > "$work/commands"
count=$(wc -l < "$work/commands")
[ "$count" -ge 5 ] || fail "only $count runnable commands found in README.md"
grep -qxF 'build/app/cli/fafo run -p "Once upon a time"' "$work/commands" || fail "the first run is not a runnable command"
mkdir "$work/run"
n=0
while IFS= read -r line; do
  n=$((n + 1))
  command="$build/app/cli/fafo ${line#build/app/cli/fafo }"
  if (cd "$work/run" && env -u FAFO_MODEL FAFO_SHARED_DIR=/nonexistent timeout 300 bash -c "$command" \
        > "$work/out.$n" 2> "$work/err.$n"); then
    echo "ok: $line"
  else
    fail "README command exited $?: $line"
    tail -5 "$work/err.$n"
  fi
done < "$work/commands"
first=$(grep -nxF 'build/app/cli/fafo run -p "Once upon a time"' "$work/commands" | head -1 | cut -d: -f1)
if [ -n "$first" ]; then
  grep -q '^Once upon a time' "$work/out.$first" || fail "the first run printed no story: $(head -c 200 "$work/out.$first")"
  grep -q 'stories260K.gguf (the default; -m picks another)' "$work/err.$first" || fail "the first run did not say which model it opened"
fi

# Relative links: [text](path) and ![alt](path), anchors and web addresses left out.
for page in "$readme" "$src"/docs/*.md; do
  dir=$(dirname "$page")
  while IFS= read -r target; do
    path=${target%%#*}
    [ -z "$path" ] && continue
    [ -e "$dir/$path" ] || fail "$(basename "$page") links to $target, which does not exist"
  done < <(grep -oE '\]\([^)[:space:]]+\)' "$page" | sed -E 's/^\]\((.*)\)$/\1/' | grep -vE '^(https?:|mailto:)')
done

[ $fails -eq 0 ] && echo "README: $count commands ran, every link resolves" || echo "README: $fails checks failed"
[ $fails -eq 0 ]
