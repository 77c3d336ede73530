"""Which ATen operators ran on the device, and which needed a host round trip."""

from . import _C


def get_executed_ops() -> list[str]:
    """Names (``aten::add.Tensor``) of the ops that ran on neuron in this process."""
    return list(_C._get_executed_ops())


def get_fallback_ops() -> list[str]:
    """Ops that could only run by copying their inputs to the host and back.

    Each such op also warns once. An empty list means every op ran on device memory.
    """
    return list(_C._get_fallback_ops())


def clear_op_stats() -> None:
    _C._clear_op_stats()
