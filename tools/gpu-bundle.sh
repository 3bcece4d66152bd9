#!/usr/bin/env bash
# Packs a finished build into one self-contained archive for a GPU machine that has no
# build dependencies: the stripped programs the GPU run uses, every shared library they
# need but glibc's (libstdc++ and libgcc_s only as a fallback for an older system), a
# Vulkan loader, the data the run reads, a MANIFEST and the runner (tools/gpu-run.sh).
#
#   tools/gpu-bundle.sh [BUILD_DIR] [OUT_DIR]     (defaults: build, gpu-check)
#
# Writes OUT_DIR/fafo-gpu.tar.xz, which unpacks to fafo-gpu/; refuses to write one larger
# than 40 MiB (MAX_MIB overrides), so the working tree still fits beside it in a 64 MiB
# transfer. SHARED names the shared data folder (default: ../shared beside the checkout).
# On the GPU machine:  tar -xJf gpu-check/fafo-gpu.tar.xz -C /tmp && /tmp/fafo-gpu/gpu-run.sh $OUT
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$here/build}" 2>/dev/null && pwd) || { echo "gpu-bundle: no build folder ${1:-$here/build} (build fafo first)" >&2; exit 1; }
out=${2:-$here/gpu-check}
shared=${SHARED:-$here/../shared}
max_mib=${MAX_MIB:-40}
die() { echo "gpu-bundle: $*" >&2; exit 1; }

# The programs the run uses, by their place in the build.
programs=(app/cli/fafo tools/synth/fafo-synth tests/test_backend_ops)
for p in "${programs[@]}"; do [ -x "$build/$p" ] || die "$build/$p is missing (build every target first: cmake --build $build)"; done
for f in models/stories260K.gguf golden/stories260K.greedy_256steps.golden.txt bench/mt_bench/question.jsonl; do
  [ -f "$shared/$f" ] || die "$shared/$f is missing (set SHARED to the shared data folder)"
done
command -v xz > /dev/null || die "xz is not installed"

mkdir -p "$out"
out=$(cd "$out" && pwd)
stage=$(mktemp -d "${TMPDIR:-/tmp}/fafo-gpu-bundle.XXXXXX")  # not in OUT_DIR: a leftover must not travel with it
trap 'rm -rf "$stage"' EXIT
root=$stage/fafo-gpu
mkdir -p "$root/bin" "$root/lib/fallback" "$root/data"

for p in "${programs[@]}"; do
  strip -o "$root/bin/$(basename "$p")" "$build/$p"
