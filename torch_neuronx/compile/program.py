"""What an Inductor wrapper compiled for neuron calls at run time.

Each call of a compiled graph opens a program on the current stream of its
device (``torch_neuronx._C._ProgramLaunch``): the graph's C++ kernels and the
eager ops its wrapper calls (matmuls, fallback ops) are held and queued as ONE
work item when the call returns — or earlier, if something in the call waits
for the device (then the program is cut there and goes on after).

A step of the program that fails is a device error. Seen at the next
synchronisation point, it is a ``torch_neuronx.DeviceError`` (a
``torch.AcceleratorError``) whose ``op`` is the program and ``step`` the failed step.
Seen during the call — under NEURON_LAUNCH_BLOCKING=1, where each step waits for
the device, or at a wait that cut the program — it is raised by the call as
``NEFFExecutionError`` (``errors.py``), which ``backend.py`` may answer with an
eager run. An error of other work raised during the call (work queued before
it, a collective) stays what it was.
"""

from __future__ import annotations

from collections.abc import Callable

from .._C import _ProgramLaunch
from ..neuron.errors import DeviceError
from .errors import NEFFExecutionError

__all__ = ["as_program", "ProgramLaunch"]

ProgramLaunch = _ProgramLaunch


def execution_error(
    error: RuntimeError, program: _ProgramLaunch, writes_inputs: bool
) -> NEFFExecutionError | None:
    """``error`` (raised during a call of ``program``) as NEFFExecutionError, if it
    is a device error of one of the call's own steps; else None."""
    if not isinstance(error, DeviceError) or not program.queued_by_call(
        error.device, error.stream, error.work_item
    ):
        return None
    step = error.op
    if error.step is not None:  # the batch: the step inside it
        step = f"{error.step} (step {error.step_index})"
    message = (
        f"neuron: {program.name} failed on neuron:{error.device} in {step} "
        f"(work item {error.work_item} on stream {error.stream}): {error.detail}"
    )
    return NEFFExecutionError(message, graph=program.name, step=step, writes_inputs=writes_inputs)


def as_program(call: Callable, program: _ProgramLaunch, writes_inputs: bool = True) -> Callable:
    """``call`` (a compiled graph's ``call(args)``) run as one program.

    ``writes_inputs``: the graph writes into tensors its caller passed (an in-place
    op, an optimizer step, BatchNorm's running statistics); when a step fails, the
    steps before it may have done so already (code generated before this was known
    passes nothing: assumed so)."""
    begin, end = program.begin, program.end

    def run(args):
        begin()
        try:
            return call(args)
        except RuntimeError as e:
            failure = execution_error(e, program, writes_inputs)
            if failure is None:
                raise
            raise failure from e
        finally:
            end()

    run.program = program  # type: ignore[attr-defined]
    return run
