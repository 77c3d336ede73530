"""Capture without code changes: NEURON_RT_INSPECT_ENABLE=1.

As the vendor's runtime does, the whole process is profiled, from
torch_neuronx's import until exit, and written at exit to
``$NEURON_RT_INSPECT_OUTPUT_DIR/<hostname>_pid_<pid>/`` (default ./output).

- NEURON_RT_INSPECT_SYSTEM_PROFILE (default 1): the system profile, i.e.
  RUNTIME, CPU_UTIL and HOST_MEMORY.
- NEURON_RT_INSPECT_DEVICE_PROFILE (default 0): 1 / model / session add
  DEVICE (the device timeline). model and session capture the same here:
  every item of the session (there are no NEFFs to take "the first execution" of).
- NEURON_RT_INSPECT_SYS_TRACE_MAX_EVENTS_PER_NC: max_events_per_nc.
- NEURON_RT_INSPECT_EVENT_FILTER_NC: capture_enabled_for_nc ("0,2,4", "0-3").
"""

from __future__ import annotations

import atexit
import os
import sys
import warnings

import torch
from torch.profiler import ProfilerActivity, profile

from .. import _C
from . import hooks
from .config import NeuronConfig, ProfileMode, Settings, parse_core_spec

DEFAULT_OUTPUT_DIR = "./output"


def _flag(name: str, default: str, allowed: dict[str, bool]) -> bool:
    raw = os.environ.get(name, default).strip().lower()
    if raw in allowed:
        return allowed[raw]
    warnings.warn(
        f"{name}={os.environ.get(name)!r} is not one of {', '.join(allowed)}; using {default}",
        UserWarning,
        stacklevel=3,
    )
    return allowed[default]


def settings_from_env() -> Settings | None:
    """The capture NEURON_RT_INSPECT_* asks for, None when not enabled."""
    if not _flag(
        "NEURON_RT_INSPECT_ENABLE", "0", {"0": False, "1": True, "false": False, "true": True}
    ):
        return None
    system = _flag("NEURON_RT_INSPECT_SYSTEM_PROFILE", "1", {"0": False, "1": True})
    device = _flag(
        "NEURON_RT_INSPECT_DEVICE_PROFILE",
        "0",
        {"0": False, "1": True, "model": True, "session": True},
    )
    modes = []
    if device:
        modes.append(ProfileMode.DEVICE)
    if system:
        modes += [ProfileMode.RUNTIME, ProfileMode.CPU_UTIL, ProfileMode.HOST_MEMORY]
    if not modes:
        warnings.warn(
            "NEURON_RT_INSPECT_ENABLE=1 with both NEURON_RT_INSPECT_SYSTEM_PROFILE=0 and "
            "NEURON_RT_INSPECT_DEVICE_PROFILE=0: nothing to capture",
            UserWarning,
            stacklevel=3,
        )
        return None
    max_events = None
    raw_max = os.environ.get("NEURON_RT_INSPECT_SYS_TRACE_MAX_EVENTS_PER_NC", "").strip()
    if raw_max:
        if raw_max.isdigit() and int(raw_max) > 0:
            max_events = int(raw_max)
        else:
            warnings.warn(
                f"NEURON_RT_INSPECT_SYS_TRACE_MAX_EVENTS_PER_NC={raw_max!r} is not a positive "
                "integer; no limit",
                UserWarning,
                stacklevel=3,
            )
    cores = None
    raw_cores = os.environ.get("NEURON_RT_INSPECT_EVENT_FILTER_NC", "").strip()
    if raw_cores:
        parsed = parse_core_spec(
            [c for c in raw_cores.split(",") if c.strip()],
            strict=False,
            what="NEURON_RT_INSPECT_EVENT_FILTER_NC",
        )
        cores = tuple(parsed) or None
    return Settings(
        modes=tuple(modes),
        profile_output_dir=os.environ.get("NEURON_RT_INSPECT_OUTPUT_DIR", "").strip()
        or DEFAULT_OUTPUT_DIR,
        max_events_per_nc=max_events,
        capture_enabled_for_nc=cores,
        session_subdir=False,
    )


def maybe_start_inspect_from_env():
    """Starts the whole-process profile when NEURON_RT_INSPECT_ENABLE=1 (once);
    returns it, or None when not enabled."""
    if hooks.env_profile is not None:
        return hooks.env_profile
    settings = settings_from_env()
    if settings is None:
        return None
    prof = profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
        experimental_config=NeuronConfig._from_settings(settings),
    )
    prof._neuron_source = "NEURON_RT_INSPECT_ENABLE"
    hooks.env_profile = prof
    prof.start()
    # Registered after torch_neuronx's own exit handler (which drains the
    # queues): atexit runs in reverse, so this one stops the profile while
    # the runtime is still up.
    atexit.register(_stop_at_exit)
    return prof


def _stop_at_exit() -> None:
    prof = hooks.env_profile
    if prof is None:
        return
    try:
        if _C._is_initialized() and not _C._is_in_bad_fork():
            torch.neuron.synchronize()  # queued work belongs in the profile
    except Exception:
        pass
    try:
        prof.stop()  # writes the profile (torch.profiler's trace-ready hook)
        state = getattr(prof, "_neuron_state", None)
        if state is not None and state.exported_dir:
            print(f"torch_neuronx: profile written to {state.exported_dir}", file=sys.stderr)
    except Exception as e:  # at exit nobody can catch it: say it
        print(f"torch_neuronx: NEURON_RT_INSPECT_ENABLE profile not written: {e}", file=sys.stderr)
    finally:
        hooks.env_profile = None
