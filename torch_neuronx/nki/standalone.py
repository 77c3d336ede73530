"""NKI's ways to run and measure a kernel standalone, outside a PyTorch
program: ``nki.simulate_kernel`` (NumPy in, NumPy out), ``nki.simulate``
(NumPy arrays or torch tensors in, the same out), ``nki.baremetal``,
``nki.benchmark`` and ``nki.profile`` (the cost model's estimate in NKI's
result objects), and ``estimate`` (a KernelProfile).

(Not named simulate.py or profile.py: a submodule of that name would become
the package attribute ``nki.simulate`` / ``nki.profile`` once imported,
hiding these functions.)"""

from __future__ import annotations

import numpy as np

from .kernel import GridLaunch, Kernel, _grid_tuple, as_kernel, compiled_for, launch
from .kernel_profile import KernelProfile


def simulate_kernel(kernel, *args, **kwargs):
    """Runs ``kernel`` (optionally ``kernel[grid]``) on NumPy arrays and
    returns its results as NumPy arrays; arguments it writes are updated in
    place."""
    k, grid = as_kernel(kernel)
    return launch(k, grid, args, kwargs)


class _Simulated:
    """``nki.simulate(kernel)``: calls on NumPy arrays or torch tensors;
    arguments the kernel writes are updated in place."""

    def __init__(self, kernel, grid=()):
        self.kernel, self.grid = kernel, grid

    def __getitem__(self, grid):
        return _Simulated(self.kernel, _grid_tuple(grid))

    def __call__(self, *args, **kwargs):
        return launch(self.kernel, self.grid, args, kwargs)


def simulate(kernel):
    """``nki.simulate(kernel)(*arrays)``: NumPy or torch tensors in, the same
    out."""
    k, grid = as_kernel(kernel)
    return _Simulated(k, grid)


def baremetal(kernel=None, **kwargs):
    """``nki.baremetal(kernel)(*arrays)``: runs on NumPy arrays (here, on the
    simulator)."""
    if kernel is None:
        return lambda k: baremetal(k, **kwargs)
    k, grid = as_kernel(kernel)
    b = Kernel(k.fn, **kwargs)
    return GridLaunch(b, grid) if grid else b


def estimate(kernel, *args, target: str | None = None, **kwargs) -> KernelProfile:
    """The cost model's estimate of ``kernel(*args)`` without running it.
    Arguments may be arrays, tensors or ``nt.tensor[shape, dtype]`` specs.
    ``target``: a name of ``hardware_targets()`` ("trn1", "trn2", "trn3");
    by default ``default_target()`` ("trn2", NeuronCore-v3)."""
    k, grid = as_kernel(kernel)
    return compiled_for(k, grid, args, kwargs).profile(target)


class _Latency:
    def __init__(self, us: float):
        self._us = us

    def get_latency_percentile(self, p) -> float:
        """Microseconds (the cost model's estimate: the same at every
        percentile, the simulator being deterministic)."""
        return self._us


class _BenchmarkResult:
    def __init__(self, profile: KernelProfile):
        self.nc_latency = _Latency(profile.total_us)
        self.profile = profile


class _Benchmarked:
    def __init__(self, kernel, grid, target, warmup, iters):
        self._kernel, self._grid = kernel, grid
        self._target = target
        self.warmup, self.iters = warmup, iters
        self.benchmark_result = None

    def __getitem__(self, grid):
        return _Benchmarked(self._kernel, _grid_tuple(grid), self._target, self.warmup, self.iters)

    def __call__(self, *args, **kwargs):
        ck = compiled_for(self._kernel, self._grid, args, kwargs)
        self.benchmark_result = _BenchmarkResult(ck.profile(self._target))
        if all(
            not hasattr(a, "shape") or isinstance(a, np.ndarray) or hasattr(a, "data_ptr")
            for a in args
        ) and not any(type(a).__name__ == "TensorSpec" for a in args):
            return launch(self._kernel, self._grid, args, kwargs)
        return None


def benchmark(
    kernel=None, *, warmup: int = 10, iters: int = 100, target: str | None = None, **kwargs
):
    """``nki.benchmark(warmup=, iters=)(kernel)``: calling the result traces
    the kernel, records the cost model's latency in
    ``.benchmark_result.nc_latency.get_latency_percentile(p)`` (microseconds),
    and runs it when given data."""
    if kernel is None:
        return lambda k: benchmark(k, warmup=warmup, iters=iters, target=target, **kwargs)
    k, grid = as_kernel(kernel)
    return _Benchmarked(k, grid, target, warmup, iters)


def profile(kernel=None, **kwargs):
    """``nki.profile``: as benchmark; the estimate is in
    ``.benchmark_result.profile`` (a KernelProfile)."""
    return benchmark(
        kernel, **{k: v for k, v in kwargs.items() if k in ("warmup", "iters", "target")}
    )
