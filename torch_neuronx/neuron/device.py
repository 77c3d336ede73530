"""Device management: which neuron devices exist and which one is current."""

from __future__ import annotations

import operator
import os
import re
from dataclasses import dataclass
from typing import Any

import torch

from .. import _C

_DeviceLike = torch.device | str | int | None


class DeviceIndexError(IndexError, ValueError):
    """An index that is not a device of the numbering.

    TorchNeuron raises ValueError ("Invalid device id") and torch-neuronx raised
    IndexError (a lookup out of range): both ``except`` clauses catch it.
    """


class DeviceStringError(ValueError, RuntimeError):
    """A device string that does not parse.

    ValueError as TorchNeuron (its tests: ``get_device_name("invalid")``), and the
    RuntimeError ``torch.device`` raises for it, as CUDA's functions do.
    """


# "neuron:<i>" is read here, not by torch.device: torch stores an 8-bit index
# and calls "neuron:300" an unparsable string rather than a missing device.
_INDEXED_NAME = re.compile(r"neuron:(-?\d+)")


def _parse_index(obj: Any) -> int:
    """The index ``obj`` names, not yet checked against the visible devices.

    Accepts what torch.cuda accepts: None or an index-less ``"neuron"`` (the
    current device), an int, ``"neuron:<i>"``, a torch.device and a
    :class:`device` context manager. bool is refused although it is an int:
    ``set_device(True)`` is a bug, not a request for neuron:1.
    """
    if obj is None:
        return current_device()
    if isinstance(obj, bool):
        raise TypeError(f"Expected a neuron device or device index, got bool ({obj})")
    if isinstance(obj, int):
        return obj
    if isinstance(obj, str):
        if m := _INDEXED_NAME.fullmatch(obj):
            return int(m.group(1))
        obj = _parse_device_string(obj)
    if isinstance(obj, torch.device):
        if obj.type != "neuron":
            raise ValueError(f"Expected a neuron device, but got: {obj}")
        return current_device() if obj.index is None else obj.index
    if isinstance(obj, device):
        return obj.idx
    if hasattr(type(obj), "__index__"):  # numpy integers, 0-d integer tensors
        return operator.index(obj)
    raise TypeError(
        "Expected a neuron device (an int, 'neuron:<index>' or a torch.device), "
        f"got {type(obj).__name__}"
    )


def _parse_device_string(name: str) -> torch.device:
    try:
        return torch.device(name)
    except RuntimeError as e:
        # torch's own message lists every device type but 'neuron' (it says
        # 'privateuseone'): say what a neuron device string looks like.
        raise DeviceStringError(
            f"Invalid device string {name!r}: expected 'neuron' or 'neuron:<index>'"
        ) from e


def _check_index(idx: int) -> None:
    """IndexError naming the valid range unless ``idx`` is an index of the numbering.

    Python checks the range before any ``_C`` call: the bindings take a C int
    (a larger index is pybind's "incompatible function arguments") and narrow it
    to c10's 8-bit DeviceIndex (neuron:256 would silently be neuron:0). Under a
    launcher the numbering also holds the other local ranks' devices: what runs
    on a device or reserves one checks, in C++, that the device is this
    process's (see ``_device_range``).
    """
    if not 0 <= idx < _C._device_count():
        raise DeviceIndexError(_C._device_index_error(str(idx)))


def _device_range() -> range:
    """This process's devices: ``range(first, first + count)``.

    ``first`` is 0, or in a process started by a launcher (``LOCAL_RANK`` set)
    its local rank, as TorchNeuron numbers them: every rank's first device is
    ``neuron:<local_rank>``. ``device_count()`` is the end of the host's
    numbering, so some indices below it can be other ranks' devices.
    """
    first, count = _C._device_range()
    return range(first, first + count)


