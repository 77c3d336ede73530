"""NeuronConfig / ProfileMode: TorchNeuron's Neuron-specific profiling options.

A NeuronConfig *is* a ``torch._C._profiler._ExperimentalConfig`` (a subclass),
so ``torch.profiler.profile(experimental_config=NeuronConfig(...))`` takes it
as is. Its settings also travel in the ``custom_profiler_config`` string
(``key:value;key:value``), the form torch hands to custom profiler backends:
that string is the one source of truth, because torch copies the config in
some paths (``trace_only`` with ``with_stack``) and a copy keeps the C++ fields
but not Python attributes. A bare ``_ExperimentalConfig(custom_profiler_config=
"profile_output_dir:DIR;host_memory:true")`` therefore means the same as the
equivalent NeuronConfig.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import re
import warnings
from collections.abc import Iterable

from torch._C._profiler import _ExperimentalConfig

DEFAULT_OUTPUT_DIR = "./output"

_warned: set[str] = set()
_CORE = re.compile(r"\d+")
_CORE_RANGE = re.compile(r"(\d+)\s*-\s*(\d+)")


def warn_once(key: str, message: str, stacklevel: int = 3) -> None:
    """warnings.warn, at most once per process for `key` (not per call site:
    a loop of profiles would otherwise repeat it)."""
    if key in _warned:
        return
    _warned.add(key)
    warnings.warn(message, UserWarning, stacklevel=stacklevel)


class ProfileMode(enum.Enum):
    """What a profile collects (TorchNeuron's names).

    On the simulated NeuronCore: DEVICE is the device timeline (the
    PrivateUse1 activity: one track per core and stream), RUNTIME the
    host-side runtime events (the work queued for the device, CPU activity),
    CPU_UTIL and HOST_MEMORY host counters sampled while the profile runs.
    """

    DEVICE = "device"
    RUNTIME = "runtime"
    CPU_UTIL = "cpu_util"
    HOST_MEMORY = "host_memory"

    def __repr__(self) -> str:
        return f"ProfileMode.{self.name}"


DEFAULT_MODES = (ProfileMode.DEVICE, ProfileMode.RUNTIME)

# The device item categories event type filters can name (the simulated
# runtime's event types; the vendor's NRT event names do not exist here).
EVENT_TYPES = (
    "compute",
    "copy",
    "marker",
    "collective",
    "program",
    "kernel",
    "step",
    "engine",
    "fused",
)


def _valid_modes_text() -> str:
    return ", ".join(f"ProfileMode.{m.name}" for m in ProfileMode)


def parse_mode(mode) -> ProfileMode:
    """A ProfileMode from a member or its name/value ("DEVICE", "device")."""
    if isinstance(mode, ProfileMode):
        return mode
    if isinstance(mode, str):
        key = mode.strip()
        for m in ProfileMode:
            if key.upper() == m.name or key.lower() == m.value:
                return m
    raise ValueError(f"unknown profile mode {mode!r}; valid modes: {_valid_modes_text()}")


def parse_core_spec(items: Iterable, *, strict: bool, what: str) -> list[int]:
    """NeuronCore indices from items like "0", 3, "4-7" (ranges inclusive).

    strict (the custom_profiler_config string): a bad item raises ValueError.
    Otherwise (NeuronConfig, event_filters) a bad item is warned about by name
    and skipped, as the vendor's runtime does.
    """
    cores: set[int] = set()
    for raw in items:
        text = str(raw).strip()
        single = _CORE.fullmatch(text) if not isinstance(raw, bool) else None
        ranged = _CORE_RANGE.fullmatch(text) if not isinstance(raw, bool) else None
        problem = None
        if single:
            cores.add(int(text))
        elif ranged:
            lo, hi = int(ranged[1]), int(ranged[2])
            if lo <= hi:
                cores.update(range(lo, hi + 1))
            else:
                problem = "range start is after its end"
        else:
            problem = "expected an index like 3 or an inclusive range like 4-7"
        if problem is None:
            continue
        if strict:
            raise ValueError(f"{what}: bad NeuronCore index or range {text!r} ({problem})")
        warnings.warn(
            f"{what}: skipping bad NeuronCore index or range {text!r} ({problem})",
            UserWarning,
            stacklevel=4,
        )
    return sorted(cores)


def _split_core_string(spec: str) -> list[str]:
    return [part for part in (p.strip() for p in spec.split(",")) if part] if spec else []


@dataclasses.dataclass(frozen=True)
class Settings:
    """The parsed, validated form of a NeuronConfig / custom_profiler_config."""

    modes: tuple[ProfileMode, ...] = DEFAULT_MODES
    profile_output_dir: str = DEFAULT_OUTPUT_DIR
    max_events_per_nc: int | None = None
    capture_enabled_for_nc: tuple[int, ...] | None = None  # None: every core
    event_types: tuple[str, ...] | None = None  # None: every category
    neff_cache_dir: str | None = None
    precache_node_info: bool | None = None  # None: not given (default True)
    # Where the files go under <dir>/<host>_pid_<pid>/: a per-session
    # <timestamp>/ directory (torch.profiler, as the vendor's PyTorch layout)
    # or directly there (environment-variable capture, as the vendor's).
    session_subdir: bool = True

    def to_string(self) -> str:
        parts = [f"profile_output_dir:{self.profile_output_dir}"]
        parts += [f"{m.value}:{'true' if m in self.modes else 'false'}" for m in ProfileMode]
        if self.max_events_per_nc is not None:
            parts.append(f"max_events_per_nc:{self.max_events_per_nc}")
        if self.capture_enabled_for_nc is not None:
            parts.append(
                "capture_enabled_for_nc:" + ",".join(map(str, self.capture_enabled_for_nc))
            )
        if self.event_types is not None:
            parts.append("event_types:" + ",".join(self.event_types))
        if self.neff_cache_dir is not None:
            parts.append(f"neff_cache_dir:{self.neff_cache_dir}")
        if self.precache_node_info is not None:
            parts.append(f"precache_node_info:{'true' if self.precache_node_info else 'false'}")
        if not self.session_subdir:
            parts.append("session_subdir:false")
        return ";".join(parts)


_STRING_KEYS = (
    "profile_output_dir",
    "max_events_per_nc",
    "capture_enabled_for_nc",
    "event_types",
    "neff_cache_dir",
    "precache_node_info",
    "session_subdir",
    *(m.value for m in ProfileMode),
)


def _parse_bool(key: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "1"):
        return True
    if lowered in ("false", "0"):
        return False
    raise ValueError(f"custom_profiler_config: {key} must be true or false, got {value!r}")


def _check_max_events(value, where: str) -> int:
    try:
        if isinstance(value, bool):
            raise ValueError
        number = int(str(value).strip()) if not isinstance(value, int) else value
    except ValueError:
        raise ValueError(
            f"{where}: max_events_per_nc must be a positive integer, got {value!r}"
        ) from None
    if number <= 0:
        raise ValueError(f"{where}: max_events_per_nc must be a positive integer, got {value!r}")
    return number


def _check_event_types(types: Iterable, where: str) -> tuple[str, ...] | None:
    """Known categories kept; unknown ones warned about by name and dropped.
    None (no filter) when nothing known is left."""
    known, unknown = [], []
    for t in types:
        (known if str(t) in EVENT_TYPES else unknown).append(str(t))
    if unknown:
        warnings.warn(
            f"{where}: ignoring unknown event types {unknown} (the simulated runtime's "
            f"event types are: {', '.join(EVENT_TYPES)})",
            UserWarning,
            stacklevel=4,
        )
    return tuple(dict.fromkeys(known)) or None


def looks_like_neuron_string(raw: str) -> bool:
    """Whether a custom_profiler_config string is meant for us: the
    ``key:value;...`` form, or one naming a key of ours (torch's own backends
    use JSON or a bare name such as "cupti_monitor")."""
    if not raw or not raw.strip():
        return False
    try:
        json.loads(raw)
        return False
    except ValueError:
        pass
    entries = [e.strip() for e in raw.split(";") if e.strip()]
    return ":" in raw or any(e.partition(":")[0].strip() in _STRING_KEYS for e in entries)


def parse_config_string(raw: str) -> Settings:
    """Strictly parse ``key:value;key:value``: a malformed entry, an unknown
    or repeated key, or a bad value raises ValueError naming it."""
    seen: dict[str, str] = {}
    for entry in raw.split(";"):
        if not entry.strip():
            continue  # "a:1;" or "a:1;;b:2": empty entries carry nothing
        key, sep, value = entry.partition(":")
        key = key.strip()
        if not sep or not key:
            raise ValueError(
                f"custom_profiler_config: malformed entry {entry!r} (expected key:value; "
                f"valid keys: {', '.join(_STRING_KEYS)})"
            )
        if key not in _STRING_KEYS:
            raise ValueError(
                f"custom_profiler_config: unknown key {key!r} in entry {entry!r} "
                f"(valid keys: {', '.join(_STRING_KEYS)})"
            )
        if key in seen:
            raise ValueError(f"custom_profiler_config: key {key!r} given twice")
        seen[key] = value

    modes = list(DEFAULT_MODES)
    for m in ProfileMode:
        if m.value in seen:
            on = _parse_bool(m.value, seen[m.value])
            if on and m not in modes:
                modes.append(m)
            elif not on and m in modes:
                modes.remove(m)
    kwargs: dict = {"modes": tuple(sorted(modes, key=list(ProfileMode).index))}
    if "profile_output_dir" in seen:
        path = seen["profile_output_dir"].strip()
        if not path:
            raise ValueError("custom_profiler_config: profile_output_dir is empty")
        kwargs["profile_output_dir"] = path
    if "max_events_per_nc" in seen:
        kwargs["max_events_per_nc"] = _check_max_events(
            seen["max_events_per_nc"], "custom_profiler_config"
        )
    if "capture_enabled_for_nc" in seen:
        items = _split_core_string(seen["capture_enabled_for_nc"])
        if not items:
            raise ValueError("custom_profiler_config: capture_enabled_for_nc is empty")
        kwargs["capture_enabled_for_nc"] = tuple(
            parse_core_spec(
                items, strict=True, what="custom_profiler_config capture_enabled_for_nc"
            )
        )
    if "event_types" in seen:
        types = [t.strip() for t in seen["event_types"].split(",") if t.strip()]
        bad = [t for t in types if t not in EVENT_TYPES]
        if bad or not types:
            raise ValueError(
                f"custom_profiler_config: unknown event types {bad or seen['event_types']!r} "
                f"(valid: {', '.join(EVENT_TYPES)})"
            )
        kwargs["event_types"] = tuple(dict.fromkeys(types))
    if "neff_cache_dir" in seen:
        kwargs["neff_cache_dir"] = seen["neff_cache_dir"].strip()
    if "precache_node_info" in seen:
        kwargs["precache_node_info"] = _parse_bool("precache_node_info", seen["precache_node_info"])
    if "session_subdir" in seen:
        kwargs["session_subdir"] = _parse_bool("session_subdir", seen["session_subdir"])
    return Settings(**kwargs)


def warn_meaningless(settings: Settings) -> None:
    """Options that mean nothing on the simulated NeuronCore say so, once."""
    if settings.neff_cache_dir is not None:
        warn_once(
            "neff_cache_dir",
            "NeuronConfig(neff_cache_dir=...) has no effect on the simulated NeuronCore: it "
            "runs no NEFFs, so there are none to copy into the profile (no .neff/.ntff files "
            "are written)",
        )
    if settings.precache_node_info is not None:
        warn_once(
            "precache_node_info",
            "NeuronConfig(precache_node_info=...) has no effect on the simulated NeuronCore: there "
            "is no per-NEFF metadata to populate, profiled iterations pay no such cost",
        )


class NeuronConfig(_ExperimentalConfig):
    """Neuron options for ``torch.profiler.profile(experimental_config=...)``.

    Args:
        modes: ProfileMode values to collect (default ``[DEVICE, RUNTIME]``).
        max_events_per_nc: keep at most this many device events per NeuronCore
            (the first ones) in the exported files.
        capture_enabled_for_nc: NeuronCores whose events are exported, as
            ``"0,1,2-5"`` (ranges inclusive), default every core.
        profile_output_dir: where the profile is written, under
            ``<dir>/<hostname>_pid_<pid>/<timestamp>/`` (default ``./output``).
        neff_cache_dir, precache_node_info: accepted for compatibility; no
            effect on the simulated NeuronCore (a warning says so, once).
        **experimental_kwargs: other ``_ExperimentalConfig`` options
            (``verbose``, ``profile_all_threads``, ...), passed through.
    """

    def __init__(
        self,
        modes: Iterable | None = None,
        max_events_per_nc: int | None = None,
        capture_enabled_for_nc: str | Iterable | None = None,
        profile_output_dir: str | None = None,
        neff_cache_dir: str | None = None,
        precache_node_info: bool | None = None,
        **experimental_kwargs,
    ):
        if "custom_profiler_config" in experimental_kwargs:
            raise TypeError(
                "NeuronConfig builds custom_profiler_config itself; pass its fields instead"
            )
        where = "NeuronConfig"
        if modes is None:
            parsed_modes = DEFAULT_MODES
        else:
            if isinstance(modes, (str, ProfileMode)):
                modes = [modes]
            parsed_modes = tuple(dict.fromkeys(parse_mode(m) for m in modes))
        cores = None
        if capture_enabled_for_nc is not None:
            items = (
                _split_core_string(capture_enabled_for_nc)
                if isinstance(capture_enabled_for_nc, str)
                else list(capture_enabled_for_nc)
            )
            parsed = parse_core_spec(items, strict=False, what=f"{where} capture_enabled_for_nc")
            if parsed:
                cores = tuple(parsed)
            elif items:
                warnings.warn(
                    f"{where}: no valid NeuronCore in "
                    f"capture_enabled_for_nc={capture_enabled_for_nc!r}; capturing every core",
                    UserWarning,
                    stacklevel=2,
                )
        out_dir = DEFAULT_OUTPUT_DIR if profile_output_dir is None else str(profile_output_dir)
        for name, value in (("profile_output_dir", out_dir), ("neff_cache_dir", neff_cache_dir)):
            if value is not None and ";" in str(value):
                raise ValueError(f"{where}: {name} cannot contain ';': {value!r}")
        settings = Settings(
            modes=parsed_modes,
            profile_output_dir=out_dir,
            max_events_per_nc=None
            if max_events_per_nc is None
            else _check_max_events(max_events_per_nc, where),
            capture_enabled_for_nc=cores,
            neff_cache_dir=None if neff_cache_dir is None else str(neff_cache_dir),
            precache_node_info=None if precache_node_info is None else bool(precache_node_info),
        )
        self._init_from_settings(settings, experimental_kwargs)

    def _init_from_settings(self, settings: Settings, experimental_kwargs: dict | None = None):
        warn_meaningless(settings)
        super().__init__(custom_profiler_config=settings.to_string(), **(experimental_kwargs or {}))
        self._settings = settings
        self._session_dirs: list[str] = []

    @classmethod
    def _from_settings(cls, settings: Settings, **experimental_kwargs) -> NeuronConfig:
        self = cls.__new__(cls)
        self._init_from_settings(settings, experimental_kwargs)
        return self

    # Read-only views: the string torch sees is built once, at construction.
    @property
    def modes(self) -> list[ProfileMode]:
        return list(self._settings.modes)

    @property
    def max_events_per_nc(self) -> int | None:
        return self._settings.max_events_per_nc

    @property
    def capture_enabled_for_nc(self) -> list[int] | None:
        cores = self._settings.capture_enabled_for_nc
        return None if cores is None else list(cores)

    @property
    def profile_output_dir(self) -> str:
        return self._settings.profile_output_dir

    @property
    def neff_cache_dir(self) -> str | None:
        return self._settings.neff_cache_dir

    @property
    def precache_node_info(self) -> bool:
        value = self._settings.precache_node_info
        return True if value is None else value

    def get_session_dir(self) -> str | None:
        """The directory of the last profile exported with this config."""
        return self._session_dirs[-1] if self._session_dirs else None

    def __repr__(self) -> str:
        return f"NeuronConfig({self.custom_profiler_config!r})"


def settings_of(experimental_config) -> Settings | None:
    """The Neuron settings an experimental_config carries, None if it carries
    none (no config, or one for another backend). Raises ValueError for a
    malformed ``key:value`` string."""
    if experimental_config is None:
        return None
    settings = getattr(experimental_config, "_settings", None)
    if isinstance(settings, Settings):
        return settings
    raw = getattr(experimental_config, "custom_profiler_config", "") or ""
    if not looks_like_neuron_string(raw):
        return None
    settings = parse_config_string(raw)
    warn_meaningless(settings)
    return settings
