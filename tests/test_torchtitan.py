"""TorchTitan (PyPI 0.2.2) trains its Llama 3 debug model on neuron with the CPU's losses.

TorchNeuron documents TorchTitan as its pre-training path. The tests make their own
tokenizer and a c4-format JSON-lines data set (no hub downloads), run
``torchtitan.train`` for a few steps in a process of its own — on neuron, and as a
CPU twin (TorchTitan has no CPU device module: the twin gives it one) — and compare
the losses. With the same seed both initialise the same weights (neuron draws the
CPU's random numbers), so the losses agree to rounding.

TorchTitan imports Triton unconditionally; ``torch_neuronx/torchtitan_support.py``
answers that import for its one module when Triton is not installed.
"""

from __future__ import annotations

import json
import random
import re
import socket
import sys
import textwrap
from pathlib import Path

import pytest
from bounded_job import clean_env, run_bounded

pytest.importorskip("torchtitan")
tokenizers = pytest.importorskip("tokenizers")

STEPS = 3

# Runs torchtitan.train; TT_DEVICE=cpu makes the CPU twin.
RUNNER = textwrap.dedent(
    """
    import os, runpy, sys, types
    import torch  # loads torch_neuronx and its shims
    if os.environ.get("TT_DEVICE") == "cpu":
        # The calls TorchTitan makes of its device module, for the CPU.
        cpu = types.ModuleType("cpu_device_module")
        cpu.__dict__.update(
            current_device=lambda: 0, set_device=lambda d: None,
            synchronize=lambda *a: None, get_device_name=lambda *a: "cpu",
            empty_cache=lambda: None, reset_peak_memory_stats=lambda *a: None,
            memory_stats=lambda *a: {},
            get_device_properties=lambda *a: types.SimpleNamespace(
                name="cpu", total_memory=1 << 34),
        )
        import torchtitan.tools.utils as tu
        tu.device_type, tu.device_module = "cpu", cpu
        import torchtitan.distributed.utils as du
        # A barrier on the accelerator's device ids, which a CPU group lacks.
        du.set_pg_timeouts = lambda *a, **k: None
    sys.argv = ["torchtitan.train"] + sys.argv[1:]
    runpy.run_module("torchtitan.train", run_name="__main__")
    """
)

CONFIG = """
[job]
dump_folder = "{root}/out"
[metrics]
log_freq = 1
[model]
name = "llama3"
flavor = "debugmodel"
hf_assets_path = "{root}/tokenizer"
[optimizer]
name = "AdamW"
lr = 8e-4
[lr_scheduler]
warmup_steps = 2
[training]
local_batch_size = 2
seq_len = 128
steps = {steps}
dataset = "c4_test"
dataset_path = "{root}/c4"
[debug]
seed = 42
[checkpoint]
enable = false
"""


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Path:
    """A BPE tokenizer and a c4-format data set, made here, and the job's config."""
    root = tmp_path_factory.mktemp("torchtitan")
    rng = random.Random(0)
    words = "the cat sat on a mat dog ran in park neuron core tile kernel train step".split()
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(20, 60))) for _ in range(400)]
    (root / "c4").mkdir()
    with open(root / "c4" / "c4.jsonl", "w") as f:
        for t in texts:
            f.write(json.dumps({"text": t}) + "\n")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    specials = ["<unk>", "<|begin_of_text|>", "<|end_of_text|>"]
    tok.train_from_iterator(
        texts, tokenizers.trainers.BpeTrainer(vocab_size=256, special_tokens=specials)
    )
    (root / "tokenizer").mkdir()
    tok.save(str(root / "tokenizer" / "tokenizer.json"))
    config = {"bos_token": specials[1], "eos_token": specials[2], "add_bos_token": True}
    (root / "tokenizer" / "tokenizer_config.json").write_text(json.dumps(config))
    (root / "job.toml").write_text(CONFIG.format(root=root, steps=STEPS))
    (root / "runner.py").write_text(RUNNER)
    return root


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train(assets: Path, device: str, *args: str) -> list[float]:
    """The losses of a single-process torchtitan.train run on ``device``."""
    env = clean_env(
        drop_local=True,
        TT_DEVICE=device,
        WORLD_SIZE="1",
        RANK="0",
        LOCAL_RANK="0",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(_free_port()),
    )
    cmd = [sys.executable, str(assets / "runner.py"), "--job.config_file", str(assets / "job.toml")]
    out, err = run_bounded(
        [*cmd, *args], env=env, timeout=600, cwd=assets, what=f"torchtitan.train on {device}"
    )
    out = out + err  # TorchTitan logs to stderr
    out = re.sub(r"\x1b\[[0-9;]*m", "", out)
    losses = [float(x) for x in re.findall(r"step:\s+\d+\s+loss:\s+([0-9.]+)", out)]
    assert len(losses) == STEPS, out[-4000:]
    return losses


@pytest.fixture(scope="module")
def cpu_losses(assets) -> list[float]:
    return train(assets, "cpu")


def test_llama3_debug_model_trains_on_neuron_with_the_cpus_losses(assets, cpu_losses):
    losses = train(assets, "neuron")
    assert losses == pytest.approx(cpu_losses, rel=1e-4)
    assert losses[-1] < losses[0]  # it learns


def test_compiled_with_selective_activation_checkpointing(assets, cpu_losses):
    # TorchNeuron's tutorial flow: --compile.enable --compile.backend neuron with
    # selective activation checkpointing (the recomputed random ops, SDPA's layouts).
    losses = train(
        assets,
        "neuron",
        "--compile.enable",
        "--compile.backend",
        "neuron",
        "--activation_checkpoint.mode",
        "selective",
    )
    assert losses == pytest.approx(cpu_losses, rel=1e-4)
