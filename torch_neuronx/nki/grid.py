"""SPMD launch grids: ``kernel[4, 2]``, ``kernel[nl.nc(2), 2]``,
``kernel[nl.spmd_dim(n, nl.nc(2)), m]`` (and its sugar ``n * nl.nc(2)``).

A grid dimension's size is the number of kernel instances along it:
``nl.spmd_dim(n, nl.nc(k))`` is n·k instances, ``nl.program_id`` running over
all of them. On Trainium the ``nl.nc`` factor spreads them over the physical
cores of a logical core; here every instance runs on the simulated core, so
only the sizes matter.
"""

from __future__ import annotations

import math
import operator

from .errors import NKIError


class SpmdDim:
    """One dimension of a launch grid: ``size`` instances, spread over
    ``cores`` physical NeuronCores (1 when no ``nl.nc`` is among its
    factors)."""

    __slots__ = ("size", "cores")

    def __init__(self, size: int, cores: int = 1):
        self.size = size
        self.cores = cores

    def __index__(self) -> int:
        return self.size

    __int__ = __index__

    def __mul__(self, other) -> SpmdDim:
        return spmd_dim(self, other)

    def __rmul__(self, other) -> SpmdDim:
        return spmd_dim(other, self)

    def __eq__(self, other) -> bool:
        if isinstance(other, SpmdDim):
            return (self.size, self.cores) == (other.size, other.cores)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.size, self.cores))

    def __repr__(self) -> str:
        return f"SpmdDim(size={self.size}, cores={self.cores})"


def _factor(x, what: str) -> SpmdDim:
    if isinstance(x, SpmdDim):
        return x
    try:
        if isinstance(x, bool):
            raise TypeError
        x = operator.index(x)
    except TypeError:
        raise NKIError(
            f"{what} takes positive integers, nl.nc(k) or nl.spmd_dim(...), "
            f"got {x!r} ({type(x).__name__})"
        ) from None
    if x <= 0:
        raise NKIError(f"{what} sizes must be positive, got {x}")
    return SpmdDim(x)


def nc(n) -> SpmdDim:
    """``nl.nc(k)``: a grid dimension of k instances, one per physical
    NeuronCore of the logical core (``kernel[nl.nc(2), 2]``)."""
    size = _factor(n, "nl.nc").size
    return SpmdDim(size, cores=size)


def spmd_dim(*factors) -> SpmdDim:
    """``nl.spmd_dim(a, b, ...)``: one grid dimension of a·b·... instances
    (``nl.spmd_dim(n, nl.nc(2))``: n·2 instances, consecutive ones on
    alternating cores; ``nl.spmd_dim(nl.nc(2), n)``: the first n on core 0)."""
    if not factors:
        raise NKIError("nl.spmd_dim needs at least one size")
    dims = [_factor(f, "nl.spmd_dim") for f in factors]
    return SpmdDim(math.prod(d.size for d in dims), cores=math.prod(d.cores for d in dims))


def _flatten(grid):
    for g in grid:
        if isinstance(g, (tuple, list)):
            yield from _flatten(g)
        else:
            yield g


def grid_sizes(grid) -> tuple:
    """A launch grid (an int, nl.nc / nl.spmd_dim, or a tuple or list of
    them, nested or not) as the tuple of its dimensions' instance counts."""
    if not isinstance(grid, (tuple, list)):
        grid = (grid,)
    sizes = tuple(_factor(g, "launch grid").size for g in _flatten(grid))
    if not sizes:
        raise NKIError("a launch grid needs at least one dimension")
    return sizes
