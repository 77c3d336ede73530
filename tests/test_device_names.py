"""Device names, properties and counts as TorchNeuron's.

- ``get_device_name(i)`` is ``"neuron:<i>"`` (TorchNeuron's tests:
  ``get_device_name() == "neuron:0"``, ``get_device_name(1) == "neuron:1"``);
  ``get_device_properties(i).name`` is the platform, ``"trn2"`` (TorchNeuron fills
  it with the instance type). TorchTitan picks peak FLOPS with
  ``"neuron" in device_name`` and then ``get_device_properties().name``.
- Bad arguments raise TorchNeuron's types: ``ValueError`` for a malformed device
  string and for an index out of range (``"Invalid device id"``), which are also the
  ``RuntimeError`` (as ``torch.device``) and ``IndexError`` torch-neuronx raised
  before, so CUDA-style handlers keep working.
- ``NEURON_RT_NUM_CORES`` sizes the process as on Trainium.
- Ranks started by ``torch.multiprocessing.spawn`` with ``LOCAL_RANK`` but without
  ``LOCAL_WORLD_SIZE`` agree on ``device_count()`` once the process group exists,
  and ``get_device_properties(i)`` works for every ``i < device_count()``.
"""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
import torch
from bounded_job import clean_env, run_bounded

N = torch.neuron
COUNT = N.device_count()

# TorchTitan's get_peak_flops (torchtitan/tools/utils.py), the part that reads
# the neuron device: a name without "neuron" would fall back to A100's figures.
TRN2_FAMILY = ("trn2", "trn2n", "trn2u", "trn3", "trn3u")


def _torchtitan_neuron_platform(device_module) -> str | None:
    device_name = device_module.get_device_name()
    if "neuron" in device_name:
        return device_module.get_device_properties().name
    return None


@pytest.mark.parametrize(
    "device, index",
    [(None, 0), (0, 0), ("neuron", 0), ("neuron:0", 0), (torch.device("neuron", 0), 0)],
    ids=["none", "int", "str", "str-index", "torch.device"],
)
def test_get_device_name_is_the_device_string(device, index):
    assert N.get_device_name(device) == f"neuron:{index}"


def test_get_device_name_of_every_device_and_the_current_one(two_devices):
    assert [N.get_device_name(i) for i in range(COUNT)] == [f"neuron:{i}" for i in range(COUNT)]
    assert N.get_device_name(torch.device("neuron:1")) == "neuron:1"
    with N.device(1):
        assert N.get_device_name() == "neuron:1"
        assert N.get_device_name("neuron") == "neuron:1"
    assert N.get_device_name() == "neuron:0"


def test_properties_name_is_the_platform():
    for i in range(COUNT):
        p = N.get_device_properties(i)
        assert p.name == "trn2", p
        assert p.total_memory > 0
    assert N.get_device_properties().name == "trn2"


def test_torchtitan_recognises_the_device():
    from torch._utils import _get_available_device_type, _get_device_module

    device_type = _get_available_device_type()
    assert device_type == "neuron"
    module = _get_device_module(device_type)
    assert "neuron" in module.get_device_name().lower()
    assert _torchtitan_neuron_platform(module) in TRN2_FAMILY


@pytest.mark.parametrize("fn", ["get_device_name", "get_device_properties"])
def test_malformed_device_string_is_a_value_error(fn):
    # TorchNeuron's test: get_device_name("invalid") raises ValueError. It is also
    # the RuntimeError torch.device raises for it (and torch-neuronx raised).
    with pytest.raises(ValueError, match="Invalid device string 'invalid'") as info:
        getattr(N, fn)("invalid")
    assert isinstance(info.value, RuntimeError)


