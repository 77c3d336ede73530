#!/usr/bin/env bash
# Sets up everything torch-neuronx needs on a fresh Debian machine: system
# packages, torch (an installed torch 2.13 or 2.14 is kept; otherwise the CPU
# build of 2.13 where one can be had), the project itself (C++ extension built
# with CMake + ninja + ccache), and the GoogleTest tests of the runtime and
# the backend. Safe to run again: finished steps are skipped quickly.
# PYTHON=python3.12 picks another interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

need_apt=()
command -v ninja >/dev/null || need_apt+=(ninja-build)
command -v ccache >/dev/null || need_apt+=(ccache)
command -v cmake >/dev/null || need_apt+=(cmake)
[ -f /usr/include/gtest/gtest.h ] || need_apt+=(libgtest-dev)
# libffi: compiled programs call Inductor's C++ kernels, whatever their arity.
# (ls fails if any one path is missing: the header is in one place or the other.)
[ -n "$(ls /usr/include/*/ffi.h /usr/include/ffi.h 2>/dev/null)" ] || need_apt+=(libffi-dev)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "== apt: ${need_apt[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

# torch first, so nothing later pulls another build. The supported range is
# also in pyproject.toml, requirements-dev.txt and cmake/TorchLibraries.cmake.
# Prints the installed torch's version if it is in the range, fails otherwise.
if installed=$(TORCH_DEVICE_BACKEND_AUTOLOAD=0 "$PY" -c "
import sys, torch
v = tuple(int(p) for p in torch.__version__.split('+')[0].split('.')[:2])
print(torch.__version__)
sys.exit(0 if (2, 13) <= v < (2, 15) else 1)" 2>/dev/null); then
  echo "== torch: keeping the installed $installed"
elif "$PY" -m pip install -q "torch==2.13.0+cpu" 2>/dev/null; then
  echo "== pip: torch 2.13.0 (CPU build)"
else
  # No CPU build reachable for this Python: PyPI's (on Linux a CUDA build,
  # several GB; torch-neuronx needs none of CUDA and builds against it).
  echo "== pip: torch >=2.13,<2.15 (no CPU build for this Python: PyPI's build)"
  "$PY" -m pip install -q "torch>=2.13,<2.15"
fi
echo "== pip: build and test requirements"
"$PY" -m pip install -q -r requirements-dev.txt

echo "== build: torch_neuronx (CMake + ninja)"
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
# Paths under the tree hashed relative: another clone reuses the cache.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
"$PY" -m pip install -q --no-build-isolation --no-deps -e .

echo "== build: runtime tests"
cmake -S runtime -B build/runtime -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER_LAUNCHER=ccache >/dev/null
ninja -C build/runtime >/dev/null
echo "== build: backend C++ tests (against libtorch)"
ninja -C build/ext torch_neuronx_tests >/dev/null
echo "== setup done"
