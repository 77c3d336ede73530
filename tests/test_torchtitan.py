"""TorchTitan trains its debug models on neuron with the CPU's losses: PyPI 0.2.2 (torch
2.13, the main run) and 0.3.0 (torch 2.14, the version matrix's torch-2.14 cell).

TorchNeuron documents TorchTitan as its pre-training path. The tests make their own
tokenizer and a c4-format JSON-lines data set (no hub downloads), run
``torchtitan.train`` for a few steps in a process of its own — on neuron, and as a
CPU twin (TorchTitan has no CPU device module: the twin gives it one) — and compare
the losses. With the same seed both initialise the same weights (neuron draws the
CPU's random numbers), so the losses agree to rounding.

TorchTitan imports Triton unconditionally; ``torch_neuronx/adapters/torchtitan_support.py``
answers that import for its one module when Triton is not installed.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from bounded_job import clean_env, run_bounded

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "torchtitan"))
import titan_job  # noqa: E402  (the example's job: assets, command, log)

pytest.importorskip("torchtitan")
pytest.importorskip("tokenizers")

# TorchTitan 0.2 (torch 2.13, the main run) takes a TOML file; 0.3 (torch 2.14, the
# version matrix's torch-2.14 cell) registered configs and other option names.
VERSION = titan_job.installed_version()
ONLY_0_2 = pytest.mark.skipif(VERSION >= (0, 3), reason="TorchTitan 0.2's options")
ONLY_0_3 = pytest.mark.skipif(VERSION < (0, 3), reason="TorchTitan 0.3 (torch >= 2.14)")

STEPS = 3


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Path:
    """A BPE tokenizer, a c4-format data set and the job's config, made here."""
    return titan_job.make_assets(tmp_path_factory.mktemp("torchtitan"))


def train(
    assets: Path,
    device: str,
    *args: str,
    nproc: int = 1,
    steps: int = STEPS,
    logged: int | None = None,
    timeout: float = 600,
) -> list[float]:
    """The losses of a torchtitan.train run on ``device`` with ``nproc`` processes,
    ``steps`` steps of which ``logged`` (default all) are expected in the log — a
    resumed run logs only the steps after its checkpoint."""
    cmd, extra = titan_job.command(assets, device, *args, nproc=nproc, steps=steps)
    env = clean_env(drop_local=True, **extra)
    what = f"torchtitan.train on {device} x{nproc} {' '.join(args)}"
    out, err = run_bounded(cmd, env=env, timeout=timeout, cwd=assets, what=what)
    log = titan_job.parse(out + err)  # TorchTitan logs to stderr
    assert len(log.losses) == (steps if logged is None else logged), (out + err)[-4000:]
    return log.losses


@pytest.fixture(scope="module")
def cpu_losses(assets) -> list[float]:
    return train(assets, "cpu")


def test_llama3_debug_model_trains_on_neuron_with_the_cpus_losses(assets, cpu_losses):
    losses = train(assets, "neuron")
    assert losses == pytest.approx(cpu_losses, rel=1e-4)
    assert losses[-1] < losses[0]  # it learns


@ONLY_0_2
@pytest.mark.parametrize("checkpointing", ["selective", "none"])
def test_compiled(assets, cpu_losses, checkpointing):
    # TorchNeuron's tutorial flow: --compile.enable --compile.backend neuron, with
    # selective activation checkpointing (the recomputed random ops, SDPA's layouts)
    # and without.
    compiled = ("--compile.enable", "--compile.backend", "neuron")
    losses = train(assets, "neuron", *compiled, "--activation_checkpoint.mode", checkpointing)
    assert losses == pytest.approx(cpu_losses, rel=1e-4)


@ONLY_0_2
def test_flex_attention_model(assets):
    # The Llama 3 debug model with FlexAttention and document masking (block-causal
    # over the EOS-separated texts): TorchTitan compiles flex_attention and the block
    # mask with Inductor (backend "inductor", on neuron tensors) inside an autocast
    # region. The CPU twin runs FlexAttention unfused (the CPU compiles no backward).
    flex = ("--model.flavor", "debugmodel_flex_attn")
    cpu = train(assets, "cpu", *flex)
    losses = train(assets, "neuron", *flex)
    assert losses == pytest.approx(cpu, rel=1e-4)