@pytest.mark.parametrize("fn", ["get_device_name", "get_device_properties", "set_device"])
@pytest.mark.parametrize("bad", [COUNT, COUNT + 7, -2, f"neuron:{COUNT}"], ids=str)
def test_out_of_range_index_is_a_value_error(fn, bad):
    # TorchNeuron: ValueError("Invalid device id: N"); also the IndexError
    # torch-neuronx raised, naming the valid range.
    with pytest.raises(ValueError, match=r"Invalid device index neuron:-?\d+") as info:
        getattr(N, fn)(bad)
    assert isinstance(info.value, IndexError)
    assert "Valid range is 0 to" in str(info.value)
    assert N.current_device() == 0
    assert (torch.ones(2, device="neuron") + 1).sum().item() == 4.0


def test_another_device_type_is_still_a_value_error():
    with pytest.raises(ValueError, match="Expected a neuron device, but got: cpu"):
        N.get_device_name("cpu")


# --- NEURON_RT_NUM_CORES ------------------------------------------------------------

PROBE = """
import json, torch
r = {"count": torch.neuron.device_count(),
     "cores": [torch.neuron.get_device_properties(i).logical_core
               for i in range(torch.neuron.device_count())],
     "names": [torch.neuron.get_device_name(i) for i in range(torch.neuron.device_count())]}
try:
    torch.ones(1, device=f"neuron:{r['count']}")
except IndexError as e:
    r["error"] = str(e)
print(json.dumps(r))
"""


@pytest.mark.parametrize(
    "env, cores",
    [
        ({"NEURON_RT_NUM_CORES": "2"}, [0, 1]),
        ({"NEURON_RT_NUM_CORES": "1"}, [0]),
        ({"NEURON_RT_NUM_CORES": "0"}, [0, 1, 2, 3]),  # 0 means all
        ({"NEURON_RT_NUM_CORES": "3", "NEURON_LOGICAL_NC_CONFIG": "1"}, [0, 1, 2]),
        # It only counts cores: the cores NEURON_RT_VISIBLE_CORES names win.
        ({"NEURON_RT_NUM_CORES": "1", "NEURON_RT_VISIBLE_CORES": "2-3"}, [2, 3]),
    ],
    ids=["2", "1", "0-all", "lnc1", "visible-wins"],
)
def test_num_cores_sizes_the_process(run_py, check, env, cores):
    r = json.loads(check(run_py(PROBE, env=env)).splitlines()[-1])
    assert r["count"] == len(cores), r
    assert r["cores"] == cores, r
    assert r["names"] == [f"neuron:{i}" for i in range(len(cores))]
    assert "Invalid device index" in r["error"], r


@pytest.mark.parametrize("value", ["5", "two", "-1"])
def test_bad_num_cores_is_reported_at_first_use(run_py, value):
    code = "import torch; torch.ones(1, device='neuron')"
    r = run_py(code, env={"NEURON_RT_NUM_CORES": value})
    assert r.returncode != 0
    assert f"invalid NEURON_RT_NUM_CORES='{value}'" in r.stderr, r.stderr[-2000:]
    assert "from 0 (all) to 4" in r.stderr


