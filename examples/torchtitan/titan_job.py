"""A TorchTitan job on this machine: its assets, its command, what its log says.

TorchTitan's verification run needs a tokenizer and a c4-format data set; TorchNeuron's
tutorial takes TorchTitan's bundled test tokenizer and the ``c4_test`` split. Here both
are made locally (no hub downloads): a small BPE tokenizer trained on generated text,
and that text as c4-style JSON lines. ``command`` builds the ``torchtitan.train`` call
on ``neuron`` — or on the CPU, the twin the losses are compared with (TorchTitan has
no CPU device module: the runner gives it one). Used by ``train_debug_model.py``
beside it and by ``tests/test_torchtitan.py``.
"""

from __future__ import annotations

import json
import random
import re
import socket
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

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
        accelerator = tu.device_module
        tu.device_type, tu.device_module = "cpu", cpu
        import torchtitan.distributed.parallel_dims  # noqa: F401  (imports device_type)
        for name, module in list(sys.modules.items()):  # what already imported them
            if name.startswith("torchtitan.") and module is not None:
                if getattr(module, "device_type", None) == "neuron":
                    module.device_type = "cpu"
                if getattr(module, "device_module", None) is accelerator:
                    module.device_module = cpu
        import torchtitan.distributed.utils as du
        # A barrier on the accelerator's device ids, which a CPU group lacks.
        du.set_pg_timeouts = lambda *a, **k: None
        # DTensor's RNG tracker keeps the accelerator's (neuron's) state, but fork_rng
        # restores the CPU's after each of a CPU mesh's random ops: trunc_normal_'s
        # rejection loop then redraws the same numbers forever. No tracker for the
        # twin: its sharded runs start from a seed checkpoint, so their initial draws
        # do not matter.
        import torch.distributed.tensor._dispatch as dd
        import torch.distributed.tensor._random as dr
        dr.manual_seed = lambda *a, **k: None
        dd.is_rng_supported_mesh = lambda mesh: False
        # FSDP2 reduces gradients with PREMUL_SUM(1/factor), which gloo lacks: SUM, then
        # the division (TorchTitan's factor is 1: the same numbers).
        import torch.distributed.fsdp._fully_shard._fsdp_collectives as fc
        import inspect
        divide_factors = fc._get_gradient_divide_factors
        def sum_then_divide(*a, **k):
            call = inspect.signature(divide_factors).bind(*a, **k)
            call.arguments["force_sum_reduction_for_comms"] = True
            return divide_factors(*call.args, **call.kwargs)
        fc._get_gradient_divide_factors = sum_then_divide
        # TorchTitan 0.3's MoE token exchange (spmd_types) calls dist.all_to_all with
        # chunks of different sizes; gloo's list form takes equal sizes only, its
        # single-tensor form any splits: the same exchange through that one.
        import torch.distributed as tdist
        list_all_to_all = tdist.all_to_all
        def uneven_all_to_all(outputs, inputs, group=None, async_op=False):
            sizes = {t.shape for t in [*outputs, *inputs]}
            if async_op or len(sizes) == 1:
                return list_all_to_all(outputs, inputs, group=group, async_op=async_op)
            out_numel = [t.numel() for t in outputs]
            flat_in = torch.cat([t.reshape(-1) for t in inputs])
            flat_out = flat_in.new_empty(sum(out_numel))
            tdist.all_to_all_single(flat_out, flat_in, out_numel,
                                    [t.numel() for t in inputs], group=group)
            for t, part in zip(outputs, flat_out.split(out_numel)):
                t.copy_(part.view_as(t))
        tdist.all_to_all = uneven_all_to_all
        # MoE routing counts tokens per expert with histc of integer expert ids, which
        # CUDA (and neuron) accept and the CPU refuses: the same bins in float64.
        histc = torch.histc
        def integer_histc(input, bins=100, min=0, max=0, *, out=None):
            if input.is_floating_point() or out is not None:
                return histc(input, bins, min, max, out=out)
            return histc(input.double(), bins, min, max).to(input.dtype)
        torch.histc = integer_histc
        # FlexAttention models: the CPU compiles FlexAttention for inference only and
        # refuses its backward, so the twin runs flex_attention unfused (the dense
        # math its eager path is; neuron compiles that same math).
        import torch.nn.attention.flex_attention as fa
        fa._validate_device = lambda *a: None
        try:  # 0.2.x
            import torchtitan.models.attention as ta
            ta.FlexAttentionWrapper._compiled_flex_attn = fa.flex_attention
        except ModuleNotFoundError:  # 0.3.x
            import torchtitan.models.common.attention as ta
            ta.FlexAttention._compiled_flex_attn = fa.flex_attention
        # torch 2.14's dynamo asks the accelerator for its current stream when it
        # starts tracing (create_block_mask is compiled), which initialises the
        # accelerator, as it would CUDA, inside TorchTitan 0.3's checkpointed forward;
        # checkpoint then refuses a device state born in its forward. The twin's
        # checkpoints keep the CPU's state only.
        from torch.utils.checkpoint import DefaultDeviceType
        DefaultDeviceType.set_device_type("cpu")
        # Block masks are made on the current accelerator unless told: the CPU here.
        ta._compiled_create_block_mask = lambda *a, **k: fa.create_block_mask(
            *a, **{"device": "cpu", **k})
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
local_batch_size = {batch}
seq_len = {seq_len}
steps = 10
dataset = "c4_test"
dataset_path = "{root}/c4"
[debug]
seed = 42
[checkpoint]
enable = false
"""

LOCAL_BATCH = 2
SEQ_LEN = 128


def make_assets(root: Path) -> Path:
    """Writes into ``root`` a BPE tokenizer, a c4-format data set, the job's config
    (``job.toml``) and the runner; returns ``root``."""
    import tokenizers

    rng = random.Random(0)
    words = "the cat sat on a mat dog ran in park neuron core tile kernel train step".split()
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(20, 60))) for _ in range(400)]
    (root / "c4").mkdir(parents=True, exist_ok=True)
    with open(root / "c4" / "c4.jsonl", "w") as f:
        for t in texts:
            f.write(json.dumps({"text": t}) + "\n")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    specials = ["<unk>", "<|begin_of_text|>", "<|end_of_text|>"]
    tok.train_from_iterator(
        texts, tokenizers.trainers.BpeTrainer(vocab_size=256, special_tokens=specials)
    )
    (root / "tokenizer").mkdir(exist_ok=True)
    tok.save(str(root / "tokenizer" / "tokenizer.json"))
    config = {"bos_token": specials[1], "eos_token": specials[2], "add_bos_token": True}
    (root / "tokenizer" / "tokenizer_config.json").write_text(json.dumps(config))
    (root / "job.toml").write_text(CONFIG.format(root=root, batch=LOCAL_BATCH, seq_len=SEQ_LEN))
    (root / "runner.py").write_text(RUNNER)
    return root


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# TorchTitan 0.3 takes no TOML file: a registered config (``--module``, ``--config``)
# and command-line overrides, here the settings CONFIG gives 0.2 (the debug models'
# configs already have its learning rate, 8e-4, and 2 warm-up steps).
SETTINGS_0_3 = (
    "--hf-assets-path {root}/tokenizer --dataloader.dataset c4_test "
    "--dataloader.dataset-path {root}/c4 --training.local-batch-size {batch} "
    "--training.seq-len {seq_len} --metrics.log-freq 1 --debug.seed 42 "
    "--checkpoint.no-enable --validator.no-enable"
)


def installed_version() -> tuple[int, int]:
    """TorchTitan's (major, minor) in this environment."""
    from importlib.metadata import version

    major, minor = version("torchtitan").split(".")[:2]
    return int(major), int(minor)


