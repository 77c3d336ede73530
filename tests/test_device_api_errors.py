"""Bad arguments to the torch.neuron API raise ordinary Python exceptions that say what is valid.

Table-driven: each case is a call, the exception type it must raise and a regex its
message must match. Never pybind's "incompatible function arguments", never a crash,
never a call that silently acts on a device that does not exist (the bindings narrow
an index to c10's 8-bit DeviceIndex: neuron:256 used to be neuron:0). After every
case the process must still work: the device runs ops, and the current device,
stream, memory fraction and RNG state are what they were.
"""

import math

import pytest
import torch

N = torch.neuron
COUNT = N.device_count()  # starts no runtime
BIG = COUNT + 10


def _range_msg(index: object) -> str:
    there = "is 1 visible neuron device" if COUNT == 1 else f"are {COUNT} visible neuron devices"
    return rf"Invalid device index neuron:{index}: there {there} .*NEURON_RT_VISIBLE_CORES"


NOT_NEURON = r"Expected a neuron device, but got: (cpu|cuda:0)"
NOT_A_DEVICE = r"Expected a neuron device \(an int, 'neuron:<index>' or a torch.device\), got"

# (id, value, exception, regex) for every argument that names a device.
BAD_DEVICES = [
    ("negative", -1, IndexError, _range_msg(-1)),
    ("too-large", BIG, IndexError, _range_msg(BIG)),
    ("256", 256, IndexError, _range_msg(256)),  # wrapped to neuron:0 by an 8-bit cast
    ("2**32", 2**32, IndexError, _range_msg(2**32)),
    ("2**64", 2**64, IndexError, _range_msg(2**64)),
    ("str-too-large", f"neuron:{COUNT + 5}", IndexError, _range_msg(COUNT + 5)),
    ("str-300", "neuron:300", IndexError, _range_msg(300)),  # torch.device cannot parse it
    ("str-negative", "neuron:-1", IndexError, _range_msg(-1)),
    ("cpu", "cpu", ValueError, NOT_NEURON),
    ("cuda", "cuda:0", ValueError, NOT_NEURON),
    ("torch.device-cpu", torch.device("cpu"), ValueError, NOT_NEURON),
    ("garbage-str", "garbage", RuntimeError, r"Invalid device string 'garbage': expected 'neuron'"),
    ("float", 1.5, TypeError, NOT_A_DEVICE + " float"),
    ("object", object(), TypeError, NOT_A_DEVICE + " object"),
    ("bool", True, TypeError, r"got bool"),
]


def _state() -> torch.Tensor:
    return N.get_rng_state(0)


def _enter(ctx) -> None:
    with ctx:
        pass


# Every function that takes a device, called with `d`.
DEVICE_FUNCTIONS = {
    "get_device_properties": lambda d: N.get_device_properties(d),
    "get_device_name": lambda d: N.get_device_name(d),
    "get_device_capability": lambda d: N.get_device_capability(d),
    "synchronize": lambda d: N.synchronize(d),
    "set_device": lambda d: N.set_device(d),
    "device": lambda d: _enter(N.device(d)),
    "current_stream": lambda d: N.current_stream(d),
    "default_stream": lambda d: N.default_stream(d),
    "Stream": lambda d: N.Stream(device=d),
    "memory_allocated": lambda d: N.memory_allocated(d),
    "max_memory_allocated": lambda d: N.max_memory_allocated(d),
    "memory_reserved": lambda d: N.memory_reserved(d),
    "max_memory_reserved": lambda d: N.max_memory_reserved(d),
    "memory_stats": lambda d: N.memory_stats(d),
    "memory_summary": lambda d: N.memory_summary(d),
    "reset_peak_memory_stats": lambda d: N.reset_peak_memory_stats(d),
    "reset_accumulated_memory_stats": lambda d: N.reset_accumulated_memory_stats(d),
    "mem_get_info": lambda d: N.mem_get_info(d),
    "get_per_process_memory_fraction": lambda d: N.get_per_process_memory_fraction(d),
    "set_per_process_memory_fraction": lambda d: N.set_per_process_memory_fraction(0.5, d),
    "get_rng_state": lambda d: N.get_rng_state(d),
    "set_rng_state": lambda d: N.set_rng_state(_state(), d),
    "memory._snapshot": lambda d: N.memory._snapshot(d),
    "memory._record_memory_history": lambda d: N.memory._record_memory_history(device=d),
}

