#!/usr/bin/env bash
# Sets everything up, then runs all tests: the GoogleTest suites of the
# runtime and of the backend (ctest) and the pytest suites (features and the
# OpInfo differential suite).
#
# The pytest suites run as two pytest sessions side by side (one per CPU): the
# tests that start torch.distributed jobs (ranks in their own interpreters; the
# only ones that create shared-memory segments, which some of them check are
# gone afterwards), plus test_compile.py and the TorchTitan runs to even out
# the two, in one; everything else in the other. Each prints its own report; the multi-process one is printed
# when both are done. Extra arguments are pytest options for both sessions. On a
# single CPU, one session runs all.
#
# Then one cell of the version matrix (scripts/test_matrix.sh): the same tree
# built and tested in a virtual environment with torch 2.14 (a CUDA build of
# ~5.5 GB, removed afterwards; on this machine's kind it lies on disk).
# TORCH_NEURONX_MATRIX_CELLS names other cells, or none ("").
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The suites use no third-party pytest plugin: those other packages install into
# the same environment (the machine's image brings five; another test suite run
# beside this one may add its own) must not change what runs here.
export PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
echo "== ctest (runtime)"
ctest --test-dir build/runtime --output-on-failure
echo "== ctest (backend and its C++ API, against libtorch)"
ctest --test-dir build/ext --output-on-failure
echo "== pytest"
MULTI_PROCESS=(tests/test_distributed_*.py tests/test_hf_ecosystem.py tests/test_rng_tensor_modes.py
  tests/test_compile.py tests/test_torchtitan.py)
# A representative part of the suite again with adaptive eager on (training
# loops, streams and events, RNG, autocast, device errors, memory, Hugging Face
# models, NKI and SDPA routing, DDP/FSDP2 on 2 ranks, the OpInfo differential
# suite): the mode must not change a result.
ADAPTIVE=(tests/test_training.py tests/test_streams_events.py tests/test_rng.py
  tests/test_ops_basic.py tests/test_autocast.py tests/test_layer_norm.py
  tests/test_device_errors.py tests/test_memory.py tests/test_hf_transformers.py
  tests/test_nki_torch.py tests/test_sdpa_fused_cpu_kernel.py
  tests/test_distributed_parallel.py tests/opinfo/test_opinfo_differential.py)
run_adaptive() {
  echo "== pytest with adaptive eager on (TORCH_NEURONX_ADAPTIVE_EAGER=1)"
  TORCH_NEURONX_ADAPTIVE_EAGER=1 python3 -m pytest -q "${ADAPTIVE[@]}" "$@"
}
# A part of the suite again with device memory protected (the HBM arenas
# inaccessible to the host outside device work): a host access to device memory
# outside device work would end it with SIGSEGV. Subprocesses the tests start
# run without it (tests/conftest.py gives them a clean environment).
PROTECTED=(tests/test_ops_basic.py tests/test_training.py tests/test_streams_events.py
  tests/test_graphs.py tests/test_adaptive_eager.py tests/test_memory.py
  tests/test_host_memory.py tests/test_fork.py tests/test_nki_torch.py tests/test_rng.py
  tests/test_autocast.py)
run_protected() {
  echo "== pytest with device memory protected (TORCH_NEURONX_PROTECT_DEVICE_MEMORY=1)"
  TORCH_NEURONX_PROTECT_DEVICE_MEMORY=1 python3 -m pytest -q "${PROTECTED[@]}" "$@"
}
run_matrix() {
  local cells=${TORCH_NEURONX_MATRIX_CELLS-py3.11-torch2.14}
  # shellcheck disable=SC2086  # a list of cell names
  [ -z "$cells" ] || bash scripts/test_matrix.sh $cells
}
if [ "$(nproc)" -lt 2 ]; then
  python3 -m pytest -q tests "$@"
  run_adaptive "$@"
  run_protected "$@"
  run_matrix
  exit
fi
log=$(mktemp /tmp/pytest-multi-process.XXXXXX.log)
{ python3 -m pytest -q "${MULTI_PROCESS[@]}" "$@" && run_adaptive "$@"; } >"$log" 2>&1 &
multi=$!
trap 'kill "$multi" 2>/dev/null || true' INT TERM
ignore=()
for f in "${MULTI_PROCESS[@]}"; do ignore+=("--ignore=$f"); done
rest_rc=0
{ python3 -m pytest -q tests "${ignore[@]}" "$@" && run_protected "$@"; } || rest_rc=$?
multi_rc=0
wait "$multi" || multi_rc=$?
echo "== pytest (multi-process jobs: ${MULTI_PROCESS[*]}; then adaptive eager on)"
cat "$log"
rm -f "$log"
matrix_rc=0
run_matrix || matrix_rc=$?
[ "$rest_rc" -eq 0 ] && [ "$multi_rc" -eq 0 ] && [ "$matrix_rc" -eq 0 ]
