"""The planning run's one dispatch mode: each operator call on fake tensors is
turned into the device item a real eager run would queue (items.py), costed
(cost.py), attributed to the module running it, and its new storages counted
toward the rank's HBM (memory.py).

It sits above the FakeTensorMode (nothing is allocated or computed). Operators
with DTensor arguments are left to DTensor (``NotImplemented``), which turns them
into local operators and collectives, seen here in turn — as CommDebugMode does.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch._subclasses.fake_tensor import DataDependentOutputException, FakeTensor
from torch.utils._python_dispatch import TorchDispatchMode

from . import items as I
from .cost import Cost, CostModel
from .memory import MemoryTracker


@dataclass
class Item:
    """One planned device item (aggregated by signature in ``Capture.items``)."""

    name: str
    category: str  # compute, copy, collective
    cost: Cost
    module: str
    phase: str  # forward, backward, optimizer, step
    detail: str = ""


def _neuron(t) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == "neuron"


def _tensors(x, out: list) -> None:
    if isinstance(x, torch.Tensor):
        out.append(x)
    elif isinstance(x, (list, tuple)):
        for y in x:
            _tensors(y, out)


_ADD = torch.ops.aten.add.Tensor
_ADD_INPLACE_RULE = I.rule_for(torch.ops.aten.add_.Tensor)


def _all_fake(out) -> bool:
    ts: list = []
    _tensors(out, ts)
    return all(isinstance(t, FakeTensor) for t in ts)


class Capture(TorchDispatchMode):
    """Records the device items of everything run under it."""

    def __init__(
        self, cost: CostModel, memory: MemoryTracker | None = None, tracker=None, fake_mode=None
    ):
        super().__init__()
        # The planning run's fake mode: tensors of another fake mode belong to
        # a computation that is no device work (DTensor's sharding propagation
        # runs ops on its own fake tensors to learn output shapes, once per
        # signature).
        self.fake_mode = fake_mode
        self.cost = cost
        self.memory = memory
        self.tracker = tracker  # a ModTracker (module attribution), or None
        self.phase = "step"
        # (name, category, module, phase, cost) -> count: a step repeats the same
        # signatures layer after layer.
        self.counts: dict = defaultdict(int)
        self.n_items = 0
        self.recording = True
        self._group_ranks: dict = {}
        # ranks -> the label a collective is reported under (Layout.group_of).
        self.group_label = lambda ranks: f"{len(ranks)} ranks"

    # ---- module attribution

    def _module(self) -> str:
        t = self.tracker
        if t is None:
            return ""
        # The innermost running module: the longest of the running names (a
        # child's name extends its parent's).
        return max(t.parents, key=len)

    def _phase(self) -> str:
        t = self.tracker
        if self.phase != "step" or t is None:
            return self.phase
        return "backward" if t.is_bw else "forward"

    # ---- recording

    def _add(self, name: str, category: str, cost: Cost, detail: str = "") -> None:
        if not self.recording:
            return
        self.counts[(name, category, self._module(), self._phase(), cost, detail)] += 1
        self.n_items += 1

    def _op_item(self, rule, args, kwargs, out) -> None:
        # The tensors as the kernel's AliasPlan records them: each tensor
        # argument in schema order (an absent optional one as an undefined
        # tensor), then the results it allocates.
        sizes: list = []
        itemsizes: list = []

        def rec(v):
            if isinstance(v, torch.Tensor):
                sizes.append(tuple(v.shape))
                itemsizes.append(v.element_size() if v.device.type == "neuron" else 0)
            elif v is None:
                sizes.append(())
                itemsizes.append(0)
            elif isinstance(v, (list, tuple)):
                for x in v:
                    rec(x)

        n = len(args)
        for i, name, kwarg_only in rule.tensor_args:
            if i < n and not kwarg_only:
                rec(args[i])
            elif name in kwargs:
                rec(kwargs[name])
            else:
                rec(None)
        if rule.fresh:
            outs = out if rule.n_returns > 1 else (out,)
            for i in rule.fresh:
                if i < len(outs):
                    rec(outs[i])
        c = self.cost.op(rule.name, tuple(sizes), tuple(itemsizes))
        self._add(rule.name, "compute", c)

    def _copy_item(self, args, kwargs) -> None:
        # ops/copy.cpp: one copy item of dst's and src's bytes (copyWork), named
        # aten::copy_ on one device; nothing for an empty destination.
        dst = args[0]
        src = args[1] if len(args) > 1 else kwargs["src"]
        if dst.numel() == 0:
            return
        if _neuron(dst) and _neuron(src):
            name = "aten::copy_" if dst.device == src.device else "copy_device_to_device"
        elif _neuron(dst):
            name = "copy_host_to_device"
        elif _neuron(src):
            name = "copy_device_to_host"
        else:
            return
        sizes = (tuple(dst.shape), tuple(src.shape))
        itemsizes = (dst.element_size(), src.element_size())
        # The cost model names a device-to-device transfer so; aten::copy_ is
        # the same copyWork.
        costed = "copy_device_to_device" if name == "aten::copy_" else name
        self._add(name, "copy", self.cost.op(costed, sizes, itemsizes))

    def _read(self, func, args):
        """A host read of a device scalar (``.item()``, ``bool(t)``): the copy item
        the real run queues, and a planned answer. A planning run's inputs are
        full sequences (no padding, no packing), so the boolean checks a model
        makes of them (transformers' "is the mask all ones", "is there one
        sequence per row") hold: a boolean read answers True. Any other value
        cannot be planned."""
        t = args[0]
        if _neuron(t):
            self._add(
                "aten::_local_scalar_dense",
                "copy",
                self.cost.op("aten::_local_scalar_dense", ((),), (t.element_size(),)),
            )
        try:
            # The fake mode knows constants (the optimizer's CPU step count).
            return func(*args)
        except DataDependentOutputException:
            if t.dtype == torch.bool:
                return True
            raise RuntimeError(
                f"the planned step reads a device value ({func} of a {t.dtype} tensor): "
                "a planning run computes nothing, so only boolean checks of its full, "
                "unpadded inputs can be answered; keep value reads (loss.item(), logging) "
                "out of the step"
            ) from None

    def _ranks(self, group) -> tuple:
        """The global ranks of a collective's group (a group name, a ProcessGroup
        or its TorchScript box), cached by the group's name: the boxes are
        transient objects."""
        if isinstance(group, str):
            name = group
        else:
            if not isinstance(group, dist.ProcessGroup):
                group = dist.ProcessGroup.unbox(group)
            name = group.group_name
        r = self._group_ranks.get(name)
        if r is None:
            pg = dist.distributed_c10d._resolve_process_group(name)
            r = self._group_ranks[name] = tuple(dist.get_process_group_ranks(pg))
        return r

    def _collective_item(self, rule, func, args, kwargs, out) -> None:
        schema = func._schema
        named = dict(zip((a.name for a in schema.arguments), args, strict=False))
        named.update(kwargs)
        group = named.get("process_group", named.get("group_name"))
        ranks = self._ranks(group)
        kind = rule.collective
        # The bytes the neuron backend counts per rank (docs/profiling.md): the
        # gathered result for all-gather, the input for reduce-scatter and
        # all-to-all, the tensor otherwise; one item per tensor of a coalesced
        # call.
        base = schema.name
        if base.startswith("_c10d_functional::"):
            src = out if kind == "allgather" else args[0]
        elif kind == "allgather":
            src = named.get("output_tensor", named.get("output_tensors", named.get("outputs")))
        elif kind in ("reducescatter", "alltoall"):
            src = named.get("input_tensor", named.get("inputs", named.get("input")))
            if src is None:
                src = named.get("input_tensors")
        else:
            src = named.get("tensors", named.get("tensor"))
        ts: list = []
        _tensors(src, ts)
        sizes = [t.numel() * t.element_size() for t in ts]
        if base in ("c10d::allgather_", "c10d::reduce_scatter_"):
            sizes = [sum(sizes)]  # a list of per-rank tensors: one collective
        for nbytes in sizes or [0]:
            c = self.cost.collective(kind, float(nbytes), ranks)
            self._add(rule.name, "collective", c, detail=self.group_label(ranks))

    # ---- dispatch

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if isinstance(func, torch._ops.HigherOrderOperator):
            return func(*args, **kwargs)
        for t in types:
            if t is not torch._subclasses.fake_tensor.FakeTensor and t is not torch.Tensor:
                if issubclass(t, torch._subclasses.fake_tensor.FakeTensor):
                    continue
                return NotImplemented  # DTensor & co.: desugared, then seen here
        if self.fake_mode is not None and self._foreign(args):
            return func(*args, **kwargs)
        rule = I.rule_for(func)
        kind = rule.kind
        if kind == I.READ:
            return self._read(func, args)
        if kind == I.COMPOSITE:
            # ATen's default kernel, as the dispatcher runs it for PrivateUse1,
            # with this mode on: its operators are the items.
            # Some default kernels build their result without dispatching (an
            # alias made in C++ is a plain meta tensor, not a fake one): their
            # items are recorded, and the fake mode makes the result.
            with self:
                out = func._op_dk(rule.key, *args, **kwargs)
            if _all_fake(out):
                return out
            return func(*args, **kwargs)
        out = func(*args, **kwargs)
        if kind == I.ITEM and func is _ADD and self._accumulates(args, kwargs):
            # The autograd engine sums two gradients of one input in place
            # when it owns the first and it is dense (InputBuffer::accumulate);
            # with fake tensors (a Python subclass) it never does, so the item
            # is named and sized as the real run's add_. Ownership is not
            # visible here: a contiguous first gradient is taken as owned, a
            # transposed one as not (what the measured runs show most often).
            self._op_item(_ADD_INPLACE_RULE, args, {}, out)
        elif kind == I.ITEM:
            ts: list = []
            _tensors(args, ts)
            _tensors(list(kwargs.values()), ts)
            if any(_neuron(t) for t in ts) or self._neuron_out(out):
                self._op_item(rule, args, kwargs, out)
        elif kind == I.COPY:
            self._copy_item(args, kwargs)
        elif kind == I.COLLECTIVE:
            self._collective_item(rule, func, args, kwargs, out)
        if self.memory is not None:
            self.memory.produced(out)
        return out

    def _foreign(self, args) -> bool:
        for a in args:
            if isinstance(a, (list, tuple)):
                a = a[0] if a and isinstance(a[0], torch.Tensor) else None
            if isinstance(a, FakeTensor):
                return a.fake_mode is not self.fake_mode
        return False

    @staticmethod
    def _accumulates(args, kwargs) -> bool:
        if len(args) != 2 or kwargs.get("alpha", 1) != 1:
            return False
        if torch._C._current_autograd_node() is None or torch.is_grad_enabled():
            return False
        a, b = args
        return (
            isinstance(b, torch.Tensor)
            and _neuron(a)
            and _neuron(b)
            and a.shape == b.shape
            and a.dtype == b.dtype
            and a.is_contiguous()
        )

    @staticmethod
    def _neuron_out(out) -> bool:
        rs: list = []
        _tensors(out, rs)
        return any(_neuron(t) for t in rs)
