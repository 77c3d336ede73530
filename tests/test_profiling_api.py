"""TorchNeuron's profiling names (torch_neuronx.profiling) used as the vendor's docs
show them: NeuronConfig / ProfileMode with torch.profiler, NeuronProfiler as exporter
and as context manager, the custom_profiler_config string, NEURON_RT_INSPECT_* capture.
Each test reads the files written back (trace events, index.json, counters)."""

import gc
import json
import os
import re
import socket
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import pandas as pd
import pytest
import torch
from torch._C._profiler import _ExperimentalConfig
from torch.profiler import ProfilerActivity, profile

import torch_neuronx
from torch_neuronx.profiling import (
    NeuronConfig,
    NeuronProfiler,
    ProfileMode,
    ProfileOutputError,
)
from torch_neuronx.profiling import config as config_module

ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
_INPUTS: dict = {}
HOST_DIR = f"{socket.gethostname()}_pid_{os.getpid()}"


def _work(device="neuron", n=3):
    """n matmul+relu on device, then a copy to the host: items mm, relu, ..., copy."""
    x = _INPUTS.get(device)
    if x is None:  # made once, outside the profiles (no normal_ item in them)
        x = _INPUTS[device] = torch.randn(8, 8, device=device)
        torch.neuron.synchronize()
    for _ in range(n):
        x = (x @ x).relu()
    x.cpu()
    torch.neuron.synchronize()


def _session(out: Path) -> Path:
    """The one session directory under out/<host>_pid_<pid>/."""
    sessions = [p for p in (out / HOST_DIR).iterdir() if p.is_dir()]
    assert len(sessions) == 1, sessions
    return sessions[0]


def _trace(directory: Path, name="trace.json") -> list[dict]:
    return json.loads((directory / name).read_text())["traceEvents"]


def _device_slices(events, pid=None):
    return [
        e
        for e in events
        if e.get("ph") == "X"
        and e.get("cat") in ("kernel", "gpu_memcpy")
        and (pid is None or e["pid"] == pid)
    ]


def _index(directory: Path) -> dict:
    return json.loads((directory / "index.json").read_text())


def test_names_and_modes():
    assert [m.name for m in ProfileMode] == ["DEVICE", "RUNTIME", "CPU_UTIL", "HOST_MEMORY"]
    cfg = NeuronConfig()
    assert isinstance(cfg, _ExperimentalConfig)
    assert cfg.modes == [ProfileMode.DEVICE, ProfileMode.RUNTIME]  # the documented default
    assert cfg.profile_output_dir == "./output"
    from torch_neuronx.profiling import export_parquet  # the tables helper's, lazily

    assert callable(export_parquet)


def test_unknown_mode_names_it_and_lists_valid_ones():
    with pytest.raises(ValueError, match=r"'GPU'.*ProfileMode\.DEVICE.*ProfileMode\.HOST_MEMORY"):
        NeuronConfig(modes=[ProfileMode.DEVICE, "GPU"])


def test_basic_example_writes_trace_tables_and_index(tmp_path):
    # The vendor's "Basic example", verbatim apart from the model.
    neuron_config = NeuronConfig(
        modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME],
        profile_output_dir=str(tmp_path / "profile_output"),
    )
    exporter = NeuronProfiler(neuron_config)
    _work()  # warm-up
    with profile(
        activities=ACTIVITIES,
        experimental_config=neuron_config,
        on_trace_ready=exporter.export_trace,
    ) as prof:
        _work()
    session = _session(tmp_path / "profile_output")
    assert neuron_config.get_session_dir() == str(session) == exporter.session_dir
    names = {p.name for p in session.iterdir()}
    assert {"trace.json", "index.json", "device_items.parquet", "ops.parquet"} <= names
    assert not [n for n in names if n.endswith((".ntff", ".neff", ".pb"))]

    events = _trace(session)
    dev = _device_slices(events, pid=0)  # pid = device index
    assert [e["name"] for e in dev if e["cat"] == "kernel"][:2] == ["aten::mm", "aten::relu"]
    assert any(e["cat"] == "gpu_memcpy" for e in dev)
    assert any(e.get("cat") == "privateuse1_runtime" for e in events)  # RUNTIME

    index = _index(session)
    assert index["modes"] == ["DEVICE", "RUNTIME"]
    assert index["rank"] is None and index["world_size"] is None
    assert index["pid"] == os.getpid() and index["source"] == "torch.profiler"
    assert index["target"] == dict(torch_neuronx._C._profiler_target())
    assert {f["path"] for f in index["files"]} == names - {"index.json"}
    assert index["host_counters"] is None
    items = pd.read_parquet(session / "device_items.parquet")
    assert set(items["device"]) == {0} and len(items) == len(dev)
    assert prof.key_averages()  # the in-memory profile is untouched


