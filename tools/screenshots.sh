#!/usr/bin/env bash
# The screenshots README.md and docs/studio.md show, taken with a build of fafo-studio
# under xvfb-run (Debian's xvfb; tools/setup.sh installs it) from the repository root,
# on the shipped model, so the pictures show what that build draws and paths a reader
# has (assets/models/...). Each PNG carries the studio's description of what it shows
# (app/studio/png_text.h), which StudioScreenshot.TheCommittedScreenshotsAreThisBuilds
# compares with a fresh run of this script.
#
#   tools/screenshots.sh [--build BUILD_DIR] [--out OUT_DIR]
#
# BUILD_DIR defaults to build/, OUT_DIR to assets/screenshots/ (`cmake --build build
# --target screenshots` runs it so). Exit code 77, with a line saying why, when it
# cannot render: fafo-studio not built, no xvfb-run, no OpenGL under Xvfb.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build
out=$root/assets/screenshots
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: tools/screenshots.sh [--build BUILD_DIR] [--out OUT_DIR]" >&2; exit 2 ;;
  esac
done
studio=$build/app/studio/fafo-studio
[ -x "$studio" ] || { echo "skipped: $studio is not built"; exit 77; }
studio=$(cd "$(dirname "$studio")" && pwd)/fafo-studio  # absolute: the runs start in the repository root
command -v xvfb-run > /dev/null || { echo "skipped: xvfb-run not found (Debian: apt-get install xvfb xauth)"; exit 77; }
mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)
config=$(mktemp -d)  # the recent-files list of these runs, not the user's
trap 'rm -rf "$config"' EXIT

# shot NAME ARGS...: fafo-studio ARGS --screenshot OUT/NAME.png, 1600x1000.
shot() {
  local name=$1
  shift
  local try err=$config/$name.err
  for try in 1 2 3; do
    # A display number of this process's own (xvfb-run -a counts up from it), so runs at
    # the same time rarely pick the same one; when they do, Xvfb fails to start: again.
    (cd "$root" && env -u FAFO_MODEL XDG_CONFIG_HOME="$config" \
      xvfb-run -a -n $((100 + ($$ * 3 + try) % 800)) -s '-screen 0 1600x1000x24' \
      "$studio" "$@" --screenshot "$out/$name.png") > /dev/null 2> "$err"
    local rc=$?
    if [ $rc -eq 0 ]; then
      echo "wrote $out/$name.png"
      return 0
    fi
    grep -q 'xvfb-run: error' "$err" || break
  done
  cat "$err" >&2
  if [ $rc -eq 3 ]; then echo "skipped: fafo-studio cannot open an OpenGL window under Xvfb"; exit 77; fi
  echo "FAIL: $name: fafo-studio exited $rc" >&2
  exit 1
}

model=assets/models/stories260K.gguf
# README.md and docs/studio.md: the debugger in the middle of a FAFO generation, at step
# 60, with the quest KV policy (its first two layers dense).
shot debugger-fafo -m "$model" --backend cpu --prompt "Once upon a time" --kv-policy quest --steps 60
# docs/studio.md: the chat view after two turns (FAFO, greedy, the built-in llama2 template).
shot chat-stories260k -m "$model" --backend cpu -n 150 --strategy fafo --chat-template llama2 \
  --system "You tell short stories for children." \
  --chat "Once upon a time there was a cat named Tom." --chat "What did Tom find in the garden?"
# docs/studio.md: the Bench view after a run on the cpu and reference backends.
shot bench-stories260k -m "$model" --threads 2 --bench cpu,reference --bench-pp 128 --bench-tg 64 \
  --bench-curve 1,2,4,8,16,32,64 --bench-repetitions 2
