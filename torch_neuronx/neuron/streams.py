"""Streams and events of the neuron device (torch.Stream / torch.Event with neuron defaults)."""

from __future__ import annotations

from typing import Any

import torch

from .. import _C
from .device import _check_index, _DeviceLike, _index, _lazy_init


def _check_stream(stream: Any) -> None:
    """TypeError / ValueError / IndexError unless ``stream`` is a stream of a visible neuron device.

    torch's own checks would report an int as a stream of the "OPENGL" device,
    and pybind's as "incompatible function arguments".
    """
    if not isinstance(stream, torch.Stream):
        raise TypeError(f"Expected a torch.Stream, got {type(stream).__name__}")
    if stream.device.type != "neuron":
        raise ValueError(f"Expected a neuron stream, got a stream of {stream.device.type}")
    _check_index(stream.device_index)


def _check_event(event: Any) -> None:
    if not isinstance(event, torch.Event):
        raise TypeError(f"Expected a torch.Event, got {type(event).__name__}")
    if event.device.type != "neuron":
        raise ValueError(f"Expected a neuron event, got an event of {event.device.type}")


def _priority(priority: Any) -> int:
    """``priority`` as the pool's two levels: -1 (high) or 0 (normal).

    As on CUDA, a priority outside the range maps to the nearest valid one:
    any negative number is high priority, any positive one normal.
    """
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise TypeError(f"Stream priority must be an int, got {type(priority).__name__}")
    return -1 if priority < 0 else 0


class Stream(torch.Stream):
    """A neuron stream: a queue of device work run in order by its own worker.

    ``Stream()`` takes a stream from the current device's pool; ``priority`` < 0
    takes a high-priority one.
    """

    def __new__(cls, device: _DeviceLike = None, priority: int = 0, **kwargs: Any) -> Stream:
        if "stream_id" in kwargs:  # an existing stream (current_stream(), torch's own calls)
            return super().__new__(cls, **kwargs)
        if kwargs:
            raise TypeError(f"Stream() got unexpected keyword arguments: {', '.join(kwargs)}")
        dev = torch.device("neuron", _index(device))
        level = _priority(priority)
        _lazy_init()
        return super().__new__(cls, device=dev, priority=level)

    def wait_event(self, event: torch.Event) -> None:
        """Makes work queued later on this stream wait for ``event``."""
        _check_event(event)
        event.wait(self)

    def wait_stream(self, stream: torch.Stream) -> None:
        """Makes work queued later on this stream wait for what ``stream`` has queued."""
        _check_stream(stream)
        super().wait_stream(stream)

    def record_event(self, event: torch.Event | None = None) -> torch.Event:
        """Records ``event`` (a new :class:`Event` if None) on this stream and returns it.

        ``event.record(self)`` rather than torch.Stream.record_event, which takes
        only exact torch.Event objects, not :class:`Event`.
        """
        if event is None:
            event = Event()
        _check_event(event)
        event.record(self)
        return event

    def __repr__(self) -> str:
        return (
            f"<torch_neuronx.Stream device=neuron:{self.device_index} stream_id={self.stream_id}>"
        )


class _EventMeta(type):
    def __instancecheck__(cls, obj: object) -> bool:
        # A plain torch.Event on neuron (torch.Stream.record_event() makes those)
        # is a neuron event too.
        return isinstance(obj, torch.Event) and obj.device.type == "neuron"


class Event(torch.Event, metaclass=_EventMeta):
    """A neuron event: marks a point in a stream; can be waited on and timed.

    A class of its own, as torch.cuda.Event is, so that ``elapsed_time`` raises
    ``RuntimeError`` as CUDA's does (torch.Event raises ValueError for an event
    without timing or not recorded). Like torch.cuda.Event, it is not accepted
    where torch insists on an exact torch.Event: ``torch.Stream.record_event``
    (use ``event.record(stream)``, or a :class:`Stream`'s ``record_event``) and as
    the argument of a plain torch.Event's ``elapsed_time``. ``isinstance(e,
    Event)`` is True for any neuron ``torch.Event``.
    """

    def __new__(
        cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
    ) -> Event:
        if interprocess:
            raise RuntimeError("neuron events cannot be shared between processes")
        self = super().__new__(cls, device="neuron", enable_timing=enable_timing, blocking=blocking)
        # torch.Event.elapsed_time accepts only an exact torch.Event as its
        # argument, so timing uses a plain twin recorded just before this event.
        self._timer = torch.Event(device="neuron", enable_timing=True) if enable_timing else None
        return self

    def record(self, stream: torch.Stream | None = None) -> None:
        """Records the event on ``stream`` (default: the current neuron stream)."""
        if stream is not None:
            _check_stream(stream)
        # The twin first: once this event has completed, so has its twin.
        if self._timer is not None:
            self._timer.record(stream)
        super().record(stream)

    def wait(self, stream: torch.Stream | None = None) -> None:
        """Makes work queued later on ``stream`` (default: the current one) wait for the event."""
        if stream is not None:
            _check_stream(stream)
        super().wait(stream)

    def elapsed_time(self, end_event: torch.Event) -> float:
        """Milliseconds between this event and ``end_event`` (both completed).

        RuntimeError, as on CUDA, if either was created without
        ``enable_timing=True`` or has not been recorded.
        """
        _check_event(end_event)
        end_timer = _timer_of(end_event)
        if self._timer is None or end_timer is None:
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        try:
            return self._timer.elapsed_time(end_timer)
        except ValueError as e:  # torch.Event's checks: timing, recorded
            raise RuntimeError(str(e)) from None


def _timer_of(event: torch.Event) -> torch.Event | None:
    """The plain torch.Event that times ``event`` (None: an Event made without timing)."""
    return event if type(event) is torch.Event else getattr(event, "_timer", None)


def _wrap(s: torch.Stream) -> Stream:
    return Stream(stream_id=s.stream_id, device_index=s.device_index, device_type=s.device_type)


def current_stream(device: _DeviceLike = None) -> Stream:
    idx = _index(device)
    _lazy_init()
    return _wrap(torch._C._accelerator_getStream(idx))


def default_stream(device: _DeviceLike = None) -> Stream:
    idx = _index(device)
    _lazy_init()
    s = torch._C._accelerator_getStream(idx)
    return Stream(stream_id=0, device_index=s.device_index, device_type=s.device_type)


def set_stream(stream: torch.Stream | None) -> None:
    """Makes ``stream`` current on its device (None: a no-op, as on CUDA)."""
    if stream is None:
        return
    _check_stream(stream)
    _lazy_init()
    torch._C._accelerator_setStream(stream)


class StreamContext:
    """Makes ``stream`` current on its device for the duration of the block."""

    def __init__(self, stream: torch.Stream | None) -> None:
        if stream is not None:
            _check_stream(stream)
        self.stream = stream
        self.prev: torch.Stream | None = None
        self.prev_device = -1

    def __enter__(self) -> torch.Stream | None:
        if self.stream is None:
            return None
        self.prev_device = _C._exchange_device(self.stream.device_index)
        self.prev = current_stream(self.stream.device_index)
        set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc: object) -> bool:
        if self.stream is None:
            return False
        set_stream(self.prev)
        _C._set_device(self.prev_device)
        return False


def stream(stream: torch.Stream | None) -> StreamContext:
    return StreamContext(stream)