# set_device(-1) and device(-1) are no-ops, as on CUDA (-1 is a CPU tensor's
# get_device()); -2 is an error for them.
NO_OP_AT_MINUS_ONE = {"set_device", "device"}


def _device_cases():
    for fname, call in DEVICE_FUNCTIONS.items():
        for vid, value, exc, regex in BAD_DEVICES:
            if fname in NO_OP_AT_MINUS_ONE and value == -1:
                value, regex = -2, _range_msg(-2)
            yield pytest.param(lambda c=call, v=value: c(v), exc, regex, id=f"{fname}[{vid}]")


def _timed_pair(record_end: bool = True):
    start, end = N.Event(enable_timing=True), N.Event(enable_timing=True)
    start.record()
    if record_end:
        end.record()
        end.synchronize()
    return start, end


def _untimed_pair():
    a, b = N.Event(), N.Event()
    a.record()
    b.record()
    b.synchronize()
    return a, b


def _rng_state(nbytes=16, dtype=torch.uint8, device="cpu", offset=0):
    s = torch.zeros(nbytes, dtype=dtype, device=device)
    if nbytes == 16 and dtype == torch.uint8 and offset:
        s[8:].view(torch.int64).fill_(offset)
    return s


def _cpu_stream():
    return torch.Stream(device="cpu")


RANGE_0_1 = r"Invalid fraction value: .*Allowed range: \(0, 1\]"
BYTE_TENSOR = r"RNG state must be a (CPU )?torch.uint8 tensor"

