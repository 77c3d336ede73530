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

import sys
from pathlib import Path

import pytest
from bounded_job import clean_env, run_bounded

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "torchtitan"))
import titan_job  # noqa: E402  (the example's job: assets, command, log)

pytest.importorskip("torchtitan")
pytest.importorskip("tokenizers")

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


@pytest.mark.parametrize("checkpointing", ["selective", "none"])
def test_compiled(assets, cpu_losses, checkpointing):
    # TorchNeuron's tutorial flow: --compile.enable --compile.backend neuron, with
    # selective activation checkpointing (the recomputed random ops, SDPA's layouts)
    # and without.
    compiled = ("--compile.enable", "--compile.backend", "neuron")
    losses = train(assets, "neuron", *compiled, "--activation_checkpoint.mode", checkpointing)
    assert losses == pytest.approx(cpu_losses, rel=1e-4)


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


def test_tensor_parallel_on_2_processes_has_the_single_process_losses(assets, seed, cpu_losses):
    # TP shards every matmul but both ranks read the same batch: the one-process losses.
    losses = train(assets, "neuron", *TP2, *seed, nproc=2)
    assert losses == pytest.approx(cpu_losses, rel=1e-4)


def test_fsdp2_on_2_processes(assets, seed, cpu_fsdp2_losses):
    losses = train(assets, "neuron", *FSDP2, *seed, nproc=2)
    assert losses == pytest.approx(cpu_fsdp2_losses, rel=1e-4)


def test_fsdp_x_tensor_parallel_on_4_processes(assets, seed, cpu_fsdp2_losses):
    # Two data-parallel ranks, each a TP pair: every data-parallel rank reads what it
    # reads under FSDP2 x 2, so the losses are FSDP2 x 2's.
    losses = train(assets, "neuron", *FSDP2, *TP2, *seed, nproc=4, timeout=900)
    assert losses == pytest.approx(cpu_fsdp2_losses, rel=1e-4)


def test_float8_training_emulated(assets):
    pytest.importorskip("torchao")
    cpu = train(assets, "cpu", *FLOAT8)
    losses = train(assets, "neuron", *FLOAT8)
    assert losses == pytest.approx(cpu, rel=1e-4)


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