FSDP2 = ("--parallelism.data_parallel_shard_degree", "2")
TP2 = ("--parallelism.tensor_parallel_degree", "2")
FLOAT8 = ("--model.converters", "quantize.linear.float8", "--quantize.linear.float8.emulate")


@pytest.fixture(scope="module")
def seed(assets) -> tuple[str, ...]:
    """Options that start a run from the weights one process initialises (TorchTitan's
    seed checkpoint): a sharded model draws its initial weights shard by shard, which
    gives other weights than one process draws — on CUDA as here."""
    dump = assets / "seed"
    train(
        assets,
        "cpu",
        "--checkpoint.enable",
        "--checkpoint.create_seed_checkpoint",
        "--job.dump_folder",
        str(dump),
        logged=0,
    )
    return (
        "--checkpoint.enable",
        "--checkpoint.initial_load_path",
        str(dump / "checkpoint" / "step-0"),
    )


@pytest.fixture(scope="module")
def cpu_fsdp2_losses(assets, seed) -> list[float]:
    # The CPU twin on 2 processes (gloo): each data-parallel rank reads its own part of
    # the data, so the losses of a data-parallel run differ from a single process's.
    return train(assets, "cpu", *FSDP2, *seed, nproc=2)


@ONLY_0_2
def test_tensor_parallel_on_2_processes_has_the_single_process_losses(assets, seed, cpu_losses):
    # TP shards every matmul but both ranks read the same batch: the one-process losses.
    losses = train(assets, "neuron", *TP2, *seed, nproc=2)
    assert losses == pytest.approx(cpu_losses, rel=1e-4)


@ONLY_0_2
def test_fsdp2_on_2_processes(assets, seed, cpu_fsdp2_losses):
    losses = train(assets, "neuron", *FSDP2, *seed, nproc=2)
    assert losses == pytest.approx(cpu_fsdp2_losses, rel=1e-4)


@ONLY_0_2
def test_fsdp_x_tensor_parallel_on_4_processes(assets, seed, cpu_fsdp2_losses):
    # Two data-parallel ranks, each a TP pair: every data-parallel rank reads what it
    # reads under FSDP2 x 2, so the losses are FSDP2 x 2's.
    losses = train(assets, "neuron", *FSDP2, *TP2, *seed, nproc=4, timeout=900)
    assert losses == pytest.approx(cpu_fsdp2_losses, rel=1e-4)


@ONLY_0_2
def test_float8_training_emulated(assets):
    pytest.importorskip("torchao")
    cpu = train(assets, "cpu", *FLOAT8)
    losses = train(assets, "neuron", *FLOAT8)
    assert losses == pytest.approx(cpu, rel=1e-4)


@ONLY_0_2
def test_distributed_checkpoint_save_and_resume(assets, tmp_path):
    # FSDP2 x 2 saves sharded (DCP) every 2 steps; a run stopped after step 2 and
    # started again resumes from its checkpoint (weights, optimizer, data loader) and
    # logs the uninterrupted run's losses for steps 3 and 4.
    ckpt = ("--checkpoint.enable", "--checkpoint.interval", "2")
    ckpt += ("--checkpoint.no_last_save_model_only",)  # the last save resumes too
    whole = train(
        assets, "neuron", *FSDP2, *ckpt, "--job.dump_folder", str(tmp_path / "a"), nproc=2, steps=4
    )
    stopped = ("--job.dump_folder", str(tmp_path / "b"))
    first = train(assets, "neuron", *FSDP2, *ckpt, *stopped, nproc=2, steps=2)
    assert first == whole[:2]
    assert sorted(p.name for p in (tmp_path / "b" / "checkpoint").iterdir()) == ["step-2"]
    resumed = train(assets, "neuron", *FSDP2, *ckpt, *stopped, nproc=2, steps=4, logged=2)
    assert resumed == whole[2:]