def test_num_cores_under_a_launcher_gives_each_rank_its_own_cores(run_py, check):
    # As the runtime hands each process the next free cores: local rank 1 of
    # NEURON_RT_NUM_CORES=2 gets cores 2-3, numbered from neuron:1.
    env = {"NEURON_RT_NUM_CORES": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    code = PROBE.replace(
        "for i in range(torch.neuron.device_count())]",
        "for i in range(1, torch.neuron.device_count())]",
    )
    r = json.loads(check(run_py(code, env=env)).splitlines()[-1])
    assert r["count"] == 3 and r["cores"] == [2, 3], r


def test_properties_of_another_local_ranks_device(run_py, check):
    # Under torchrun each rank has one core; neuron:0 is local rank 0's, and its
    # properties are there as CUDA's are for every visible GPU.
    code = """
import json, torch
p = [torch.neuron.get_device_properties(i) for i in range(torch.neuron.device_count())]
print(json.dumps([[x.name, x.logical_core, x.total_memory] for x in p]))
"""
    env = {"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    r = json.loads(check(run_py(code, env=env)).splitlines()[-1])
    assert [x[:2] for x in r] == [["trn2", 0], ["trn2", 1]], r
    assert r[0][2] == r[1][2] > 0


# --- ranks started by torch.multiprocessing.spawn ----------------------------------

SPAWN_JOB = """
import json, os, sys, time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, world, path, visible):
    # Written as such jobs often are: LOCAL_RANK by hand, no LOCAL_WORLD_SIZE.
    os.environ["LOCAL_RANK"] = str(rank)
    if visible:
        os.environ["NEURON_RT_VISIBLE_CORES"] = str(rank)
    before = torch.neuron.device_count()
    dist.init_process_group(
        "neuron", store=dist.FileStore(path, world), rank=rank, world_size=world,
        timeout=timedelta(seconds=60),
    )
    torch.neuron.set_device(rank)
    count = torch.neuron.device_count()
    props = [torch.neuron.get_device_properties(i) for i in range(count)]
    mine = {"rank": rank, "before": before, "count": count,
            "names": [torch.neuron.get_device_name(i) for i in range(count)],
            "platforms": [p.name for p in props],
            "cores": [p.logical_core for p in props],
            "own_core": torch.neuron.get_device_properties(rank).logical_core,
            "torch_count": torch.accelerator.device_count(),
            # The c10d backend's own name, as NCCL's is "nccl".
            "backend_name": dist.group.WORLD._get_backend(torch.device("neuron")).name(),
            "backend_config": dist.get_backend_config()}
    t = torch.full((2,), float(rank + 1), device=f"neuron:{rank}")
    dist.all_reduce(t)
    mine["sum"] = t.cpu().tolist()
    everyone = [None] * world
    dist.all_gather_object(everyone, mine)
    if rank == 0:
        print("RESULT " + json.dumps(everyone), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    world, path, visible = 2, sys.argv[1], sys.argv[2] == "1"
    ctx = mp.spawn(worker, args=(world, path, visible), nprocs=world, join=False)
    deadline = time.monotonic() + 150
    try:
        while not ctx.join(timeout=1):
            if time.monotonic() > deadline:
                raise SystemExit("ranks did not finish in time")
    finally:
        for p in ctx.processes:  # never leave a rank behind
            if p.is_alive():
                p.kill()
            p.join(5)
"""


def _run_spawn_job(tmp_path, visible: bool) -> list[dict]:
    script = tmp_path / "spawn_job.py"
    script.write_text(textwrap.dedent(SPAWN_JOB))
    out, _ = run_bounded(
        [sys.executable, str(script), str(tmp_path / "store"), "1" if visible else "0"],
        env=clean_env(drop_local=True),
        timeout=200,
        what="spawned job",
    )
    line = next(x for x in out.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


@pytest.mark.parametrize("visible", [True, False], ids=["core-per-rank", "all-cores"])
def test_spawned_ranks_agree_on_device_count(tmp_path, visible):
    ranks = _run_spawn_job(tmp_path, visible)
    counts = {r["count"] for r in ranks}
    assert len(counts) == 1, ranks  # the same on every rank
    count = counts.pop()
    # Local ranks 0 and 1 number their cores from their local rank; with one core
    # each the host's indices are neuron:0 and neuron:1, else neuron:1 .. neuron:4.
    assert count == (2 if visible else 5), ranks
    for r in ranks:
        assert r["torch_count"] == count
        assert r["names"] == [f"neuron:{i}" for i in range(count)]
        assert r["platforms"] == ["trn2"] * count
        assert r["sum"] == [3.0, 3.0]
        assert r["backend_name"] == "neuron" and r["backend_config"] == "neuron:neuron"
    if visible:
        # Every rank describes neuron:i as rank i's own core.
        own = [r["own_core"] for r in sorted(ranks, key=lambda r: r["rank"])]
        assert own == [0, 1]
        for r in ranks:
            assert r["cores"] == own, ranks
    # Before the group existed, rank 1 numbered past rank 0's count.
    assert ranks[0]["before"] != ranks[1]["before"] or not visible
