#!/usr/bin/env bash
# Sets everything up, then runs all tests: the runtime's GoogleTest suite
# (ctest) and the pytest suites (features and the OpInfo differential suite).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo "== ctest (runtime)"
ctest --test-dir build/runtime --output-on-failure
echo "== pytest"
python3 -m pytest -q tests "$@"