DEEPSEEK = ("--model.name", "deepseek_v3", "--model.flavor", "debugmodel")


@ONLY_0_2
def test_moe_with_expert_parallelism(assets):
    # DeepSeek-V3's debug model (8 routed experts, top 3, 2 shared): FSDP2 x 2 with the
    # experts split over the 2 ranks (tokens dispatched by all-to-all), from one seed.
    # Parameters in float32: with FSDP's bfloat16 parameters the MoE layers' bfloat16
    # sums round differently from the CPU twin's (which runs one thread per rank under
    # torchrun) and the losses differ by ~5e-4; in float32 they are the CPU's.
    dump = assets / "seed-deepseek"
    seed_run = ("--checkpoint.enable", "--checkpoint.create_seed_checkpoint")
    train(assets, "cpu", *DEEPSEEK, *seed_run, "--job.dump_folder", str(dump), logged=0)
    seed = ("--checkpoint.enable", "--checkpoint.initial_load_path")
    seed += (str(dump / "checkpoint" / "step-0"),)
    ep = (*DEEPSEEK, *FSDP2, "--parallelism.expert_parallel_degree", "2", *seed)
    ep += ("--training.mixed_precision_param", "float32")
    cpu = train(assets, "cpu", *ep, nproc=2)
    losses = train(assets, "neuron", *ep, nproc=2)
    assert losses == pytest.approx(cpu, rel=1e-5)
    assert losses[-1] < losses[0]


# TorchTitan 0.3. Parameters in float32: a single process otherwise trains under
# autocast to bfloat16, whose op lists are the CPU's on the twin and CUDA's on neuron
# (the losses then differ by ~1e-5, test_llama3_debug_model_... above); in float32
# neuron gives the CPU's losses to the digits TorchTitan logs.
F32 = ("--training.mixed-precision-param", "float32")
QWEN3 = ("--module", "qwen3", "--config", "qwen3_debugmodel")
DEEPSEEK_0_3 = ("--module", "deepseek_v3", "--config", "deepseek_v3_debugmodel")


def seed_checkpoint_0_3(assets: Path, name: str, *model: str) -> tuple[str, ...]:
    """Options that start a 0.3 run from the weights one CPU process initialises
    (see ``seed``)."""
    dump = assets / name
    seed_run = ("--checkpoint.enable", "--checkpoint.create-seed-checkpoint")
    train(assets, "cpu", *model, *seed_run, "--dump-folder", str(dump), logged=0)
    return ("--checkpoint.enable", "--checkpoint.initial-load-path", f"{dump}/checkpoint/step-0")


@pytest.fixture(scope="module")
def seed_0_3(assets) -> tuple[str, ...]:
    return seed_checkpoint_0_3(assets, "seed-0.3")


@pytest.fixture(scope="module")
def cpu_f32_losses(assets) -> list[float]:
    return train(assets, "cpu", *F32)


@ONLY_0_3
@pytest.mark.parametrize("model", [QWEN3, DEEPSEEK_0_3], ids=["qwen3", "deepseek_v3"])
def test_0_3_models_train_with_the_cpus_losses(assets, model):
    # Qwen3 (dense) and DeepSeek-V3 (MoE: 8 routed experts, top 3, 2 shared) debug
    # models; like Llama 3's, their attention is FlexAttention, compiled by Inductor
    # on neuron tensors and run unfused on the CPU twin.
    cpu = train(assets, "cpu", *model, *F32)
    losses = train(assets, "neuron", *model, *F32)
    assert losses == pytest.approx(cpu, rel=1e-5)
    assert losses[-1] < losses[0]


@ONLY_0_3
def test_0_3_compiled(assets, cpu_f32_losses):
    # 0.3 takes only "inductor" (or "aot_eager") for its FlexAttention models: it
    # refuses --compile.backend neuron. Inductor compiles the model on neuron tensors
    # (the device's Inductor backend, docs/compile.md).
    compiled = ("--compile.enable", "--compile.backend", "inductor")
    losses = train(assets, "neuron", *compiled, *F32)
    assert losses == pytest.approx(cpu_f32_losses, rel=1e-5)


