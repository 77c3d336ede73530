"""The exception of a failure in device work: ``torch.neuron.DeviceError``."""

from __future__ import annotations

import torch

from .. import _C

__all__ = ["DeviceError"]


class DeviceError(torch.AcceleratorError):
    """A work item failed on a neuron device (an asynchronous device error).

    Device work runs after the op that queued it returned, so its failure is
    raised at the next synchronisation point (``.item()``, ``.cpu()``, printing,
    ``torch.neuron.synchronize()``, stream and event synchronisation), or at the
    op itself under ``NEURON_LAUNCH_BLOCKING=1``. It is a ``torch.AcceleratorError``
    (a ``RuntimeError``), the type of CUDA's asynchronous errors; the message is
    worded as CUDA's: ``neuron:0: device error in aten::index_select (work item 42
    on stream 0): index out of range in self``.

    The C++ backend raises it with these attributes set:

    * ``device``: the device's index (``neuron:<device>``);
    * ``stream``: the stream's id on it (0: the default stream);
    * ``work_item``: the failing item's sequence number on its stream;
    * ``op``: what the item was, ``"aten::index_select"``, or a compiled program
      (``"compiled graph 0/0 inference"``) or a replayed graph;
    * ``step``, ``step_index``: for a program or a replayed graph, the step inside
      it that failed (``"cpp_fused_index_mul_sum_0"``, and its position from 1);
      ``None`` for a single op;
    * ``detail``: what the op or the step reported (``"index out of range in self"``);
    * ``error_code``: the runtime's status code (as ``torch.AcceleratorError``'s).

    The device stays usable after it.
    """

    def __init__(
        self,
        message: str,
        *,
        device: int,
        stream: int,
        work_item: int,
        op: str,
        step: str | None = None,
        step_index: int | None = None,
        detail: str = "",
        error_code: int = 0,
    ) -> None:
        super().__init__(message)
        self.device = device
        self.stream = stream
        self.work_item = work_item
        self.op = op
        self.step = step
        self.step_index = step_index
        self.detail = detail
        self.error_code = error_code

    def _fields(self) -> dict:
        return {
            "device": self.device,
            "stream": self.stream,
            "work_item": self.work_item,
            "op": self.op,
            "step": self.step,
            "step_index": self.step_index,
            "detail": self.detail,
            "error_code": self.error_code,
        }

    def __reduce__(self):  # picklable (multiprocessing hands exceptions across)
        return (_rebuild_device_error, (self.args[0], self._fields()))


def _rebuild_device_error(message: str, fields: dict) -> DeviceError:
    return DeviceError(message, **fields)


_C._set_device_error_type(DeviceError)
