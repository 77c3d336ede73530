"""Printing a tensor whose device work failed leaves functorch (vmap) working.

torch formats a tensor (``str(t)``, ``print(t)``, ``repr``) in
``torch._tensor_str._str``, which holds a ``torch._C._DisableFuncTorch()`` guard in
a local variable while it formats. When formatting raises — on neuron a failed
device op surfaces at the next synchronisation, and printing is one — the
exception's traceback keeps that frame, and with it the guard, alive. For as long
as the exception lives (kept in a variable, in pytest's ``ExceptionInfo``, or in a
reference cycle that only the garbage collector's next full collection frees),
functorch's dispatch keys stay excluded on that thread and every ``vmap`` in
between fails: ``create_block_mask`` (FlexAttention) raises "Cannot access storage
of BatchedTensorImpl". Because a full collection comes after an amount of
allocation, not at a fixed point, whether a later vmap met the guard depended on
everything the process did in between (issue 43: a test session that failed only
on a loaded machine). The guard is torch's, on every device (a PyTorch bug; no
upstream issue found).

The shim clears the local variables of the frames below it when formatting
raises, so the guard is released as the exception leaves ``_str``. The exception,
its type, message and traceback (every frame's file and line) are unchanged; only
those frames' locals are gone from a post-mortem debugger.
"""

from __future__ import annotations

import traceback

import torch._tensor_str

from . import monkey_patch as _monkey_patch


def _releasing_guards_on_error(original):
    def _str(self, *, tensor_contents=None):
        try:
            return original(self, tensor_contents=tensor_contents)
        except BaseException as e:
            # The frames below this one (this one is still running).
            if e.__traceback__ is not None:
                traceback.clear_frames(e.__traceback__.tb_next)
            raise

    return _str


def install() -> None:
    # Tensor.__repr__ looks _str up on the module at each call.
    _monkey_patch.wrap(torch._tensor_str, "_str", _releasing_guards_on_error)
