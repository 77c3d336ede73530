"""Host CPU utilisation / host memory sampled while a profile runs.

A daemon thread takes a sample every `interval_s` (10 ms) until stopped, into
a bounded list (a forgotten profile cannot grow memory without limit). Values
come from psutil when it is installed, else from /proc (Linux).
"""

from __future__ import annotations

import os
import threading
import time

from .config import ProfileMode, warn_once


def _psutil():
    """psutil if installed (imported when a sampler starts, not at import:
    torch_neuronx's import pays for this package)."""
    try:
        import psutil  # optional: not a dependency (and /proc serves)
    except ImportError:  # /proc then
        return None
    return psutil


INTERVAL_S = 0.010
MAX_SAMPLES = 200_000  # ~33 min at 10 ms; then sampling stops (warned once)


class _ProcCpu:
    """Per-CPU and process utilisation (%) between calls, from /proc."""

    def __init__(self):
        self._prev = self._read()
        self._prev_proc = self._proc_ticks()
        self._prev_time = time.monotonic()
        self._hz = os.sysconf("SC_CLK_TCK")

    @staticmethod
    def _read() -> list[tuple[int, int]]:
        result = []
        with open("/proc/stat") as f:
            for line in f:
                if line.startswith("cpu") and line[3:4].isdigit():
                    fields = [int(x) for x in line.split()[1:]]
                    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
                    result.append((sum(fields), idle))
        return result

    @staticmethod
    def _proc_ticks() -> int:
        with open("/proc/self/stat") as f:
            # Fields after the parenthesised name: utime, stime are 14th, 15th.
            rest = f.read().rsplit(")", 1)[1].split()
        return int(rest[11]) + int(rest[12])

    def sample(self) -> tuple[list[float], float]:
        now, ticks, t = self._read(), self._proc_ticks(), time.monotonic()
        per_cpu = []
        for (total, idle), (ptotal, pidle) in zip(now, self._prev, strict=False):
            dt = total - ptotal
            per_cpu.append(0.0 if dt <= 0 else 100.0 * (1.0 - (idle - pidle) / dt))
        elapsed = t - self._prev_time
        process = 0.0 if elapsed <= 0 else 100.0 * (ticks - self._prev_proc) / self._hz / elapsed
        self._prev, self._prev_proc, self._prev_time = now, ticks, t
        return per_cpu, process


def _proc_memory() -> dict[str, float]:
    info = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("MemTotal", "MemAvailable"):
                info[key] = int(rest.split()[0]) * 1024
    with open("/proc/self/statm") as f:
        rss_pages = int(f.read().split()[1])
    total = info.get("MemTotal", 0)
    available = info.get("MemAvailable", 0)
    return {
        "total_bytes": float(total),
        "used_bytes": float(total - available),
        "available_bytes": float(available),
        "process_rss_bytes": float(rss_pages * os.sysconf("SC_PAGE_SIZE")),
    }


class HostSampler:
    """Samples the requested host counters on a daemon thread.

    samples: (unix_ns, kind, name, value) rows, kind "cpu_util" (percent;
    names cpu<N> and "process") or "host_memory" (bytes).
    """

    def __init__(self, modes, interval_s: float = INTERVAL_S, max_samples: int = MAX_SAMPLES):
        self.cpu = ProfileMode.CPU_UTIL in modes
        self.memory = ProfileMode.HOST_MEMORY in modes
        self.interval_s = interval_s
        self.max_samples = max_samples
        self.samples: list[tuple[int, str, str, float]] = []
        self.source = ""  # "psutil" or "/proc", once started
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ticks = 0
        self._ps = None

    @property
    def enabled(self) -> bool:
        return self.cpu or self.memory

    def start(self) -> None:
        if not self.enabled or self._thread is not None:
            return
        self._ps = psutil = _psutil()
        self.source = "psutil" if psutil is not None else "/proc"
        if psutil is not None:
            self._process = psutil.Process()
            # The first cpu_percent calls only set the baseline.
            psutil.cpu_percent(percpu=True)
            self._process.cpu_percent()
        else:
            self._proc_cpu = _ProcCpu()
        self._sample()  # a first point at the start of the window
        self._thread = threading.Thread(target=self._run, name="neuron-host-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=5.0)
        self._thread = None
        self._sample()  # and one at its end

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self._sample()
            except Exception as e:  # a sampling failure must not kill the profile
                warn_once("host-sampler-error", f"host counter sampling stopped: {e}")
                return

    def _sample(self) -> None:
        if self._ticks >= self.max_samples:
            warn_once(
                "host-sampler-cap",
                f"host counters: stopped sampling after {self.max_samples} samples "
                "(the profile ran long)",
            )
            return
        self._ticks += 1
        now = time.time_ns()
        rows = self.samples
        psutil = self._ps
        if self.cpu:
            if psutil is not None:
                per_cpu = psutil.cpu_percent(percpu=True)
                process = self._process.cpu_percent()
            else:
                per_cpu, process = self._proc_cpu.sample()
            rows.extend((now, "cpu_util", f"cpu{i}", float(v)) for i, v in enumerate(per_cpu))
            rows.append((now, "cpu_util", "process", float(process)))
        if self.memory:
            if psutil is not None:
                vm = psutil.virtual_memory()
                mem = {
                    "total_bytes": float(vm.total),
                    "used_bytes": float(vm.total - vm.available),
                    "available_bytes": float(vm.available),
                    "process_rss_bytes": float(self._process.memory_info().rss),
                }
            else:
                mem = _proc_memory()
            rows.extend((now, "host_memory", k, v) for k, v in mem.items())
