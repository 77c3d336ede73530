"""Built programs in ``torch.compiler.save_cache_artifacts()`` /
``load_cache_artifacts()`` (TorchNeuron's ``"neuron_neff"`` artifact).

Inductor's own artifacts carry a compiled graph's generated code, not the C++
libraries built from it: a process that loads them into an empty cache builds
every kernel again. Each library Inductor loads from its cache directory is
recorded as a ``neuron_neff`` artifact (its path in the cache, its bytes), and
loading the artifacts writes it back, so the new process builds nothing. (The
artifact type keeps TorchNeuron's name, whose programs are NEFF files; what it
carries here is a C++ kernel library.)
"""

from __future__ import annotations

import os
import threading
from types import ModuleType
from typing import Any

from torch.compiler._cache import CacheArtifactManager

from ..adapters.monkey_patch import wrap

ARTIFACT_TYPE = "neuron_neff"

_lock = threading.Lock()
_recorded: set[str] = set()


def _cache_root() -> str:
    # lazy: torch._inductor costs seconds, and this module is imported with torch
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return os.path.realpath(cache_dir())


def record_library(path: str) -> None:
    """Records the library at ``path`` (once per process) if it is in the cache."""
    real = os.path.realpath(path)
    root = _cache_root()
    if not real.startswith(root + os.sep):
        return
    with _lock:
        if real in _recorded:
            return
        _recorded.add(real)
    with open(real, "rb") as f:
        content = f.read()
    CacheArtifactManager.record_artifact(ARTIFACT_TYPE, os.path.relpath(real, root), content)


def register_artifact_type(cache_module: ModuleType) -> None:
    """Registers the artifact type with torch.compiler's cache (on its import)."""
    CacheArtifact = cache_module.CacheArtifact

    class NeuronProgramArtifact(CacheArtifact):
        def populate_cache(self) -> None:
            root = _cache_root()
            dest = os.path.realpath(os.path.join(root, self.key))
            if not dest.startswith(root + os.sep):
                raise ValueError(f"{ARTIFACT_TYPE} artifact outside the cache: {self.key!r}")
            if os.path.exists(dest):
                return
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            tmp = f"{dest}.{os.getpid()}.tmp"
            with open(tmp, "wb") as f:
                f.write(self.content)
            os.replace(tmp, dest)  # atomic: a concurrent loader sees all or nothing
            with _lock:
                _recorded.add(dest)

        @staticmethod
        def type() -> str:
            return ARTIFACT_TYPE

    if ARTIFACT_TYPE not in cache_module.CacheArtifactFactory._artifact_types:
        cache_module.CacheArtifactFactory.register(NeuronProgramArtifact)


def record_loaded_libraries(codecache: ModuleType) -> None:
    """Makes Inductor's C++ code cache record each library it loads."""

    def make(original: Any) -> classmethod:
        load = original.__func__

        def _load_library(klass, path: str, key: str):
            result = load(klass, path, key)
            record_library(path)
            return result

        return classmethod(_load_library)

    wrap(codecache.CppCodeCache, "_load_library", make)
