"""The rank's HBM in a planning run: the bytes of the live fake storages on
neuron — parameters' shards, gradients, optimizer state, activations saved for
backward, FSDP's gathered parameters and buffers — and their peak.

A fake tensor's storage has a size and no memory. Each new storage on neuron is
counted when an operator produces it (or when the run starts, for the
parameters and optimizer state that exist already) and uncounted when Python
drops it: PyTorch keeps one Python object per storage for as long as the storage
lives, so a weakref finalizer on it sees the free.
"""

from __future__ import annotations

import weakref

import torch


class MemoryTracker:
    def __init__(self):
        self.live = 0
        self.peak = 0
        self._seen: dict = {}  # storage key -> bytes
        self.by_phase_peak: dict = {}
        self.phase = "step"

    def reset_peak(self) -> None:
        """The peak from now on (after an unrecorded warm-up step)."""
        self.peak = self.live
        self.by_phase_peak = {}

    def _add_storage(self, st) -> None:
        key = st._cdata
        if key in self._seen:
            return
        n = st.nbytes()
        self._seen[key] = n
        self.live += n
        if self.live > self.peak:
            self.peak = self.live
        p = self.by_phase_peak
        if self.live > p.get(self.phase, 0):
            p[self.phase] = self.live
        weakref.finalize(st, self._free, key)

    def _free(self, key) -> None:
        n = self._seen.pop(key, 0)
        self.live -= n

    def add(self, t) -> None:
        """Counts the storage of a neuron tensor (a DTensor's local shard)."""
        local = getattr(t, "_local_tensor", None)
        if local is not None:
            t = local
        if isinstance(t, torch.Tensor) and t.device.type == "neuron":
            self._add_storage(t.untyped_storage())

    def produced(self, out) -> None:
        if isinstance(out, torch.Tensor):
            if out.device.type == "neuron":
                self._add_storage(out.untyped_storage())
        elif isinstance(out, (list, tuple)):
            for o in out:
                self.produced(o)
