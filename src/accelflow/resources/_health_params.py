"""The ``external-resource.<name>.param.health.*`` keys: how a TaskExecutor watches the devices
of one resource (any vendor's: GPUs and FPGAs fail alike).

They are split off a resource's ``param.*`` keys (:func:`split_health_params`) before the rest
goes to the driver factory, so every driver gets them without knowing them. Problems are
named ``param.health.<key>`` (the provider adds the resource prefix) and reported together.

| Key | Default | Meaning |
|---|---|---|
| ``health.enabled`` | ``true`` | Watch the devices at all. |
| ``health.probe-interval`` | ``10 s`` | How often each device is probed. |
| ``health.temperature-limit`` | ``90`` | Degrees Celsius above which a device takes no new work (``none``: no limit). |
| ``health.rejoin-probes`` | ``3`` | Good probes in a row (after a reset, where one is needed) before a quarantined device rejoins. |
| ``health.max-faults`` | ``3`` | Faults within ``fault-window`` after which a device stays out. |
| ``health.fault-window`` | ``1 h`` | The window ``max-faults`` counts in. |
| ``health.memory-release-timeout`` | ``30 s`` | How long a device's share waits for the memory of an ended subtask's processes to come back before the device is quarantined. |
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from accelflow._errors import ConfigError, ConfigProblem
from accelflow.config import _parse

PREFIX = "health."
ENABLED = "health.enabled"
PROBE_INTERVAL = "health.probe-interval"
TEMPERATURE_LIMIT = "health.temperature-limit"
REJOIN_PROBES = "health.rejoin-probes"
MAX_FAULTS = "health.max-faults"
FAULT_WINDOW = "health.fault-window"
MEMORY_RELEASE_TIMEOUT = "health.memory-release-timeout"

HEALTH_PARAMS: Mapping[str, str] = {
    ENABLED: "Watch the devices (Xid events, ECC errors and periodic probes); default true.",
    PROBE_INTERVAL: "How often each device is probed, e.g. '10 s' (default; 100 ms to 1 h).",
    TEMPERATURE_LIMIT: "Degrees Celsius above which a device takes no new work until it cools "
    "down (default 90; 'none' for no limit).",
    REJOIN_PROBES: "Good probes in a row (after a reset, where the fault needs one) before a "
    "quarantined device rejoins (default 3).",
    MAX_FAULTS: "Faults within health.fault-window after which a device stays out until its "
    "TaskExecutor restarts (default 3).",
    FAULT_WINDOW: "The window health.max-faults counts faults in, e.g. '1 h' (default).",
    MEMORY_RELEASE_TIMEOUT: "How long the share of an ended subtask's device waits for its "
    "processes' memory to come back (leftovers are killed) before the device is quarantined, "
    "e.g. '30 s' (default; 100 ms to 1 h).",
}
_MIN_INTERVAL_S, _MAX_INTERVAL_S = 0.1, 3600.0
_MAX_COUNT = 1000
_MAX_CELSIUS = 150.0
_NO_LIMIT = ("none", "off")
T = TypeVar("T")


@dataclass(frozen=True, slots=True, kw_only=True)
class HealthConfig:
    """The checked ``health.*`` parameters of one resource.

    Example:
        >>> HealthConfig().rejoin_probes, HealthConfig().temperature_limit
        (3, 90.0)
    """

    enabled: bool = True
    probe_interval: float = 10.0
    temperature_limit: float | None = 90.0
    rejoin_probes: int = 3
    max_faults: int = 3
    fault_window: float = 3600.0
    memory_release_timeout: float = 30.0


def split_health_params(params: Mapping[str, str]) -> tuple[HealthConfig, dict[str, str]]:
    """The health config from ``params``' ``health.*`` keys, and the other keys (the driver's).

    Example:
        >>> config, rest = split_health_params({"health.max-faults": "5", "coordination": "false"})
        >>> config.max_faults, rest
        (5, {'coordination': 'false'})

    Raises:
        ConfigError: one problem per wrong ``health.*`` key (unknown, with a "did you mean";
            out of range; unparseable), each named ``param.health.<key>``.
    """
    health = {k: v for k, v in params.items() if k.startswith(PREFIX)}
    rest = {k: v for k, v in params.items() if not k.startswith(PREFIX)}
    problems = [_unknown(k) for k in health if k not in HEALTH_PARAMS]
    defaults = HealthConfig()

    def get(key: str, parse: Callable[[str], T], default: T) -> T:
        if key not in health:
            return default
        try:
            return parse(health[key])
        except ValueError as exc:
            problems.append(ConfigProblem(f"param.{key}", str(exc)))
            return default

    config = HealthConfig(
        enabled=get(ENABLED, _parse.boolean, defaults.enabled),
        probe_interval=get(PROBE_INTERVAL, _interval, defaults.probe_interval),
        temperature_limit=get(TEMPERATURE_LIMIT, _celsius, defaults.temperature_limit),
        rejoin_probes=get(REJOIN_PROBES, _count, defaults.rejoin_probes),
        max_faults=get(MAX_FAULTS, _count, defaults.max_faults),
        fault_window=get(FAULT_WINDOW, _parse.seconds, defaults.fault_window),
        memory_release_timeout=get(MEMORY_RELEASE_TIMEOUT, _interval, defaults.memory_release_timeout),
    )
    if not problems and config.fault_window < config.probe_interval:
        problems.append(ConfigProblem(
            f"param.{FAULT_WINDOW}",
            f"{config.fault_window:g} s is shorter than param.{PROBE_INTERVAL} "
            f"({config.probe_interval:g} s); make the window longer",
        ))
    if problems:
        raise ConfigError(problems)
    return config, rest


def _unknown(key: str) -> ConfigProblem:
    close = difflib.get_close_matches(key, list(HEALTH_PARAMS), n=1)
    hint = f"did you mean param.{close[0]}? " if close else ""
    known = ", ".join(f"param.{k}" for k in HEALTH_PARAMS)
    return ConfigProblem(f"param.{key}", f"unknown health parameter; {hint}known: {known}")


def _interval(value: str) -> float:
    seconds = _parse.seconds(value)
    if not _MIN_INTERVAL_S <= seconds <= _MAX_INTERVAL_S:
        raise ValueError(f"expected 100 ms to 1 h, got {value!r}")
    return seconds


def _count(value: str) -> int:
    text = str(value).strip()
    if not text.isdigit() or not 1 <= int(text) <= _MAX_COUNT:
        raise ValueError(f"expected a whole number from 1 to {_MAX_COUNT}, got {value!r}")
    return int(text)


def _celsius(value: str) -> float | None:
    text = str(value).strip().lower().removesuffix("c").removesuffix("°").strip()
    if text in _NO_LIMIT:
        return None
    try:
        celsius = float(text)
    except ValueError:
        raise ValueError(f"expected degrees Celsius such as '90' or 'none', got {value!r}") from None
    if not 0 < celsius <= _MAX_CELSIUS:
        raise ValueError(f"expected more than 0 and at most {_MAX_CELSIUS:g} degrees, got {value!r}")
    return celsius
