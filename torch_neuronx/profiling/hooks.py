"""torch.profiler learns NeuronConfig: hooks around its trace life cycle.

torch.profiler has no callback for a custom profiler backend's configuration,
so four of its methods are wrapped (once, when torch_neuronx.profiling is
imported; the wrappers do nothing for profiles without Neuron settings):

- prepare_trace: the experimental_config's Neuron settings are parsed, so a
  malformed ``custom_profiler_config`` fails before anything runs;
- start_trace / stop_trace: the host CPU / memory sampler runs in between;
- profile._trace_ready (after on_trace_ready): the profile is written to
  profile_output_dir unless on_trace_ready (NeuronProfiler.export_trace) did
  it already.

The wrappers must be in place before a profile is constructed: torch binds
these methods into its action table in profile.__init__.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time

from torch.autograd import ProfilerActivity
from torch.autograd import profiler as _autograd_profiler
from torch.profiler import profiler as _torch_profiler

from ..adapters.monkey_patch import is_patched, mark
from . import config as _config
from .export import export_profile, rank_info
from .host_sampler import HostSampler


@dataclasses.dataclass
class SessionState:
    """One profiling cycle's Neuron side."""

    settings: _config.Settings
    start_ns: int
    end_ns: int | None = None
    sampler: HostSampler | None = None
    rank: int | None = None
    world_size: int | None = None
    device_activity: bool = True
    cpu_activity: bool = True
    exported_dir: str | None = None


# The profile started by NEURON_RT_INSPECT_ENABLE=1, if any (inspect_env sets it).
env_profile = None


def _activities(prof) -> tuple[bool, bool]:
    acts = getattr(prof, "activities", None) or ()
    return ProfilerActivity.PrivateUse1 in acts, ProfilerActivity.CPU in acts


def new_state(prof, settings: _config.Settings) -> SessionState:
    device, cpu = _activities(prof)
    rank, world = rank_info()
    return SessionState(
        settings=settings,
        start_ns=time.time_ns(),
        rank=rank,
        world_size=world,
        device_activity=device,
        cpu_activity=cpu,
    )


def export(prof, settings: _config.Settings, source: str) -> str:
    """Writes `prof` once per cycle; the directory (also when written before)."""
    state = getattr(prof, "_neuron_state", None)
    if state is None:  # a profile started before the hooks: no host samples
        state = new_state(prof, settings)
        prof._neuron_state = state
    if state.exported_dir is None:
        state.exported_dir = export_profile(prof, settings, state=state, source=source)
        cfg = getattr(prof, "experimental_config", None)
        dirs = getattr(cfg, "_session_dirs", None)
        if isinstance(dirs, list):
            dirs.append(state.exported_dir)
    return state.exported_dir


def _conflict_check(prof) -> None:
    if env_profile is not None and prof is not env_profile:
        raise RuntimeError(
            "NEURON_RT_INSPECT_ENABLE=1 is profiling this whole process, so torch.profiler cannot "
            "run another profile; unset NEURON_RT_INSPECT_ENABLE to use torch.profiler with "
            "NeuronConfig (the two capture methods conflict)"
        )


def install() -> None:
    kineto = _torch_profiler._KinetoProfile
    profile = _torch_profiler.profile
    if is_patched(kineto.prepare_trace):
        return
    orig_prepare = kineto.prepare_trace
    orig_start = kineto.start_trace
    orig_stop = kineto.stop_trace
    orig_ready = profile._trace_ready

    def prepare_trace(self) -> None:
        _conflict_check(self)
        # Raises ValueError for a malformed Neuron config string: before
        # the profile starts, not when it is written.
        self._neuron_settings = _config.settings_of(getattr(self, "experimental_config", None))
        orig_prepare(self)

    def start_trace(self) -> None:
        settings = getattr(self, "_neuron_settings", None)
        if settings is None and "_neuron_settings" not in vars(self):
            # start_trace without prepare_trace (not torch's own order).
            settings = _config.settings_of(getattr(self, "experimental_config", None))
            self._neuron_settings = settings
        orig_start(self)
        if settings is None:
            return
        state = new_state(self, settings)
        sampler = HostSampler(settings.modes)
        if sampler.enabled:
            state.sampler = sampler
            sampler.start()
        self._neuron_state = state

    def stop_trace(self) -> None:
        state = getattr(self, "_neuron_state", None)
        try:
            if state is not None and state.end_ns is None:
                if state.sampler is not None:
                    state.sampler.stop()
                state.end_ns = time.time_ns()
        finally:
            orig_stop(self)

    def _trace_ready(self) -> None:
        orig_ready(self)
        state = getattr(self, "_neuron_state", None)
        if state is not None and state.exported_dir is None:
            export(self, state.settings, getattr(self, "_neuron_source", "torch.profiler"))

    autograd_profile = _autograd_profiler.profile
    orig_export = autograd_profile.export_chrome_trace

    def export_chrome_trace(self, path, metadata=None, use_python_export=False):
        # Kineto saves a trace once; after the Neuron export used that, the
        # user's export copies the file it wrote (the complete trace).
        saved = getattr(self, "_neuron_saved_trace", None)
        if saved is not None and not use_python_export:
            if os.path.exists(saved):
                if os.path.abspath(saved) != os.path.abspath(path):
                    shutil.copyfile(saved, path)
                return None
            use_python_export = True  # the file is gone: torch's Python exporter
        return orig_export(self, path, metadata, use_python_export)

    autograd_profile.export_chrome_trace = mark(export_chrome_trace)
    kineto.prepare_trace = mark(prepare_trace)
    kineto.start_trace = mark(start_trace)
    kineto.stop_trace = mark(stop_trace)
    profile._trace_ready = mark(_trace_ready)
