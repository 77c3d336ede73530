"""Which ATen operators ran on the device, and which needed a host round trip.

Two levels of recording:

- always: every op that reaches a neuron kernel (``aten::add.Tensor``,
  ``aten::copy_``, ``aten::empty.memory_format``, ...) is recorded once, at the
  cost of one atomic load per op;
- once op tracking is asked for — the first call of any function here, or
  ``TORCH_NEURONX_OP_TRACKING=1`` at import — also every operator the user calls
  on neuron tensors or the neuron device that is implemented by other ops
  (``aten::full``, ``aten::ones``, ``aten::clone``, ``aten::linear``, ...). This
  costs a dispatcher hook on every operator call (~0.5 µs), so it stays off until
  someone reads the results. Call ``clear_op_tracking()`` before the code you
  want to check, as TorchNeuron users do. While it is on, each call is recorded
  when it returns, by TorchNeuron's rules (docs/compatibility.md, "Executed and
  fallback ops"): view ops (``view``, ``transpose``, ``expand``, ...) and calls
  with nothing to compute (every result empty, as an all-false mask's index;
  ``cat`` of one tensor) are not executed.
"""

from __future__ import annotations

import os

from . import _C


def _track() -> None:
    _C._track_operator_calls()


def get_executed_ops() -> list[str]:
    """Names (``aten::add.Tensor``) of the ops that ran on neuron in this process."""
    _track()
    return list(_C._get_executed_ops())


def get_fallback_ops() -> list[str]:
    """Ops the host computed instead of the device, their results copied to the device
    (TorchNeuron's CPU fallbacks), named as :func:`get_executed_ops` names them.

    On neuron these are the linear-algebra decompositions TorchNeuron runs on the CPU
    (``aten::linalg_qr``, ``aten::_linalg_svd``, ``aten::_linalg_eigh``,
    ``aten::linalg_cholesky_ex``, ``aten::linalg_inv_ex``, ``aten::linalg_lu_factor_ex``,
    ``aten::_linalg_det``, ``aten::_linalg_slogdet``), so that a model that would fall
    back on Trainium shows it here. Random ops are device ops whose numbers the host
    draws (the CPU's): executed, not fallbacks.
    """
    _track()
    return list(_C._get_fallback_ops())


def clear_op_tracking() -> None:
    """Empties :func:`get_executed_ops` and :func:`get_fallback_ops` (TorchNeuron's name).

    Also turns on the recording of composite operators from here on.
    """
    _track()
    _C._clear_op_stats()


clear_op_stats = clear_op_tracking  # this package's earlier name, kept for existing callers


def _track_from_env() -> None:
    value = os.environ.get("TORCH_NEURONX_OP_TRACKING", "0")
    if value not in ("0", "1"):
        raise ValueError(f"TORCH_NEURONX_OP_TRACKING must be 0 or 1, got {value!r}")
    if value == "1":
        _track()
