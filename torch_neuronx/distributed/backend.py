"""The ``neuron`` process-group backend: the factory c10d calls for each group.

Each group gets a host-local communicator over shared memory (the runtime's
``collectives`` layer); collectives run as work items on a communication
stream of the process's device, ordered with the compute around them
(``torch_neuronx/csrc/distributed/``). Ranks on other hosts are reached
through gloo.
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta

import torch.distributed as dist

from .. import _C

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