def test_custom_profiler_config_string_writes_to_its_dir(tmp_path):
    out = tmp_path / "out"
    cfg = _ExperimentalConfig(
        custom_profiler_config=(
            f"profile_output_dir:{out};host_memory:true;max_events_per_nc:2;"
            "capture_enabled_for_nc:0,1"
        )
    )
    with pytest.warns(UserWarning, match="max_events_per_nc=2"):
        with profile(activities=ACTIVITIES, experimental_config=cfg):
            _work(n=4)
            time.sleep(0.05)  # a few 10 ms host samples
    session = _session(out)
    index = _index(session)
    assert index["modes"] == ["DEVICE", "RUNTIME", "HOST_MEMORY"]
    assert index["filters"]["capture_enabled_for_nc"] == [0, 1]
    assert index["filters"]["max_events_per_nc"] == 2
    assert index["filters"]["truncated_events_per_nc"]["0"] > 0
    events = _trace(session)
    # At most 2 device slices per track (the measured one and the estimated one).
    per_track = {}
    for e in events:
        if e.get("ph") == "X" and e.get("pid") == 0:
            per_track[e["tid"]] = per_track.get(e["tid"], 0) + 1
    assert per_track and max(per_track.values()) == 2
    kept = [e for e in _device_slices(events) if e["tid"] == 0]
    assert [e["name"] for e in kept] == ["aten::mm", "aten::relu"]  # the first ones
    # Flow arrows only to device slices still there.
    kept_ts = {e["ts"] for e in kept}
    assert {e["ts"] for e in events if e.get("ph") == "f"} <= kept_ts
    assert len(pd.read_parquet(session / "device_items.parquet")) == 2

    counters = json.loads((session / "host_counters.json").read_text())["traceEvents"]
    assert counters and {e["ph"] for e in counters} == {"C"}
    assert {e["name"] for e in counters} == {"Host memory (bytes)"}
    assert all(e["args"]["used_bytes"] > 0 and e["pid"] == os.getpid() for e in counters)
    table = pd.read_parquet(session / "host_counters.parquet")
    assert set(table["kind"]) == {"host_memory"}
    assert table["timestamp_ns"].is_monotonic_increasing
    assert not [t for t in threading.enumerate() if t.name == "neuron-host-sampler"]


@pytest.mark.parametrize(
    "text, bad",
    [
        ("profile_output_dir", "'profile_output_dir'"),
        ("profile_output_dir:/tmp/x;bogus:1", "'bogus'"),
        ("max_events_per_nc:abc", "max_events_per_nc"),
        ("capture_enabled_for_nc:3-1", "'3-1'"),
        ("host_memory:maybe", "host_memory"),
        ("device:true;device:false", "'device' given twice"),
    ],
)
def test_custom_profiler_config_string_is_parsed_strictly(text, bad):
    cfg = _ExperimentalConfig(custom_profiler_config=text)
    with pytest.raises(ValueError, match=bad):
        with profile(activities=ACTIVITIES, experimental_config=cfg):
            pass