def _index(device: Any = None) -> int:
    """Index of the visible neuron device ``device`` names (None: the current one).

    TypeError if ``device`` cannot name a device, ValueError if it names another
    device type, IndexError if the index is not a visible neuron device.
    """
    idx = _parse_index(device)
    _check_index(idx)
    return idx


def _lazy_init() -> None:
    """Starts the runtime (on first device use, never at import)."""
    if _C._is_in_bad_fork():
        raise RuntimeError(
            "Cannot re-initialize neuron in forked subprocess. To use neuron with "
            "multiprocessing, you must use the 'spawn' start method"
        )
    _C._init()


def is_available() -> bool:
    """True if at least one neuron device is visible."""
    try:
        return device_count() > 0
    except RuntimeError:
        return False


def device_count() -> int:
    """Number of neuron device indices (NEURON_RT_VISIBLE_CORES selects the devices).

    In one process: the visible cores, neuron:0 .. neuron:<count - 1>. In a
    process started by a launcher such as torchrun, whose devices are numbered
    from its LOCAL_RANK: one more than the host's highest index
    (LOCAL_WORLD_SIZE - 1 + its own count), the same on every local rank, so
    ``local_rank < device_count()`` and ``rank % device_count()`` hold as on
    CUDA.
    """
    return _C._device_count()


def is_initialized() -> bool:
    return _C._is_initialized() and not _C._is_in_bad_fork()


def init() -> None:
    _lazy_init()


def current_device() -> int:
    return _C._get_device()


def _index_or_none(obj: Any) -> int:
    """Like :func:`_index`, but the int -1 means "no device" and is returned as is.

    CUDA's convention: ``get_device()`` of a CPU tensor is -1, and
    ``set_device(-1)`` / ``device(-1)`` do nothing. Other negative indices are errors.
    """
    if type(obj) is int and obj == -1:
        return -1
    return _index(obj)


def set_device(device: _DeviceLike) -> None:
    """Makes ``device`` current; -1 is a no-op (as on CUDA).

    Like ``torch.cuda.set_device`` (and ``torch.accelerator.set_device_index``) it
    starts the runtime, so ``is_initialized()`` is True afterwards: FakeTensorMode
    (DTensor's sharding propagation) gives index-less ``"neuron"`` the current
    device only when it is, and neuron:0 otherwise.
    """
    if device is None:
        # As torch.cuda.set_device(None): None is not "the current device" here.
        raise ValueError("set_device() needs a neuron device or index, got None")
    idx = _index_or_none(device)
    if idx >= 0:
        _lazy_init()
        _C._set_device(idx)


class device:
    """Context manager that makes ``device`` current (None or -1: a no-op, as on CUDA)."""

    def __init__(self, device: Any) -> None:
        self.idx = -1 if device is None else _index_or_none(device)
        self.prev_idx = -1

    def __enter__(self) -> None:
        if self.idx >= 0:
            _lazy_init()  # as set_device (and torch.cuda.device)
        self.prev_idx = _C._exchange_device(self.idx)

    def __exit__(self, *exc: object) -> bool:
        if self.idx >= 0:
            _C._set_device(self.prev_idx)
        return False


class device_of(device):
    """Context manager that makes the device of ``obj`` (a tensor or storage) current.

    A no-op for an object on another device, as ``torch.cuda.device_of``.
    """

    def __init__(self, obj: torch.Tensor) -> None:
        if not isinstance(getattr(obj, "device", None), torch.device):
            raise TypeError(f"device_of() expects a tensor or storage, got {type(obj).__name__}")
        super().__init__(obj.get_device() if obj.device.type == "neuron" else -1)


@dataclass(frozen=True)
class NeuronDeviceProperties:
    name: str
    total_memory: int
    logical_core: int
    chip: int
    physical_cores_per_logical_core: int
    logical_cores_per_chip: int
    num_chips: int

    def __repr__(self) -> str:
        return (
            f"NeuronDeviceProperties(name='{self.name}', total_memory="
            f"{self.total_memory // (1 << 20)}MB, logical_core={self.logical_core}, "
            f"chip={self.chip}, physical_cores_per_logical_core="
            f"{self.physical_cores_per_logical_core})"
        )


