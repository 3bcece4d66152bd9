#!/usr/bin/env bash
# Installs every Debian 12 package needed to build, test and run fafo and fafo-studio.
# Usage: tools/setup.sh   (re-runs itself with sudo when not root)
set -euo pipefail

if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    exec sudo "$0" "$@"
  fi
  echo "tools/setup.sh: needs root to install packages (and sudo is not installed); run it as root" >&2
  exit 1
fi

packages=(
  # toolchain
  build-essential cmake ninja-build pkg-config git python3
  # the GPU bundle (tools/gpu-bundle.sh): xz, strip and objdump
  xz-utils binutils
  # Vulkan: loader + headers, Mesa's CPU driver (lavapipe), validation layers, shader compiler
  # (glslang-dev: its library, for tools/compile_shaders)
  libvulkan-dev vulkan-tools mesa-vulkan-drivers vulkan-validationlayers
  glslang-tools glslang-dev spirv-tools
  # app: GLFW, Dear ImGui (static lib with glfw/opengl3/vulkan backends), stb, OpenGL, headless X
  libglfw3-dev libimgui-dev libstb-dev libgl-dev libgl1-mesa-dri xvfb xauth
  # libraries used by the runtime and CLI (suffix arrays for corpus indexes: libdivsufsort)
  nlohmann-json3-dev libcli11-dev libdivsufsort-dev
  # fafo serve's HTTP server and the tests' client
  libcpp-httplib-dev
  # the cpu backend's SIMD kernels (Google Highway, dispatched at run time)
  libhwy-dev
  # fafo-care's eigen-decompositions and SVDs (tools/care: GQA -> MLA conversion)
  libeigen3-dev
  # tests; clang with its sanitizer and libFuzzer runtimes (tools/sanitize.sh, tools/fuzz.sh)
  libgtest-dev libgmock-dev googletest tmux clang libclang-rt-14-dev
)

export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${packages[@]}"
# The official openai client (npm), which tests/test_server.cpp drives against fafo
# serve: Node.js from Debian when the machine has none, the package from tests/node's lock.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  apt-get install -y -q --no-install-recommends nodejs npm
fi
npm ci --prefix "$(dirname "$0")/../tests/node" --no-audit --no-fund --loglevel=error
echo "tools/setup.sh: all packages installed"