OTHER_CASES = [
    # None where a value is needed.
    ("set_device[None]", lambda: N.set_device(None), ValueError, r"needs a neuron device"),
    ("manual_seed[None]", lambda: N.manual_seed(None), TypeError, r"seed must be an integer"),
    ("set_rng_state[None]", lambda: N.set_rng_state(None), TypeError, BYTE_TENSOR),
    ("fraction[None]", lambda: N.set_per_process_memory_fraction(None), TypeError, "`float`"),
    ("Stream[priority=None]", lambda: N.Stream(priority=None), TypeError, r"priority must be"),
    ("wait_event[None]", lambda: N.Stream().wait_event(None), TypeError, r"torch.Event"),
    ("wait_stream[None]", lambda: N.Stream().wait_stream(None), TypeError, r"torch.Stream"),
    ("elapsed_time[None]", lambda: N.Event().elapsed_time(None), TypeError, r"torch.Event"),
    ("device_of[None]", lambda: _enter(N.device_of(None)), TypeError, r"tensor or storage"),
    # Seeds: what int() accepts, in [-2**63, 2**64); larger ones are not truncated.
    ("manual_seed[2**64]", lambda: N.manual_seed(2**64), ValueError, r"out of range"),
    ("manual_seed[-2**63-1]", lambda: N.manual_seed(-(2**63) - 1), ValueError, "out of range"),
    ("manual_seed_all[2**64]", lambda: N.manual_seed_all(2**64), ValueError, "out of range"),
    ("torch.manual_seed[2**64]", lambda: torch.manual_seed(2**64), ValueError, "out of range"),
    ("manual_seed[str]", lambda: N.manual_seed("abc"), ValueError, r"integer, got 'abc'"),
    ("manual_seed[inf]", lambda: N.manual_seed(math.inf), ValueError, r"integer, got inf"),
    ("manual_seed[nan]", lambda: N.manual_seed(math.nan), ValueError, r"integer, got nan"),
    ("manual_seed[object]", lambda: N.manual_seed(object()), TypeError, r"got object"),
    # RNG states: a CPU uint8 tensor of 16 bytes with a valid offset.
    ("set_rng_state[size]", lambda: N.set_rng_state(_rng_state(15)), ValueError, "16 bytes"),
    (
        "set_rng_state[dtype]",
        lambda: N.set_rng_state(_rng_state(dtype=torch.float32)),
        TypeError,
        r"uint8 tensor, got torch.float32",
    ),
    (
        "set_rng_state[neuron]",
        lambda: N.set_rng_state(_rng_state(device="neuron")),
        TypeError,
        r"CPU torch.uint8 tensor, got one on neuron:0 \(move it with .cpu\(\)\)",
    ),
    ("set_rng_state[list]", lambda: N.set_rng_state([0] * 16), TypeError, BYTE_TENSOR),
    (
        "set_rng_state[offset]",
        lambda: N.set_rng_state(_rng_state(offset=-6)),
        RuntimeError,
        "offset -6 is negative",
    ),
    (
        "set_rng_state_all[too-many]",
        lambda: N.set_rng_state_all([_state()] * (COUNT + 1)),
        ValueError,
        rf"Got {COUNT + 1} RNG states but there are only {COUNT}",
    ),
    (
        "set_rng_state_all[one-bad]",
        lambda: N.set_rng_state_all([_rng_state(offset=8), _rng_state(15)]),
        ValueError,
        "16 bytes",
    ),
    # Memory fraction: a float in (0, 1].
    ("fraction[0]", lambda: N.set_per_process_memory_fraction(0.0), ValueError, RANGE_0_1),
    ("fraction[1.5]", lambda: N.set_per_process_memory_fraction(1.5), ValueError, RANGE_0_1),
    ("fraction[-1]", lambda: N.set_per_process_memory_fraction(-1.0), ValueError, RANGE_0_1),
    ("fraction[nan]", lambda: N.set_per_process_memory_fraction(math.nan), ValueError, RANGE_0_1),
    ("fraction[inf]", lambda: N.set_per_process_memory_fraction(math.inf), ValueError, RANGE_0_1),
    ("fraction[int]", lambda: N.set_per_process_memory_fraction(1), TypeError, "`float`"),
    ("fraction[str]", lambda: N.set_per_process_memory_fraction("0.5"), TypeError, "`float`"),
    # Streams.
    ("Stream[priority=float]", lambda: N.Stream(priority=1.5), TypeError, r"int, got float"),
    ("Stream[priority=str]", lambda: N.Stream(priority="high"), TypeError, r"int, got str"),
    ("Stream[unknown-kwarg]", lambda: N.Stream(foo=1), TypeError, r"unexpected keyword.*foo"),
    ("set_stream[int]", lambda: N.set_stream(3), TypeError, r"Expected a torch.Stream, got int"),
    ("set_stream[cpu]", lambda: N.set_stream(_cpu_stream()), ValueError, r"neuron stream"),
    ("stream[int]", lambda: _enter(N.stream(3)), TypeError, r"Expected a torch.Stream"),
    ("stream[cpu]", lambda: _enter(N.stream(_cpu_stream())), ValueError, r"neuron stream"),
    ("wait_event[int]", lambda: N.Stream().wait_event(3), TypeError, r"torch.Event, got int"),
    (
        "wait_event[cpu]",
        lambda: N.Stream().wait_event(torch.Event("cpu")),
        ValueError,
        r"neuron event, got an event of cpu",
    ),
    ("wait_stream[int]", lambda: N.Stream().wait_stream(3), TypeError, r"torch.Stream, got int"),
    ("wait_stream[cpu]", lambda: N.Stream().wait_stream(_cpu_stream()), ValueError, "neuron"),
    ("record_event[int]", lambda: N.Stream().record_event(3), TypeError, r"torch.Event"),
    (
        "record_event[cpu]",
        lambda: N.Stream().record_event(torch.Event("cpu")),
        ValueError,
        r"neuron event",
    ),
    # Events.
    ("Event.record[int]", lambda: N.Event().record(3), TypeError, r"torch.Stream, got int"),
    ("Event.record[cpu]", lambda: N.Event().record(_cpu_stream()), ValueError, "neuron stream"),
    ("Event.wait[int]", lambda: N.Event().wait(3), TypeError, r"torch.Stream, got int"),
    ("Event.wait[cpu]", lambda: N.Event().wait(_cpu_stream()), ValueError, "neuron stream"),
    ("elapsed_time[int]", lambda: N.Event().elapsed_time(3), TypeError, r"torch.Event"),
    (
        "elapsed_time[cpu]",
        lambda: N.Event(enable_timing=True).elapsed_time(torch.Event("cpu")),
        ValueError,
        r"neuron event",
    ),
    (
        "elapsed_time[no-timing]",
        lambda: (lambda a, b: a.elapsed_time(b))(*_untimed_pair()),
        RuntimeError,
        r"enable_timing=True",
    ),
    (
        "elapsed_time[end-without-timing]",
        lambda: _timed_pair()[0].elapsed_time(_untimed_pair()[1]),
        RuntimeError,
        r"enable_timing=True",
    ),
    (
        "elapsed_time[plain-end-without-timing]",
        lambda: _timed_pair()[0].elapsed_time(N.Stream().record_event(torch.Event("neuron"))),
        RuntimeError,
        r"enable_timing=True",
    ),
    (
        "elapsed_time[not-recorded]",
        lambda: N.Event(enable_timing=True).elapsed_time(N.Event(enable_timing=True)),
        RuntimeError,
        r"must be recorded",
    ),
    (
        "elapsed_time[end-not-recorded]",
        lambda: (lambda s, e: s.elapsed_time(e))(*_timed_pair(record_end=False)),
        RuntimeError,
        r"must be recorded",
    ),
    ("Event[interprocess]", lambda: N.Event(interprocess=True), RuntimeError, "processes"),
    ("Event[enable_timing=None]", lambda: N.Event(enable_timing=None), TypeError, "bool"),
    # Others.
    ("device_of[int]", lambda: _enter(N.device_of(3)), TypeError, r"tensor or storage, got int"),
    (
        "_dump_snapshot[bad-path]",
        lambda: N.memory._dump_snapshot("/nonexistent-dir/snap.pickle"),
        FileNotFoundError,
        "nonexistent-dir",
    ),
]


