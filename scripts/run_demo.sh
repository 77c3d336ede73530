#!/usr/bin/env bash
# Sets everything up, then runs the main job: the small GPT trained on
# `neuron` on the text shipped in examples/gpt/data.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
python3 examples/gpt/train.py --device neuron --steps 300 "$@"