# The logical core behind each device index of the host, as the ranks of the
# default process group told each other (torch_neuronx.distributed): another
# local rank's devices are known from then on.
_host_device_cores: dict[int, int] = {}


def _set_host_device_cores(cores: dict[int, int]) -> None:
    _host_device_cores.clear()
    _host_device_cores.update(cores)


def _own_device_cores() -> dict[int, int]:
    """This process's device indices and the host's logical core behind each."""
    return {i: _C._device_properties(i)["logical_core"] for i in _device_range()}


def _other_rank_core(idx: int) -> int:
    """The logical core of ``idx``, a device of another local rank.

    Known exactly once the default process group exists; before, the launcher's
    layout is assumed (each local rank's devices start at its own core, as with
    ``NEURON_RT_VISIBLE_CORES=<LOCAL_RANK>``): the offset between this process's
    first index and its first core holds for the others.
    """
    if idx in _host_device_cores:
        return _host_device_cores[idx]
    first = _device_range().start
    core = idx + _C._device_properties(first)["logical_core"] - first
    if not 0 <= core < _C._host_logical_cores():
        raise DeviceIndexError(
            f"neuron:{idx} is another process's device and its core is not known "
            "before init_process_group: " + _C._device_index_error(str(idx))
        )
    return core


def get_device_properties(device: _DeviceLike = None) -> NeuronDeviceProperties:
    """The properties of a device; ``name`` is the platform (``"trn2"``), as TorchNeuron's.

    Every index below ``device_count()`` has properties, another local rank's
    device included (as CUDA's of every GPU of the host).
    """
    idx = _index(device)
    if idx in _device_range():
        return NeuronDeviceProperties(**_C._device_properties(idx))
    return NeuronDeviceProperties(**_C._host_core_properties(_other_rank_core(idx)))


def get_device_name(device: _DeviceLike = None) -> str:
    """``"neuron:<index>"``, as TorchNeuron names a device.

    Code that tells devices apart by name (TorchTitan's ``"neuron" in
    device_name``) recognises it; the platform is ``get_device_properties().name``.
    """
    return f"neuron:{_index(device)}"


def get_device_capability(device: _DeviceLike = None) -> tuple[int, int]:
    get_device_properties(device)  # validates the index
    return (3, 0)


def synchronize(device: _DeviceLike = None) -> None:
    """Waits for all work on ``device`` and raises any device error it hit."""
    idx = _index(device)  # before _lazy_init: a bad index starts no runtime
    _lazy_init()
    _C._synchronize(idx)


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


def launch_blocking() -> bool:
    """True when NEURON_LAUNCH_BLOCKING=1: every op waits for the device."""
    return bool(_C._launch_blocking())


def _give_launched_rank_its_core() -> None:
    """As TorchNeuron's launcher does: a process started by torchrun (LOCAL_RANK
    set) without NEURON_RT_VISIBLE_CORES gets the core of its local rank, so
    that the local ranks do not share cores. Runs at import, before the runtime
    reads the variable; a malformed LOCAL_RANK is reported at first device use.
    """
    local_rank = os.environ.get("LOCAL_RANK", "")
    if local_rank.isdigit() and not os.environ.get("NEURON_RT_VISIBLE_CORES"):
        # NEURON_RT_NUM_CORES=n: the runtime gives each process the next n free
        # cores, which for local ranks started in order are rank * n onwards.
        n = os.environ.get("NEURON_RT_NUM_CORES", "")
        n = int(n) if n.isdigit() and int(n) > 0 else 1
        first = int(local_rank) * n
        cores = str(first) if n == 1 else f"{first}-{first + n - 1}"
        os.environ["NEURON_RT_VISIBLE_CORES"] = cores


_give_launched_rank_its_core()