@pytest.fixture(autouse=True)
def _still_usable():
    """Each case leaves the process as it found it, and the device working."""
    N.synchronize()
    state = [N.get_rng_state(i) for i in range(COUNT)]
    yield
    assert N.current_device() == 0
    assert N.current_stream() == N.default_stream()
    assert all(N.get_per_process_memory_fraction(i) == 1.0 for i in range(COUNT))
    assert all(torch.equal(state[i], N.get_rng_state(i)) for i in range(COUNT))
    assert (torch.arange(4.0, device="neuron") * 2).sum().item() == 12.0
    N.synchronize()


def _check(call, exc, regex):
    with pytest.raises(exc, match=regex) as ei:
        call()
    assert "incompatible function arguments" not in str(ei.value)


@pytest.mark.parametrize(("call", "exc", "regex"), list(_device_cases()))
def test_bad_device_argument(call, exc, regex):
    _check(call, exc, regex)


@pytest.mark.parametrize(
    ("call", "exc", "regex"),
    [pytest.param(call, exc, regex, id=cid) for cid, call, exc, regex in OTHER_CASES],
)
def test_bad_argument(call, exc, regex):
    _check(call, exc, regex)


# --- what stays allowed -----------------------------------------------------------------


def test_minus_one_is_a_no_op_for_set_device_and_device():
    N.set_device(-1)
    with N.device(-1), N.device(None), N.device_of(torch.ones(1)):
        assert N.current_device() == 0
    assert N.current_device() == 0


def test_none_stream_is_a_no_op():
    N.set_stream(None)
    with N.stream(None) as s:
        assert s is None
    assert N.current_stream() == N.default_stream()


@pytest.mark.parametrize("priority", [-(2**64), -5, -1, 0, 1, 5, 2**64])
def test_out_of_range_priority_maps_to_the_nearest(priority):
    # As on CUDA: any negative priority is high, any positive one normal.
    s = N.Stream(priority=priority)
    with N.stream(s):
        x = torch.ones(3, device="neuron") + 1
    s.synchronize()
    assert x.sum().item() == 6.0


def test_seed_forms_that_int_accepts():
    before = N.get_rng_state()
    N.manual_seed(-1)  # wraps, as torch.manual_seed(-1)
    assert N.initial_seed() == 2**64 - 1
    N.manual_seed(7.9)  # int(7.9), as torch.cuda.manual_seed
    assert N.initial_seed() == 7
    N.manual_seed("12")
    assert N.initial_seed() == 12
    N.set_rng_state(before)


def test_index_like_objects_name_devices():
    np = pytest.importorskip("numpy")
    assert N.get_device_name(np.int64(0)) == N.get_device_name(0)
    assert N.get_device_properties(torch.tensor(0)) == N.get_device_properties(0)
    with N.device(N.device(0)):  # a device context names its device, as on CUDA
        assert N.current_device() == 0
    with pytest.raises(IndexError, match=_range_msg(BIG)):
        N.get_device_name(np.int64(BIG))


def test_elapsed_time_mixes_neuron_and_plain_events():
    start = N.Event(enable_timing=True)
    start.record()
    end = N.current_stream().record_event(torch.Event("neuron", enable_timing=True))
    end.synchronize()
    assert type(end) is torch.Event
    assert start.elapsed_time(end) >= 0.0
    assert N.Stream().record_event().device.type == "neuron"