def command(
    root: Path, device: str, *args: str, nproc: int = 1, steps: int = 10
) -> tuple[list[str], dict[str, str]]:
    """The command line and the environment variables to add for a ``steps``-step
    ``torchtitan.train`` run on ``device`` with ``nproc`` processes (torchrun when more
    than one), in the installed TorchTitan's syntax (0.2's TOML file, or 0.3's
    ``--module``/``--config``: Llama 3's debug model unless ``args`` name another).
    Each run gets a dump folder of its own (its checkpoints are its own) unless
    ``args`` names one."""
    env = {"TT_DEVICE": device}
    if installed_version() >= (0, 3):
        job = [str(root / "runner.py")]
        if "--module" not in args:
            job += ["--module", "llama3", "--config", "llama3_debugmodel"]
        job += SETTINGS_0_3.format(root=root, batch=LOCAL_BATCH, seq_len=SEQ_LEN).split()
        dump = "--dump-folder"
    else:
        job = [str(root / "runner.py"), "--job.config_file", str(root / "job.toml")]
        dump = "--job.dump_folder"
    if nproc == 1:
        env.update(WORLD_SIZE="1", RANK="0", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1")
        env["MASTER_PORT"] = str(_free_port())
        cmd = [sys.executable, *job]
    else:
        # The ranks' log lines come from rank 0 only; the logged loss is the global one.
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        cmd += ["--nproc_per_node", str(nproc), "--local-ranks-filter", "0", *job]
    if dump not in args:
        args = (dump, tempfile.mkdtemp(dir=root, prefix="out-"), *args)
    return [*cmd, "--training.steps", str(steps), *args], env


@dataclass
class Log:
    """What a run's log says, step by step."""

    steps: list[int]
    losses: list[float]
    tokens_per_second: list[float]  # per device

    def step_seconds(self, tokens_per_step: int = LOCAL_BATCH * SEQ_LEN) -> list[float]:
        return [tokens_per_step / tps for tps in self.tokens_per_second]


_STEP_LINE = re.compile(r"step:\s*(\d+)\s+loss:\s*([0-9.]+).*?tps:\s*([0-9,]+)")


def parse(log: str) -> Log:
    log = re.sub(r"\x1b\[[0-9;]*m", "", log)  # TorchTitan colours its lines
    rows = [
        (int(s), float(loss), float(tps.replace(",", "")))
        for s, loss, tps in _STEP_LINE.findall(log)
    ]
    return Log([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])