@ONLY_0_3
@pytest.mark.parametrize("parallel", ["fsdp2", "tp"])
def test_0_3_fsdp2_and_tensor_parallel_on_2_processes(assets, seed_0_3, cpu_f32_losses, parallel):
    seed = seed_0_3
    if parallel == "tp":  # both ranks read the same batch: the one-process losses
        losses = train(
            assets, "neuron", "--parallelism.tensor-parallel-degree", "2", *seed, *F32, nproc=2
        )
        assert losses == pytest.approx(cpu_f32_losses, rel=1e-5)
        return
    fsdp = ("--parallelism.data-parallel-shard-degree", "2", *seed, *F32)
    cpu = train(assets, "cpu", *fsdp, nproc=2)
    losses = train(assets, "neuron", *fsdp, nproc=2)
    assert losses == pytest.approx(cpu, rel=1e-5)


@ONLY_0_3
def test_0_3_moe_with_expert_parallelism(assets):
    # DeepSeek-V3 with FSDP2 x 2 and its experts split over the 2 ranks (tokens
    # exchanged by all-to-all with uneven splits), from one seed. 0.3 refuses its
    # all-to-all token dispatcher under CUDA graphs unless they are off.
    seed = seed_checkpoint_0_3(assets, "seed-0.3-deepseek", *DEEPSEEK_0_3)
    ep = (*DEEPSEEK_0_3, "--parallelism.data-parallel-shard-degree", "2")
    ep += ("--parallelism.expert-parallel-degree", "2", "--training.disable-cuda-graphs")
    ep += (*seed, *F32)
    cpu = train(assets, "cpu", *ep, nproc=2)
    losses = train(assets, "neuron", *ep, nproc=2)
    assert losses == pytest.approx(cpu, rel=1e-5)
    assert losses[-1] < losses[0]


# A module shaped like TorchTitan 0.3's torchtitan/distributed/minimal_async_ep/
# kernels.py (written here: Triton kernels with do_not_specialize, launch-grid
# helpers), in a package of its own ahead of the installed TorchTitan.
_ASYNC_EP_KERNELS = """
import torch
import triton
import triton.language as tl


@triton.jit(do_not_specialize=["rank"])
def _route_kernel(src, dst, rank, BLOCK: tl.constexpr):
    pass


@triton.jit
def _copy_kernel(src, dst, n, BLOCK: tl.constexpr):
    pass


def grid(rows, cols):
    return (triton.cdiv(rows, 4), triton.next_power_of_2(cols))
"""


def test_torchtitan_0_3_async_ep_kernels_import_without_triton(tmp_path):
    if importlib.util.find_spec("triton") is not None:  # torch's CUDA builds bring it
        pytest.skip("Triton is installed: the shim serves environments without it")
    pkg = tmp_path / "torchtitan" / "distributed" / "minimal_async_ep"
    pkg.mkdir(parents=True)
    for d in (pkg, pkg.parent, pkg.parent.parent):
        (d / "__init__.py").write_text("")
    (pkg / "kernels.py").write_text(_ASYNC_EP_KERNELS)
    code = (
        "import sys, importlib.util, torch, torch_neuronx\n"
        "assert importlib.util.find_spec('triton') is None, 'this test needs no Triton'\n"
        "import torchtitan.distributed.minimal_async_ep.kernels as k\n"
        "assert k.grid(10, 5) == (3, 8), k.grid(10, 5)\n"
        "assert 'triton' not in sys.modules  # torch still sees no Triton\n"
        "print('IMPORTED')\n"
    )
    env = clean_env(PYTHONPATH=str(tmp_path))
    out, err = run_bounded([sys.executable, "-c", code], env=env, timeout=120, what="the import")
    assert "IMPORTED" in out, err[-3000:]
