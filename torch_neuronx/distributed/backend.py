"""The ``neuron`` process-group backend: the factory c10d calls for each group.

Each group gets a host-local communicator over shared memory (the runtime's
``collectives`` layer); collectives run as work items on a communication
stream of the process's device, ordered with the compute around them
(``torch_neuronx/csrc/distributed/``). Ranks on other hosts are reached
through gloo.
"""

from __future__ import annotations

import json
import os
import socket
from datetime import timedelta

import torch.distributed as dist

from .. import _C
from ..neuron.device import _own_device_cores, _set_host_device_cores

BACKEND_NAME = "neuron"


def host_identity() -> str:
    """Which host this process is on, for choosing the transport.

    Processes with the same identity share a shared-memory segment; ``TORCH_NEURONX_HOST_ID``
    overrides it (e.g. to run two "hosts" on one machine).
    """
    override = os.environ.get("TORCH_NEURONX_HOST_ID")
    if override:
        return override
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}"


def _host_of_rank(store, rank: int, size: int) -> list[int]:
    """Each rank's host, numbered in the order of the hosts' lowest ranks."""
    store.set(f"neuron_host/{rank}", host_identity())
    ids = [store.get(f"neuron_host/{r}").decode() for r in range(size)]
    numbers: dict[str, int] = {}
    return [numbers.setdefault(i, len(numbers)) for i in ids]


def _share_device_layout(store, rank: int, host_of_rank: list[int]) -> None:
    """Tells the ranks of the default group each other's devices, as TorchNeuron
    derives the local world size from the store after ``init_process_group``.

    The host's local world size reaches the device numbering of a process that
    numbers its devices from ``LOCAL_RANK`` but has no ``LOCAL_WORLD_SIZE`` (ranks
    of ``torch.multiprocessing.spawn``), so every local rank then has the same
    ``device_count()``; and each index's logical core gives
    ``get_device_properties`` another local rank's devices.
    """
    size = len(host_of_rank)
    own = _own_device_cores()
    store.set(f"neuron_devices/{rank}", json.dumps(own))
    host = host_of_rank[rank]
    cores: dict[int, int] = {}
    for r in range(size):
        if host_of_rank[r] != host or r == rank:
            continue
        theirs = json.loads(store.get(f"neuron_devices/{r}").decode())
        cores.update({int(i): c for i, c in theirs.items()})
    cores.update(own)  # this process's own devices are what it says they are
    _set_host_device_cores(cores)
    _C._set_local_world_from_group(host_of_rank.count(host))


def _create_backend(dist_backend_opts, backend_options):
    """Creator for ``Backend.register_backend(..., extended_api=True)``."""
    timeout = dist_backend_opts.timeout
    if not isinstance(timeout, timedelta):
        timeout = timedelta(seconds=float(timeout))
    store = dist_backend_opts.store
    rank, size = dist_backend_opts.group_rank, dist_backend_opts.group_size
    group = dist_backend_opts.group_id or "default_pg"
    # The group's ranks in the default group (empty for the default group): the
    # profiler names a collective's peers by them.
    global_ranks = [int(r) for r in (dist_backend_opts.global_ranks_in_group or [])]
    host_of_rank = _host_of_rank(store, rank, size) if size > 1 else [0]
    if not global_ranks and size > 1:  # the default group
        _share_device_layout(store, rank, host_of_rank)
    n_hosts = max(host_of_rank) + 1
    if n_hosts == 1:
        return _C._create_neuron_backend(
            store, rank, size, timeout.total_seconds(), group, global_ranks=global_ranks
        )
    # Ranks on different hosts cannot share memory: gloo carries what goes
    # between hosts. With several ranks on a host, only its lowest rank (its
    # "leader") talks to the other hosts' for reductions and broadcasts.
    every_rank = dist.ProcessGroupGloo(dist.PrefixStore("neuron_gloo/", store), rank, size, timeout)
    host = host_of_rank[rank]
    leaders = None
    if n_hosts < size and host_of_rank.index(host) == rank:
        leaders = dist.ProcessGroupGloo(
            dist.PrefixStore("neuron_gloo_leaders/", store), host, n_hosts, timeout
        )
    return _C._create_neuron_backend(
        store,
        rank,
        size,
        timeout.total_seconds(),
        group,
        every_rank,
        leaders,
        host_of_rank,
        global_ranks,
    )


def cleanup_stale_shared_memory() -> int:
    """Removes shared-memory segments left by jobs whose processes died.

    Rank 0 of every new group does this by itself; returns how many were removed.
    """
    return _C._cleanup_stale_shared_memory()