done
cp "$here/tools/gpu-run.sh" "$root/"
chmod +x "$root/gpu-run.sh"
mkdir -p "$root/gpu_run"
cp "$here"/tools/gpu_run/*.py "$root/gpu_run/"  # the runner (python3 gpu_run: its __main__.py)
mkdir -p "$root/peer"
cp "$here/tools/peer/torch_steps.py" "$root/peer/"  # the PyTorch peer (step peer-torch)

# Shared libraries: everything ldd resolves except glibc's own (the machine always has
# those); libstdc++ and libgcc_s go to lib/fallback, used only when the machine's are older.
is_glibc() {
  case "$1" in
    linux-vdso.so.*|ld-linux*.so.*|libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|libresolv.so.*|libutil.so.*|libanl.so.*|libmvec.so.*) return 0 ;;
  esac
  return 1
}
copy_lib() {  # soname, resolved path
  local dest=lib
  case "$1" in libstdc++.so.*|libgcc_s.so.*) dest=lib/fallback ;; esac
  [ -e "$root/$dest/$1" ] || cp -L "$2" "$root/$dest/$1"
}
for p in "${programs[@]}"; do
  while read -r name _ path _; do
    is_glibc "$name" && continue
    [ -n "$path" ] && [ -e "$path" ] || die "$p needs $name, which ldd cannot find"
    copy_lib "$name" "$path"
  done < <(ldd "$build/$p" | grep '=>')
done
# The Vulkan loader, whether the programs link it or open it at run time.
if [ ! -e "$root/lib/libvulkan.so.1" ]; then
  loader=$( (ldconfig -p 2> /dev/null || /sbin/ldconfig -p) | awk '/libvulkan\.so\.1 .*x86-64/ {print $NF}' | head -1 || true)
  [ -n "$loader" ] && cp -L "$loader" "$root/lib/libvulkan.so.1" || echo "gpu-bundle: no Vulkan loader on this machine; the bundle has none" >&2
fi
chmod -R u+w "$root/lib"
strip --strip-unneeded "$root"/lib/*.so* "$root"/lib/fallback/*.so* 2> /dev/null || true

# Data: the tiny model, its golden text, 20 MT-Bench prompts.
cp "$shared/models/stories260K.gguf" "$root/data/"
cp "$shared/golden/stories260K.greedy_256steps.golden.txt" "$root/data/"
head -n 20 "$shared/bench/mt_bench/question.jsonl" > "$root/data/mt_bench_20.jsonl"

# MANIFEST: what was built, for which GPUs, what it needs of the machine.
cache=$build/CMakeCache.txt
cache_value() { sed -n "s/^$1:[A-Z]*=//p" "$cache" 2> /dev/null | head -1; }
symbol_needs() {  # the newest GLIBC_ and GLIBCXX_ versions any program or library asks for
  objdump -T "$root"/bin/* "$root"/lib/*.so* 2> /dev/null | grep -o "$1_[0-9][0-9.]*" | sort -uV | tail -1
}
# The CUDA architectures nvcc compiled for, as the build's own command lines name them.
cuda_codes=$({ grep -rhoE -- '--generate-code=arch=[^ ]*' "$build/build.ninja" "$build"/cuda_backend/CMakeFiles/*/flags.make 2> /dev/null || true; } | grep -oE 'sm_[0-9]+a?|compute_[0-9]+a?' | sort -uV | tr '\n' ' ' || true)
nvcc=$(cache_value CMAKE_CUDA_COMPILER)
if [ -n "$nvcc" ] && [ -n "$cuda_codes" ]; then
  nvcc_release=$("$nvcc" --version 2> /dev/null | grep -o 'release [0-9.]*' || echo "nvcc $nvcc")
  cuda_line="CUDA backend: yes, architectures ${cuda_codes% } (SASS sm_*, PTX compute_*; $nvcc_release)"
else
  cuda_line="CUDA backend: no CUDA backend in this build (configured without a CUDA toolkit): the run has vulkan and cpu rows only"
fi
{
  echo "fafo GPU bundle"
  echo "commit: $(git -C "$here" rev-parse HEAD 2> /dev/null || echo unknown)$(git -C "$here" diff --quiet HEAD 2> /dev/null || echo ' (with uncommitted changes)')"
  echo "built: $(date -u '+%Y-%m-%d %H:%M UTC') on $(. /etc/os-release 2> /dev/null && echo "$PRETTY_NAME"), $(uname -m)"
  echo "build type: $(cache_value CMAKE_BUILD_TYPE)"
  echo "$cuda_line"
  echo "needs: $(symbol_needs GLIBC) (glibc), $(symbol_needs GLIBCXX) (libstdc++; lib/fallback has one when the machine's is older)"
  echo "files:"
  (cd "$root" && find . -type f -printf '%P\t%s\n' | sort | awk -F'\t' '{printf "  %-48s %10d\n", $1, $2}')
} > "$root/MANIFEST"

# tar | xz with a 64 MiB dictionary, which finds the SPIR-V the programs share, and
# preset 1's fast match finder: 13.7 MB in 12 s of one core where -9 made 11.3 MB in
# 61 s (137 MB of files, 2026-12-01).
archive=$out/fafo-gpu.tar.xz
tmp_archive=$stage/fafo-gpu.tar.xz
tar -C "$stage" --owner=0 --group=0 -cf - fafo-gpu | xz --lzma2=preset=1,dict=64MiB -T1 > "$tmp_archive"
size=$(stat -c %s "$tmp_archive")
if [ "$size" -gt $((max_mib * 1024 * 1024)) ]; then
  die "the bundle would be $((size / 1024 / 1024)) MiB, over the $max_mib MiB limit (nothing written)"
fi
mv "$tmp_archive" "$archive"
echo "gpu-bundle: $archive ($((size / 1024)) KiB; $(du -sm "$root" | cut -f1) MiB unpacked)"
echo "gpu-bundle: $cuda_line"
