"""The typed, validated view of a configuration: frozen objects, checked when built."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeVar

from accelflow.config.keys import KEYS, Key

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
        raw: every key that was set, with its value as given (for passing to other processes).
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

    def get(self, key: Key[T]) -> T:
        """The parsed value of ``key``, or its default.

        Raises:
            KeyError: the key has no value and no default (check for ``None`` with
                :meth:`get_optional` instead).
        """
        value = self.get_optional(key)
        if value is None:
            raise KeyError(f"{key.name} is not set and has no default")
        return value

    def get_optional(self, key: Key[T]) -> T | None:
        """The parsed value of ``key``, its default, or ``None``."""
        if key.name in self.values:
            return self.values[key.name]  # type: ignore[no-any-return]
        return KEYS[key.name].default if key.name in KEYS else key.default

    def to_raw_dict(self) -> dict[str, Any]:
        """The keys as given, for re-loading in another process."""
        return dict(self.raw)

    def __repr__(self) -> str:
        shown = {k: ("***" if k.endswith("token") else v) for k, v in self.raw.items()}
        return f"Configuration({shown!r})"
