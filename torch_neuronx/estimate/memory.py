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
        # Storages resized in place (FSDP2 allocates and frees its unsharded
        # parameters with UntypedStorage.resize_, which no operator shows):
        # [weakref to the storage, its key], their current size read at each
        # operator that makes a tensor.
        self._resizable: list = []
        self.by_phase_peak: dict = {}
        self.phase = "step"

    def reset_peak(self) -> None:
        """The peak from now on (after an unrecorded warm-up step)."""
        self.peak = self.live
        self.by_phase_peak = {}

    def track_resizable(self, tensors) -> None:
        """Follows the sizes of these tensors' storages from now on."""
        have = {k for _, k in self._resizable}
        for t in tensors:
            if not (isinstance(t, torch.Tensor) and t.device.type == "neuron"):
                continue
            st = t.untyped_storage()
            key = st._cdata
            if key in have:
                continue
            have.add(key)
            if key not in self._seen:
                self._seen[key] = 0
                weakref.finalize(st, self._free, key)
            self._resizable.append((weakref.ref(st), key))
        self._poll()

    def _poll(self) -> None:
        seen = self._seen
        for ref, key in self._resizable:
            st = ref()
            if st is None or key not in seen:
                continue
            n = st.nbytes()
            old = seen[key]
            if n != old:
                seen[key] = n
                self.live += n - old
        self._note_peak()

    def _note_peak(self) -> None:
        if self.live > self.peak:
            self.peak = self.live
        p = self.by_phase_peak
        if self.live > p.get(self.phase, 0):
            p[self.phase] = self.live

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

    def stand_in(self, t) -> None:
        """Knows the storage of a neuron tensor that stands for one counted
        already (a second module over the same weights): zero bytes, so its
        views are not counted as new storages either."""
        t = getattr(t, "_local_tensor", t)
        if isinstance(t, torch.Tensor) and t.device.type == "neuron":
            st = t.untyped_storage()
            if st._cdata not in self._seen:
                self._seen[st._cdata] = 0
                weakref.finalize(st, self._free, st._cdata)

    def produced(self, out) -> None:
        if self._resizable:
            self._poll()
        self._produced(out)

    def _produced(self, out) -> None:
        if isinstance(out, torch.Tensor):
            if out.device.type == "neuron":
                self._add_storage(out.untyped_storage())
        elif isinstance(out, (list, tuple)):
            for o in out:
                self._produced(o)
