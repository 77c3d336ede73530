"""Planning mode: the estimated Trainium time of a model's step — a training
step or a ``generate()`` call — without running it.

The step runs with fake tensors on the ``neuron`` device (nothing is allocated
or computed), laid out over N NeuronCores (TP x FSDP x DP, applied for real with
FSDP2 and DTensor over torch.distributed's fake process group), and each device
item a real eager run would queue is costed with the function the profiler's
estimate uses; each collective FSDP and TP issue is costed on the topology.

    from torch_neuronx import estimate
    r = estimate.estimate_training("Qwen/Qwen3-8B", target="trn2", lnc=2,
                                   tp=4, fsdp=8, seq_len=4096, batch=1)
    print(r)               # step time, per layer, bound, MFU, HBM fits or not
    r.to_dict()

``python -m torch_neuronx.estimate --help`` for the command line;
docs/profiling.md "Planning mode" for how to read the report and its limits.
"""

from __future__ import annotations

from .cost import Cost, CostModel
from .layout import Layout
from .models import KNOWN_CONFIGS
from .report import Report
from .run import plan_generate, plan_training
from .target import Target, make_target

# The names the issue and the docs use.
estimate_training = plan_training
estimate_generate = plan_generate

__all__ = [
    "Cost",
    "CostModel",
    "KNOWN_CONFIGS",
    "Layout",
    "Report",
    "Target",
    "estimate_generate",
    "estimate_training",
    "make_target",
    "plan_generate",
    "plan_training",
]
