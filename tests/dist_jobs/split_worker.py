"""Minimal reproduction: a 2-d DeviceMesh after init_process_group(device_id=...).

With a bound device (eager initialisation) and an accelerator present, DeviceMesh
creates each dimension's sub-groups with ``dist.split_group``, which needs the
parent backend to support splitting (``Backend::supportsSplitting()`` and
``Backend::split``); the neuron backend has neither, so this raises "No backend for
the parent process group or its backend does not support splitting". Without
``device_id`` the mesh is built with ``new_group`` and works (dtensor_worker.py 2d).
"""

import torch
import torch.distributed as dist
from common import dev, expect, expect_close, finish, rank, setup
from torch.distributed.device_mesh import init_device_mesh

setup(bind_device=True)
# Two ranks: one sub-group of both, and a (1, 2) mesh (split on both dims).
sub = dist.split_group(split_ranks=[[0, 1]])
t = torch.full((4,), float(rank), device=dev)
dist.all_reduce(t, group=sub)
expect_close("split_group all_reduce", t, torch.full((4,), 1.0))
mesh = init_device_mesh("neuron", (1, 2), mesh_dim_names=("dp", "tp"))
expect("2-d mesh with a bound device", mesh["tp"].size() == 2)
finish()