def test_capture_enabled_for_nc_leaves_other_cores_out(tmp_path):
    assert torch.neuron.device_count() >= 2
    cfg = NeuronConfig(profile_output_dir=str(tmp_path), capture_enabled_for_nc="1")
    with profile(activities=ACTIVITIES, experimental_config=cfg) as prof:
        _work("neuron:0", n=2)
        _work("neuron:1", n=2)
    session = Path(cfg.get_session_dir())
    events = _trace(session)
    assert _device_slices(events, pid=1) and not [e for e in events if e.get("pid") == 0]
    # The host side of core 0's items goes too; core 1's stays, arrows included.
    kept_corr = {e["args"]["correlation"] for e in _device_slices(events, pid=1)}
    queue = [e for e in events if e.get("cat") == "privateuse1_runtime"]
    assert {e["args"]["correlation"] for e in queue} == kept_corr
    assert {e["id"] for e in events if e.get("ph") == "s"} == kept_corr
    assert set(pd.read_parquet(session / "device_items.parquet")["device"]) == {1}
    # The profile itself still has both cores.
    cpu = torch.autograd.DeviceType.CPU
    assert {e.device_index for e in prof.events() if e.device_type != cpu} == {0, 1}
    # torch's own export still works (Kineto saves a trace once: the complete
    # one was kept aside), and is the whole profile.
    prof.export_chrome_trace(str(tmp_path / "full.json"))
    assert _device_slices(_trace(tmp_path, "full.json"), pid=0)
    kept_aside = prof.profiler._neuron_saved_trace
    assert os.path.exists(kept_aside) and not kept_aside.startswith(str(session))
    del prof
    gc.collect()
    assert not os.path.exists(kept_aside)


def test_cpu_util_counters_and_modes_without_device(tmp_path):
    cfg = NeuronConfig(
        modes=[ProfileMode.RUNTIME, ProfileMode.CPU_UTIL], profile_output_dir=str(tmp_path)
    )
    with profile(activities=ACTIVITIES, experimental_config=cfg):
        _work()
        end = time.monotonic() + 0.06
        while time.monotonic() < end:  # busy: utilisation to see
            pass
    session = Path(cfg.get_session_dir())
    events = _trace(session)
    assert not _device_slices(events)  # no DEVICE: no device timeline
    assert any(e.get("cat") == "privateuse1_runtime" for e in events)
    counters = json.loads((session / "host_counters.json").read_text())["traceEvents"]
    assert len(counters) >= 3 and {e["name"] for e in counters} == {"Host CPU utilization (%)"}
    assert {"cpu0", "process"} <= set(counters[-1]["args"])
    assert max(e["args"]["process"] for e in counters) > 0
    index = _index(session)
    assert index["modes"] == ["RUNTIME", "CPU_UTIL"]
    assert index["host_counters"]["interval_ms"] == 10.0
    assert index["host_counters"]["samples"] == len(counters)


def test_rank_names_the_trace(tmp_path):
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        cfg = NeuronConfig(profile_output_dir=str(tmp_path))
        with profile(activities=ACTIVITIES, experimental_config=cfg):
            _work(n=1)
    finally:
        dist.destroy_process_group()
    session = Path(cfg.get_session_dir())
    assert _device_slices(_trace(session, "trace_rank0.json"))
    index = _index(session)
    assert (index["rank"], index["world_size"]) == (0, 1)


