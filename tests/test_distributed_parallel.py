"""The parallelism libraries on the neuron backend, unmodified: functional
collectives, DDP, FSDP2, DTensor and tensor parallelism, pipelining, distributed
checkpointing. Each test runs one job (one interpreter per rank, bounded in time)
whose ranks compare their results with a single-process reference and print
``DONE <n> checks, <k> failed``.
"""

from __future__ import annotations

from pathlib import Path

from dist_jobs.launch import check_all_ok, run_ranks

JOBS = Path(__file__).parent / "dist_jobs"


def run_job(
    script: str, world: int, timeout: float = 150, args: tuple[str, ...] = (), rank_env=None
):
    outs = check_all_ok(
        run_ranks(str(JOBS / script), world, timeout=timeout, args=args, rank_env=rank_env)
    )
    for rank, out in enumerate(outs):
        assert ", 0 failed" in out and "DONE" in out, f"rank {rank}:\n{out[-4000:]}"
        assert "DONE 0 checks" not in out, f"rank {rank} checked nothing"
    return outs


def test_functional_collectives():
    run_job("funcol_worker.py", 2)


def test_ddp():
    run_job("ddp_worker.py", 2)


def test_fsdp2_fully_shard():
    run_job("fsdp_worker.py", 2)


def test_dtensor_and_tensor_parallel():
    run_job("dtensor_worker.py", 2, args=("1d",))


def test_dtensor_2d_mesh_fsdp_and_tp():
    run_job("dtensor_worker.py", 4, timeout=240, args=("2d",))


def test_split_group_with_bound_device():
    outs = run_job("split_worker.py", 2, timeout=90)
    assert "TRANSPORTS shared_memory shared_memory shared_memory" in outs[0], outs[0][-2000:]


def test_split_group_across_hosts():
    # Ranks 0-1 and 2-3 on two "hosts": the mesh's tp groups stay within a host
    # (shared memory), its dp groups span both (gloo), the world is hierarchical.
    outs = run_job(
        "split_worker.py",
        4,
        timeout=180,
        rank_env=lambda r: {"TORCH_NEURONX_HOST_ID": f"host{r // 2}"},
    )
    assert "TRANSPORTS hierarchical gloo shared_memory" in outs[0], outs[0][-2000:]


def test_pipelining_gpipe_and_1f1b():
    run_job("pipeline_worker.py", 2)


def test_distributed_checkpoint_resharded_on_load(tmp_path):
    """Saved by 2 ranks (FSDP2 shards of model and optimizer), loaded by 1 and by 4."""
    run_job("dcp_worker.py", 2, args=("save", str(tmp_path)))
    run_job("dcp_worker.py", 1, args=("load", str(tmp_path)))
    run_job("dcp_worker.py", 4, timeout=240, args=("load", str(tmp_path)))


def test_functional_collectives_in_compiled_graphs(tmp_path):
    # All ranks compile the same graphs at once into one cache directory: each C++
    # file is built by one of them (Inductor's lock per file), the others load it.
    cache = tmp_path / "cache"
    outs = run_job(
        "compile_worker.py",
        2,
        timeout=240,
        rank_env=lambda r: {"TORCH_NEURONX_NEFF_CACHE_DIR": str(cache)},
    )
    built = sum(int(o.split("COMPILED_FILES ")[1].split()[0]) for o in outs)
    libraries = list(cache.rglob("*.so"))
    assert libraries and built == len(libraries), (built, libraries)


def test_sync_batch_norm_trains_like_batch_norm_on_the_global_batch():
    run_job("sync_batch_norm_worker.py", 2)
