"""Streams and events of the neuron device (torch.Stream / torch.Event with neuron defaults)."""

from __future__ import annotations

import torch

from .device import _DeviceLike, _index, _lazy_init


class Stream(torch.Stream):
    """A neuron stream: a queue of device work run in order by its own worker.

    ``Stream()`` takes a stream from the current device's pool; ``priority`` < 0
    takes a high-priority one.
    """

    def __new__(cls, device: _DeviceLike = None, priority: int = 0, **kwargs):
        if "stream_id" in kwargs:
            return super().__new__(cls, **kwargs)
        _lazy_init()
        dev = torch.device("neuron", _index(device))
        return super().__new__(cls, device=dev, priority=priority)

    def __repr__(self) -> str:
        return (
            f"<torch_neuronx.Stream device=neuron:{self.device_index} stream_id={self.stream_id}>"
        )


class _EventMeta(type):
    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, torch.Event) and obj.device.type == "neuron"


class Event(metaclass=_EventMeta):
    """A neuron event: marks a point in a stream; can be waited on and timed.

    ``Event(...)`` returns a plain ``torch.Event`` on the neuron device, not a
    subclass instance: torch's ``Event.elapsed_time`` and ``Stream.record_event``
    accept only exact ``torch.Event`` objects. ``record()`` / ``wait()`` without
    a stream use the current neuron stream; ``isinstance(e, Event)`` is True for
    any neuron ``torch.Event``.
    """

    def __new__(  # type: ignore[misc]
        cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
    ) -> torch.Event:
        if interprocess:
            raise RuntimeError("neuron events cannot be shared between processes")
        return torch.Event(device="neuron", enable_timing=enable_timing, blocking=blocking)


def _wrap(s: torch.Stream) -> Stream:
    return Stream(stream_id=s.stream_id, device_index=s.device_index, device_type=s.device_type)


def current_stream(device: _DeviceLike = None) -> Stream:
    _lazy_init()
    return _wrap(torch._C._accelerator_getStream(_index(device)))


def default_stream(device: _DeviceLike = None) -> Stream:
    _lazy_init()
    s = torch._C._accelerator_getStream(_index(device))
    return Stream(stream_id=0, device_index=s.device_index, device_type=s.device_type)


def set_stream(stream: torch.Stream) -> None:
    if stream is None:
        return
    _lazy_init()
    torch._C._accelerator_setStream(stream)


class StreamContext:
    """Makes ``stream`` current on its device for the duration of the block."""

    def __init__(self, stream: torch.Stream | None) -> None:
        self.stream = stream
        self.prev: torch.Stream | None = None
        self.prev_device = -1

    def __enter__(self) -> torch.Stream | None:
        if self.stream is None:
            return None
        from . import _C

        self.prev_device = _C._exchange_device(self.stream.device_index)
        self.prev = current_stream(self.stream.device_index)
        set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc: object) -> bool:
        if self.stream is None:
            return False
        from . import _C

        set_stream(self.prev)
        _C._set_device(self.prev_device)
        return False


def stream(stream: torch.Stream | None) -> StreamContext:
    return StreamContext(stream)
