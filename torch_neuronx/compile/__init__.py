"""``torch.compile`` on neuron: compiled graphs as device programs.

- ``inductor_device``: ``neuron`` registered with Inductor (its C++ kernels,
  a wrapper that launches each compiled graph as one work item);
- ``program``: what the generated wrapper calls at run time;
- ``backend``: ``torch.compile(backend="neuron")``.

Importing this package does not import Inductor; registration happens when a
compile first needs it.
"""

import os


def env_flag(name: str) -> bool:
    """A TORCH_NEURONX_* switch: on when set to anything but "" or "0"."""
    return os.environ.get(name, "0") not in ("", "0")


def use_cache_dir_from_env() -> None:
    """TORCH_NEURONX_NEFF_CACHE_DIR: where compiled programs are cached (Inductor's
    cache directory, unless TORCHINDUCTOR_CACHE_DIR names one). Applied at import:
    Inductor fixes its directory the first time it looks. (TorchNeuron's name: its
    cache holds NEFF files, ours Inductor's code and the kernel libraries built from it.)"""
    cache_dir = os.environ.get("TORCH_NEURONX_NEFF_CACHE_DIR")
    if cache_dir:
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.abspath(cache_dir))
