"""What an Inductor wrapper compiled for neuron calls at run time.

Each call of a compiled graph opens a program on the current stream of its
device (``torch_neuronx._C._ProgramLaunch``): the graph's C++ kernels and the
eager ops its wrapper calls (matmuls, fallback ops) are held and queued as ONE
work item when the call returns — or earlier, if something in the call waits
for the device (then the program is cut there and goes on after).
"""

from __future__ import annotations

from collections.abc import Callable

from .._C import _ProgramLaunch

__all__ = ["as_program", "ProgramLaunch"]

ProgramLaunch = _ProgramLaunch


def as_program(call: Callable, program: _ProgramLaunch) -> Callable:
    """``call`` (a compiled graph's ``call(args)``) run as one program."""
    begin, end = program.begin, program.end

    def run(args):
        begin()
        try:
            return call(args)
        finally:
            end()

    run.program = program  # type: ignore[attr-defined]
    return run
