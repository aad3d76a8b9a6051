"""The typed, validated view of a configuration: frozen objects, checked when built."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeVar, overload

from accelflow._errors import ConfigError
from accelflow.config.keys import (
    ALIASES,
    KEYS,
    MAX_SLOTS_PER_TASKEXECUTOR,
    NUMBER_OF_TASK_SLOTS,
    PARAM_PREFIX,
    RESOURCE_PREFIX,
    RESOURCE_SUFFIXES,
    Key,
)

T = TypeVar("T")


def _frozen(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True, slots=True, kw_only=True)
class ExternalResourceSpec:
    """Everything the config says about one external resource, e.g. ``gpu``.

    Attributes:
        name: the resource name as listed in ``external-resources``.
        amount: devices per TaskExecutor.
        driver_factory: import path or entry point name, or ``None`` (no discovery).
        params: the ``param.*`` keys with the prefix stripped; read-only strings.
        on_discovery_failure: ``"fail"`` or ``"degrade"``.
        kubernetes_config_key: the extended resource name (``vendor`` already applied).
        yarn_config_key: the YARN resource type.
        kubernetes_node_selector: node labels (the ``gpu-product`` shorthand already applied).
        kubernetes_tolerations: V1Toleration-shaped dicts.
        ray_resource_name: the Ray custom resource standing for this one.
        warm_framework: what a warm process of one of its devices initialises (``warm.framework``).
        warm_preload: the modules a warm process imports ahead (``warm.preload``).
    """

    name: str
    amount: int
    driver_factory: str | None = None
    params: Mapping[str, str] = field(default_factory=dict)
    on_discovery_failure: str = "fail"
    kubernetes_config_key: str | None = None
    yarn_config_key: str | None = None
    kubernetes_node_selector: Mapping[str, str] = field(default_factory=dict)
    kubernetes_tolerations: tuple[Mapping[str, Any], ...] = ()
    ray_resource_name: str | None = None
    warm_framework: str = "auto"
    warm_preload: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.amount < 1:
            raise ValueError(f"amount of {self.name!r} must be positive, got {self.amount}")
        if self.on_discovery_failure not in ("fail", "degrade"):
            raise ValueError(f"on_discovery_failure must be fail or degrade, got {self.on_discovery_failure!r}")
        object.__setattr__(self, "params", _frozen(self.params))
        object.__setattr__(self, "kubernetes_node_selector", _frozen(self.kubernetes_node_selector))

    def key(self, suffix: str) -> str:
        """The full config key of ``suffix``, e.g. ``external-resource.gpu.amount``."""
        return f"external-resource.{self.name}.{suffix}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Configuration:
    """A validated configuration. Build it with :func:`accelflow.config.load_config`.

    Attributes:
        values: every key that was set, with its parsed value.
        raw: every key that was set, with its value as given (for passing to other processes);
            a key given under an alias (``keys.ALIASES``) is stored under its canonical name.
        sources: where each key came from (a file name, ``-D`` or ``dict``).
        external_resources: the listed resources, in the listed order.
        warnings: things that are allowed but probably wrong (e.g. keys of unlisted resources).
    """

    values: Mapping[str, Any] = field(default_factory=dict)
    raw: Mapping[str, Any] = field(default_factory=dict)
    sources: Mapping[str, str] = field(default_factory=dict)
    external_resources: Mapping[str, ExternalResourceSpec] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("values", "raw", "sources", "external_resources"):
            object.__setattr__(self, name, _frozen(getattr(self, name)))

    @overload
    def get(self, key: Key[T]) -> T: ...
    @overload
    def get(self, key: str) -> Any: ...

    def get(self, key: Key[T] | str) -> T | Any:
        """The parsed value of ``key`` (a :class:`Key` or its name), or its default.

        >>> Configuration().get("taskmanager.numberOfTaskSlots")
        1

        Raises:
            KeyError: the key has no value and no default (check for ``None`` with
                :meth:`get_optional` instead).
            ConfigError: ``key`` is a name no key has.
        """
        value = self.get_optional(key)
        if value is None:
            raise KeyError(f"{_name(key)} is not set and has no default")
        return value

    @overload
    def get_optional(self, key: Key[T]) -> T | None: ...
    @overload
    def get_optional(self, key: str) -> Any | None: ...

    def get_optional(self, key: Key[T] | str) -> T | Any | None:
        """The parsed value of ``key`` (a :class:`Key` or its name), its default, or ``None``.

        Raises:
            ConfigError: ``key`` is a name no key has.
        """
        name = _name(key)
        if name in self.values:
            return self.values[name]
        if isinstance(key, str):
            if name in self.raw:  # external-resource.<name>.param.<p>: free-form text
                return self.raw[name]
            return _known(name).default
        return KEYS[name].default if name in KEYS else key.default

    def is_set(self, key: Key[Any] | str) -> bool:
        """Whether ``key`` was given (in a file, ``-D``, a dict or the session cluster), as
        opposed to falling back to its default.

        >>> Configuration().is_set("taskmanager.numberOfTaskSlots")
        False

        Raises:
            ConfigError: ``key`` is a name no key has.
        """
        name = _name(key)
        if isinstance(key, str) and name not in self.raw:
            _known(name)
        return name in self.raw

    def to_raw_dict(self) -> dict[str, Any]:
        """The keys as given, for re-loading in another process."""
        return dict(self.raw)

    def __repr__(self) -> str:
        shown = {k: ("***" if k.endswith("token") else v) for k, v in self.raw.items()}
        return f"Configuration({shown!r})"


def _name(key: Key[Any] | str) -> str:
    if isinstance(key, Key):
        return key.name
    if isinstance(key, str):
        return ALIASES.get(key, key)  # an alias names its key
    raise TypeError(f"expected a config key or its name, got {key!r} ({type(key).__name__})")


def _known(name: str) -> Key[Any]:
    """The key called ``name`` (a canonical name, see :func:`_name`): a key of :data:`KEYS` or
    ``external-resource.<name>.<suffix>``.

    Raises:
        ConfigError: no key has that name; the closest names are suggested.
    """
    if name in KEYS:
        return KEYS[name]
    if name.startswith(RESOURCE_PREFIX):
        resource, _, suffix = name[len(RESOURCE_PREFIX):].partition(".")
        if resource and suffix in RESOURCE_SUFFIXES:
            return RESOURCE_SUFFIXES[suffix]
        if resource and suffix.startswith(PARAM_PREFIX) and len(suffix) > len(PARAM_PREFIX):
            return Key(name, str, None, "a driver parameter")
        known = [f"{RESOURCE_PREFIX}{resource}.{c}" for c in _close(suffix, RESOURCE_SUFFIXES)]
    else:
        known = _close(name, {**KEYS, **ALIASES})
    hint = f"; did you mean {' or '.join(repr(c) for c in known)}?" if known else (
        "; see docs/configuration.md for every key"
    )
    raise ConfigError(f"unknown key{hint}", key=name)


def local_slots(config: Configuration, max_parallelism: int, number_of_taskexecutors: int) -> int:
    """Slots per TaskExecutor of a local cluster about to run a job.

    ``taskmanager.numberOfTaskSlots`` when it is set; otherwise, as Flink's local environment
    does, enough slots for the job's largest parallelism spread over the TaskExecutors (rounded
    up), at most :data:`~accelflow.config.keys.MAX_SLOTS_PER_TASKEXECUTOR`.

    >>> local_slots(Configuration(), max_parallelism=4, number_of_taskexecutors=1)
    4
    >>> local_slots(Configuration(), max_parallelism=5, number_of_taskexecutors=2)
    3

    Raises:
        ValueError: ``max_parallelism`` or ``number_of_taskexecutors`` is not a positive integer.
    """
    for name, number in (("max_parallelism", max_parallelism), ("number_of_taskexecutors", number_of_taskexecutors)):
        if isinstance(number, bool) or not isinstance(number, int) or number < 1:
            raise ValueError(f"{name} must be a positive integer, got {number!r}")
    if config.is_set(NUMBER_OF_TASK_SLOTS):
        return config.get(NUMBER_OF_TASK_SLOTS)
    needed = -(-max_parallelism // number_of_taskexecutors)
    return min(needed, MAX_SLOTS_PER_TASKEXECUTOR)


def _close(name: str, known: Mapping[str, Any]) -> list[str]:
    """The known names closest to ``name``: the one that differs only in case, or up to three
    close spellings."""
    by_case = {n.lower(): n for n in known}
    if name.lower() in by_case:
        return [by_case[name.lower()]]
    return difflib.get_close_matches(name, list(known), n=3, cutoff=0.75)
