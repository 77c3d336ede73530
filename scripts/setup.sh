#!/usr/bin/env bash
# Sets up everything torch-neuronx needs on a fresh Debian machine with
# Python 3.11: system packages, torch 2.13 (the CPU build), the project
# itself (C++ extension built with CMake + ninja + ccache), and the runtime's
# GoogleTest tests. Safe to run again: finished steps are skipped quickly.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

need_apt=()
command -v ninja >/dev/null || need_apt+=(ninja-build)
command -v ccache >/dev/null || need_apt+=(ccache)
command -v cmake >/dev/null || need_apt+=(cmake)
[ -f /usr/include/gtest/gtest.h ] || need_apt+=(libgtest-dev)
# libffi: compiled programs call Inductor's C++ kernels, whatever their arity.
ls /usr/include/*/ffi.h /usr/include/ffi.h >/dev/null 2>&1 || need_apt+=(libffi-dev)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "== apt: ${need_apt[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

# torch first and pinned, so nothing later can pull a CUDA build.
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.__version__.startswith('2.13.') else 1)" 2>/dev/null; then
  echo "== pip: torch 2.13.0 (CPU build)"
  "$PY" -m pip install -q "torch==2.13.0"
fi
echo "== pip: build and test requirements"
"$PY" -m pip install -q -r requirements-dev.txt

echo "== build: torch_neuronx (CMake + ninja)"
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
"$PY" -m pip install -q --no-build-isolation --no-deps -e .

echo "== build: runtime tests"
cmake -S runtime -B build/runtime -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER_LAUNCHER=ccache >/dev/null
ninja -C build/runtime >/dev/null
echo "== setup done"
