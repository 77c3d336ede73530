"""NeuronProfiler: TorchNeuron's profiler object, in its two documented forms.

- Exporter: ``NeuronProfiler(neuron_config).export_trace`` as torch.profiler's
  on_trace_ready writes the profile into the config's profile_output_dir.
- Context manager: ``with NeuronProfiler(pytorch_activities=[...],
  neuron_output_dir=..., event_filters={...}):`` runs torch.profiler itself
  (with the device timeline always on, as the vendor's runtime capture is)
  and writes the PyTorch trace to ``<neuron_output_dir>/pytorch_trace.json``.
"""

from __future__ import annotations

import os

from torch._C._profiler import _ExperimentalConfig
from torch.profiler import ProfilerActivity, profile

from . import hooks
from .config import (
    DEFAULT_MODES,
    NeuronConfig,
    Settings,
    _check_event_types,
    parse_core_spec,
    settings_of,
)
from .export import ProfileOutputError

_FILTER_KEYS = ("nc", "types")


def _settings_from_filters(output_dir: str, event_filters) -> Settings:
    cores = types = None
    if event_filters:
        unknown = [k for k in event_filters if k not in _FILTER_KEYS]
        if unknown:
            raise ValueError(
                f"NeuronProfiler: unknown event_filters key(s) {unknown}; valid keys: "
                f"{', '.join(_FILTER_KEYS)}"
            )
        if event_filters.get("nc"):
            nc = event_filters["nc"]
            items = nc.split(",") if isinstance(nc, str) else list(nc)
            parsed = parse_core_spec(items, strict=False, what="NeuronProfiler event_filters['nc']")
            cores = tuple(parsed) or None
        if event_filters.get("types"):
            t = event_filters["types"]
            types = _check_event_types(
                [t] if isinstance(t, str) else t, "NeuronProfiler event_filters['types']"
            )
    return Settings(
        modes=DEFAULT_MODES,
        profile_output_dir=str(output_dir),
        capture_enabled_for_nc=cores,
        event_types=types,
    )


class NeuronProfiler:
    """TorchNeuron's profiler (see the module docstring for its two forms).

    Args:
        pytorch_activities: torch.profiler activities whose trace is also
            written to ``pytorch_trace_file`` (or a NeuronConfig: the
            exporter form).
        record_shapes: passed to torch.profiler.
        pytorch_trace_file: file name under neuron_output_dir (default
            ``pytorch_trace.json``) when pytorch_activities are given.
        neuron_output_dir: where the Neuron profile goes (default ``./output``),
            under ``<hostname>_pid_<pid>/<timestamp>/``.
        event_filters: ``{"nc": ["0", "4-7"], "types": ["compute", ...]}``:
            NeuronCores (ranges inclusive; a bad item is warned about and
            skipped) and device event categories kept in the output.
    """

    def __init__(
        self,
        pytorch_activities=None,
        record_shapes: bool = False,
        pytorch_trace_file: str | None = None,
        neuron_output_dir: str = "./output",
        event_filters: dict | None = None,
        *,
        neuron_config: _ExperimentalConfig | None = None,
    ):
        if isinstance(pytorch_activities, _ExperimentalConfig):
            neuron_config, pytorch_activities = pytorch_activities, None
        if neuron_config is not None:
            settings = settings_of(neuron_config)
            if settings is None:
                raise ValueError(
                    "NeuronProfiler: the config carries no Neuron settings (a NeuronConfig, or an "
                    "_ExperimentalConfig with custom_profiler_config='key:value;...')"
                )
            self.config = neuron_config
            self.neuron_output_dir = settings.profile_output_dir
        else:
            settings = _settings_from_filters(neuron_output_dir, event_filters)
            self.config = NeuronConfig._from_settings(settings)
            self.neuron_output_dir = str(neuron_output_dir)
        self._settings = settings
        self.pytorch_activities = list(pytorch_activities or [])
        self.record_shapes = record_shapes
        self.event_filters = event_filters
        if self.pytorch_activities:
            self.pytorch_trace_file = os.path.join(
                self.neuron_output_dir, pytorch_trace_file or "pytorch_trace.json"
            )
        else:
            self.pytorch_trace_file = None
        self.profiler: profile | None = None  # torch.profiler's profile, once started
        self.session_dir: str | None = None
        self._active = False

    # --- exporter form ---------------------------------------------------------------------------

    def export_trace(self, prof, path: str | None = None) -> str:
        """on_trace_ready handler: writes `prof` into the config's output
        directory (once per profiling cycle) and returns that directory.
        `path`: the Chrome trace is also written there."""
        self.session_dir = hooks.export(
            prof, self._settings, getattr(prof, "_neuron_source", "torch.profiler")
        )
        if path is not None:
            prof.export_chrome_trace(path)
        return self.session_dir

    # --- context-manager form --------------------------------------------------------------------

    def start(self) -> None:
        if self._active:
            raise RuntimeError(
                "NeuronProfiler is already active (start() called twice without stop())"
            )
        activities = list(self.pytorch_activities)
        for needed in (ProfilerActivity.CPU, ProfilerActivity.PrivateUse1):
            if needed not in activities:
                activities.append(needed)
        prof = profile(
            activities=activities,
            record_shapes=self.record_shapes,
            experimental_config=self.config,
        )
        prof._neuron_source = "NeuronProfiler"
        prof.start()
        self.profiler = prof
        self.session_dir = None
        self._active = True

    def stop(self) -> None:
        if not self._active:
            raise RuntimeError("NeuronProfiler is not active (stop() without a matching start())")
        self._active = False
        prof = self.profiler
        prof.stop()  # writes the Neuron profile (torch.profiler's trace-ready hook)
        state = getattr(prof, "_neuron_state", None)
        self.session_dir = state.exported_dir if state is not None else None
        if self.pytorch_trace_file is not None:
            try:
                os.makedirs(os.path.dirname(self.pytorch_trace_file) or ".", exist_ok=True)
                prof.export_chrome_trace(self.pytorch_trace_file)
            except OSError as e:
                raise ProfileOutputError(
                    e.errno,
                    f"cannot write the PyTorch trace to {self.pytorch_trace_file!r} "
                    f"({e.strerror or e}); the profile is still in memory: key_averages() and "
                    "export_chrome_trace(<another path>) work",
                    self.pytorch_trace_file,
                ) from e

    def __enter__(self) -> NeuronProfiler:
        self.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.stop()
        return False

    def is_active(self) -> bool:
        return self._active

    def has_pytorch_profiling(self) -> bool:
        return bool(self.pytorch_activities)

    def get_nrt_output_directory(self) -> str:
        return self.neuron_output_dir

    def get_pytorch_trace(self) -> str | None:
        if self.profiler is not None and not self._active:
            return str(self.profiler)
        return None

    def export_pytorch_trace(self, filename: str) -> None:
        if self.profiler is None:
            raise ValueError("NeuronProfiler: not started, there is no trace to export")
        if self._active:
            raise ValueError("NeuronProfiler: cannot export the trace while profiling is active")
        self.profiler.export_chrome_trace(filename)

    # The in-memory profile, as torch.profiler's (also after a failed write).
    def key_averages(self, *args, **kwargs):
        if self.profiler is None:
            raise ValueError("NeuronProfiler: not started")
        return self.profiler.key_averages(*args, **kwargs)

    def events(self):
        if self.profiler is None:
            raise ValueError("NeuronProfiler: not started")
        return self.profiler.events()

    def export_chrome_trace(self, path: str):
        if self.profiler is None:
            raise ValueError("NeuronProfiler: not started")
        return self.profiler.export_chrome_trace(path)
