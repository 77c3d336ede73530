#!/usr/bin/env bash
# Builds and tests torch-neuronx against other Python and torch versions, one
# cell (Python x torch) at a time, each in a virtual environment of its own.
#
#   bash scripts/test_matrix.sh                      # every cell below
#   bash scripts/test_matrix.sh py3.11-torch2.14     # named cells
#   bash scripts/test_matrix.sh --keep py3.12-torch2.14   # keep the venv
#
# A cell: a venv under build/matrix/<cell> (MATRIX_DIR overrides), the torch
# the cell names installed into it (pip takes a wheel that lies on this disk
# where there is one, else PyPI's build — a CUDA build of several GB, see
# docs/development.md for the cost), a copy of the source tree built there
# (its own CMake build directory and extension, so the main environment's
# build is left as it is), and the representative test subset below. Each
# cell prints one summary line; the venv and build are removed afterwards
# unless --keep (a CUDA torch is ~5.5 GB). Exit status: non-zero if any cell
# failed.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

ALL_CELLS=(py3.11-torch2.13 py3.11-torch2.14 py3.12-torch2.14 py3.13-torch2.14)
# Device, ops, autocast, compile, NKI, distributed (one process per rank),
# profiler, the wheel, TorchTitan.
SUBSET=(tests/test_device_module.py tests/test_ops_basic.py tests/test_autocast.py
  tests/test_rng.py tests/test_streams_events.py tests/test_memory.py tests/test_fork.py
  tests/test_compile.py tests/test_nki_torch.py tests/test_nki_language.py
  tests/test_distributed_collectives.py tests/test_distributed_parallel.py
  tests/test_profiler_timeline.py tests/test_training.py tests/test_wheel.py
  tests/test_torchtitan.py)

keep=0
cells=()
for arg in "$@"; do
  case "$arg" in
    --keep) keep=1 ;;
    py3.*-torch2.*) cells+=("$arg") ;;
    *) echo "test_matrix.sh: unknown argument '$arg' (cells: ${ALL_CELLS[*]})" >&2; exit 2 ;;
  esac
done
[ ${#cells[@]} -gt 0 ] || cells=("${ALL_CELLS[@]}")
MATRIX_DIR=${MATRIX_DIR:-$ROOT/build/matrix}
mkdir -p "$MATRIX_DIR"
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}

# The interpreter for "3.12": pyenv's, else one on PATH.
find_python() {
  local v=$1 p
  for p in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$v".*/bin/python"$v"; do
    [ -x "$p" ] && { echo "$p"; return; }
  done
  command -v "python$v" || true
}

run_cell() {
  local cell=$1 pyver torchver dir py start rc=0
  pyver=${cell#py}; pyver=${pyver%%-*}
  torchver=${cell#*-torch}
  dir=$MATRIX_DIR/$cell
  py=$(find_python "$pyver")
  if [ -z "$py" ]; then
    echo "== matrix $cell: no Python $pyver on this machine" >&2
    return 1
  fi
  start=$(date +%s)
  echo "== matrix $cell: venv ($py)"
  rm -rf "$dir"
  mkdir -p "$dir/src"
  "$py" -m venv "$dir/venv"
  local vpy=$dir/venv/bin/python
  # The venv's tools (cmake, ninja) before any other interpreter's.
  local PATH=$dir/venv/bin:$PATH
  "$vpy" -m pip install -q --upgrade pip
  # torch first, alone: nothing later may replace it.
  "$vpy" -m pip install -q "torch==$torchver.*"
  # What the subset needs; the Hugging Face stack and the docs are the main run's.
  "$vpy" -m pip install -q numpy ml_dtypes pytest expecttest pyyaml "cmake>=3.18" ninja "setuptools>=64" wheel
  # TorchTitan's release for the cell's torch (tests/test_torchtitan.py): 0.3.0 needs
  # torch >= 2.14 and spmd_types 0.2.3; the main run has 0.2.2 (torch 2.13).
  case "$torchver" in
    2.13) ;;
    *) "$vpy" -m pip install -q torchtitan==0.3.0 spmd_types==0.2.3 tokenizers ;;
  esac
  local t_venv=$(($(date +%s) - start))

  echo "== matrix $cell: build"
  # The tree as it is now (committed or not), without build outputs.
  git ls-files -co --exclude-standard -z | tar --null -T - -cf - | tar -xf - -C "$dir/src"
  local t0=$(date +%s)
  # CCACHE_BASEDIR: the cell's own paths (venv, source, build) hashed relative,
  # so the same cell built again, from any clone, comes from ccache.
  (cd "$dir/src" && CCACHE_BASEDIR=$dir TORCH_NEURONX_BUILD_DIR=$dir/build \
    "$vpy" -m pip install -q --no-build-isolation --no-deps -e .)
  local t_build=$(($(date +%s) - t0))

  echo "== matrix $cell: tests"
  t0=$(date +%s)
  local log=$dir/pytest.log
  (cd "$dir/src" && TORCH_NEURONX_BUILD_DIR=$dir/build \
    "$vpy" -m pytest -q -p no:cacheprovider "${SUBSET[@]}") >"$log" 2>&1 || rc=$?
  local t_test=$(($(date +%s) - t0))
  tail -n 30 "$log"
  local disk
  disk=$(du -sh "$dir" 2>/dev/null | cut -f1)
  local versions
  # From the cell's tree, without autoloading: the caller's directory may hold
  # another build's torch_neuronx.
  versions=$(cd "$dir/src" && TORCH_DEVICE_BACKEND_AUTOLOAD=0 "$vpy" -c \
    "import sys, torch; print(f'Python {sys.version.split()[0]}, torch {torch.__version__}')")
  echo "== matrix $cell: $versions; $(tail -n 1 "$log" | tr -d '=')" \
    "(venv ${t_venv}s, build ${t_build}s, tests ${t_test}s, disk $disk)"
  if [ "$keep" -eq 0 ]; then rm -rf "$dir"; fi
  return "$rc"
}

failed=()
for cell in "${cells[@]}"; do
  run_cell "$cell" || failed+=("$cell")
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "== matrix: failed: ${failed[*]}"
  exit 1
fi
echo "== matrix: all passed (${cells[*]})"