def test_unwritable_output_dir_names_it_and_keeps_the_profile(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    cfg = NeuronConfig(profile_output_dir=str(blocker / "out"))
    with pytest.raises(ProfileOutputError, match=re.escape(str(blocker / "out"))) as info:
        with profile(activities=ACTIVITIES, experimental_config=cfg) as prof:
            _work(n=1)
    assert isinstance(info.value, OSError)
    assert any(e.key == "aten::mm" for e in prof.key_averages())
    prof.export_chrome_trace(str(tmp_path / "elsewhere.json"))
    assert _device_slices(_trace(tmp_path, "elsewhere.json"))


def test_neuron_profiler_context_manager(tmp_path):
    out = tmp_path / "my_profiles"
    with pytest.warns(UserWarning) as caught:
        profiler = NeuronProfiler(
            pytorch_activities=[ProfilerActivity.CPU],
            record_shapes=True,
            neuron_output_dir=str(out),
            event_filters={
                "nc": ["0", "4-7", "7-4", "x"],
                "types": ["compute", "nrt_model_switch"],
            },
        )
    messages = " ".join(str(w.message) for w in caught)
    assert "'7-4'" in messages and "'x'" in messages and "nrt_model_switch" in messages
    assert not profiler.is_active() and profiler.has_pytorch_profiling()
    with profiler as prof:
        assert prof.is_active()
        with pytest.raises(RuntimeError, match="already active"):
            prof.start()
        _work(n=2)
    assert not profiler.is_active()
    with pytest.raises(RuntimeError, match="not active"):
        profiler.stop()

    pytorch_trace = _trace(out, "pytorch_trace.json")
    assert any(e.get("cat") == "cpu_op" and e["name"] == "aten::mm" for e in pytorch_trace)
    session = _session(out)
    assert str(session) == profiler.session_dir
    index = _index(session)
    assert index["source"] == "NeuronProfiler"
    assert index["filters"]["capture_enabled_for_nc"] == [0, 4, 5, 6, 7]
    assert index["filters"]["event_types"] == ["compute"]
    dev = _device_slices(_trace(session), pid=0)
    assert dev and {e["args"]["category"] for e in dev} == {"compute"}  # the copy left out
    assert set(pd.read_parquet(session / "device_items.parquet")["category"]) == {"compute"}
    assert any(e.key == "aten::mm" for e in profiler.key_averages())


def test_neuron_profiler_rejects_unknown_filter_keys():
    with pytest.raises(ValueError, match="'cores'"):
        NeuronProfiler(event_filters={"cores": ["0"]})


def test_options_without_meaning_warn_once():
    for key in ("neff_cache_dir", "precache_node_info"):
        config_module._warned.discard(key)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        NeuronConfig(neff_cache_dir="/tmp/neff", precache_node_info=True)
    messages = sorted(str(w.message) for w in caught)
    assert len(messages) == 2
    assert messages[0].startswith("NeuronConfig(neff_cache_dir=...) has no effect")
    assert messages[1].startswith("NeuronConfig(precache_node_info=...) has no effect")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        NeuronConfig(neff_cache_dir="/tmp/neff", precache_node_info=False)


def test_env_settings(monkeypatch):
    from torch_neuronx.profiling.inspect_env import settings_from_env

    for name in list(os.environ):
        if name.startswith("NEURON_RT_INSPECT_"):
            monkeypatch.delenv(name)
    assert settings_from_env() is None
    monkeypatch.setenv("NEURON_RT_INSPECT_ENABLE", "1")
    s = settings_from_env()  # the vendor's defaults: system profile only, ./output
    assert s.modes == (ProfileMode.RUNTIME, ProfileMode.CPU_UTIL, ProfileMode.HOST_MEMORY)
    assert s.profile_output_dir == "./output" and not s.session_subdir
    monkeypatch.setenv("NEURON_RT_INSPECT_DEVICE_PROFILE", "session")
    monkeypatch.setenv("NEURON_RT_INSPECT_SYSTEM_PROFILE", "0")
    monkeypatch.setenv("NEURON_RT_INSPECT_EVENT_FILTER_NC", "0-1,3")
    monkeypatch.setenv("NEURON_RT_INSPECT_SYS_TRACE_MAX_EVENTS_PER_NC", "100")
    s = settings_from_env()
    assert s.modes == (ProfileMode.DEVICE,)
    assert s.capture_enabled_for_nc == (0, 1, 3) and s.max_events_per_nc == 100
    monkeypatch.setenv("NEURON_RT_INSPECT_DEVICE_PROFILE", "sometimes")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert settings_from_env() is None  # system 0, device invalid -> off: nothing
    assert "NEURON_RT_INSPECT_DEVICE_PROFILE='sometimes'" in str(caught[0].message)
    assert "nothing to capture" in str(caught[1].message)


_ENV_SCRIPT = textwrap.dedent(
    """
    import os, sys, torch
    {start}
    x = torch.randn(4, 4, device="neuron")
    y = (x @ x).cpu()
    print(os.getpid())
    """
)


def _run_env_capture(tmp_path, start: str) -> Path:
    env = dict(os.environ)
    env.update(
        NEURON_RT_INSPECT_ENABLE="1",
        NEURON_RT_INSPECT_DEVICE_PROFILE="1",
        NEURON_RT_INSPECT_OUTPUT_DIR=str(tmp_path / "output"),
    )
    done = subprocess.run(
        [sys.executable, "-c", _ENV_SCRIPT.format(start=start)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    pid = int(done.stdout.split()[-1])
    directory = tmp_path / "output" / f"{socket.gethostname()}_pid_{pid}"
    assert f"profile written to {directory}" in done.stderr
    return directory


def _check_env_output(directory: Path) -> None:
    events = _trace(directory)  # the vendor's env layout: no session subdirectory
    kernels = [e["name"] for e in _device_slices(events, pid=0) if e["cat"] == "kernel"]
    assert kernels == ["aten::normal_", "aten::mm"]  # from the import on
    index = _index(directory)
    assert index["source"] == "NEURON_RT_INSPECT_ENABLE"
    assert index["modes"] == ["DEVICE", "RUNTIME", "CPU_UTIL", "HOST_MEMORY"]
    counters = json.loads((directory / "host_counters.json").read_text())["traceEvents"]
    assert {e["name"] for e in counters} == {"Host CPU utilization (%)", "Host memory (bytes)"}


def test_env_capture(tmp_path):
    # Without code changes once torch_neuronx's import calls the hook; until
    # then the script calls it (everything else is the same).
    hooked = "_maybe_start_inspect_from_env" in Path(torch_neuronx.__file__).read_text()
    start = (
        ""
        if hooked
        else ("import torch_neuronx.profiling as p; assert p._maybe_start_inspect_from_env()")
    )
    _check_env_output(_run_env_capture(tmp_path, start))


def test_host_sampler_reads_proc_without_psutil(monkeypatch):
    from torch_neuronx.profiling import host_sampler

    monkeypatch.setattr(host_sampler, "_psutil", lambda: None)
    sampler = host_sampler.HostSampler(
        [ProfileMode.CPU_UTIL, ProfileMode.HOST_MEMORY], interval_s=0.005
    )
    sampler.start()
    time.sleep(0.03)
    sampler.stop()
    assert sampler.source == "/proc"
    rows = {(kind, name): value for _, kind, name, value in sampler.samples}
    assert 0 <= rows[("cpu_util", "cpu0")] <= 100 and ("cpu_util", "process") in rows
    assert 0 < rows[("host_memory", "process_rss_bytes")] < rows[("host_memory", "total_bytes")]
    assert len({t for t, *_ in sampler.samples}) >= 3


def test_without_pyarrow_counters_are_json_and_the_trace_is_written(tmp_path, monkeypatch):
    for name in ("pyarrow", "pyarrow.parquet"):
        monkeypatch.setitem(sys.modules, name, None)  # import raises ImportError
    cfg = NeuronConfig(
        modes=[ProfileMode.DEVICE, ProfileMode.HOST_MEMORY], profile_output_dir=str(tmp_path)
    )
    with pytest.warns(UserWarning, match="tables were not written"):
        with profile(activities=ACTIVITIES, experimental_config=cfg):
            _work(n=1)
    session = Path(cfg.get_session_dir())
    assert _device_slices(_trace(session))
    table = json.loads((session / "host_counters_table.json").read_text())
    assert table["columns"] == ["timestamp_ns", "kind", "name", "value"] and table["rows"]
    assert json.loads((session / "host_counters.json").read_text())["traceEvents"]
    index = _index(session)
    assert not [f for f in index["files"] if f["path"].endswith(".parquet")]
    assert any(note.startswith("no tables") for note in index["notes"])
