"""What the container that hosts the TaskExecutors asks a cluster manager for.

Shared by every renderer (the Kubernetes Job, the KubeRay RayCluster, YARN). For each
external resource the config gives an amount per TaskExecutor; the rendered container runs
``accelflow run`` with the embedded local cluster, which hosts ``local.number-taskmanager``
TaskExecutors, so every quantity here is ``amount * local.number-taskmanager``.

Entries come from two places:

* the config: ``external-resource.<name>.kubernetes.config-key`` (or the ``vendor``
  shorthand), ``.kubernetes.node-selector`` (or ``.kubernetes.gpu-product``),
  ``.kubernetes.tolerations`` and ``.yarn.config-key``;
* driver factories that implement :class:`accelflow.resources.KubernetesResourceDecorator`
  or :class:`accelflow.resources.YarnResourceDecorator`. They are asked for one
  TaskExecutor's needs (``amount`` devices), like the config.

Invariant: one key has one value. Two sources that give the same key the same value are
merged; different values are an error naming both sources (never "last one wins").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Generic, TypeVar

from accelflow._errors import ConfigError, DeploymentError
from accelflow.config.keys import NUMBER_TASKMANAGER
from accelflow.config import Configuration, ExternalResourceSpec
from accelflow._names import (
    kubernetes_extended_resource_problem,
    label_key_problem,
    label_value_problem,
    yarn_resource_type_problem,
)
from accelflow.resources import (
    KubernetesResourceDecorator,
    KubernetesResources,
    YarnResourceDecorator,
)
from accelflow.resources import ask_decorator

log = logging.getLogger("accelflow.deploy")

V = TypeVar("V")
SPARK_YARN_RESOURCE_TYPES: Mapping[str, str] = MappingProxyType(
    {"gpu": "yarn.io/gpu", "fpga": "yarn.io/fpga"}
)
"""Spark's default mapping of resource names to YARN types, offered as a hint (never applied
implicitly: only resources with a ``yarn.config-key`` are requested, as in Flink)."""
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
_TOLERATION_FIELDS = ("key", "operator", "value", "effect", "tolerationSeconds")
_OPERATORS = ("Equal", "Exists")
_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


@dataclass(frozen=True, slots=True, kw_only=True)
class KubernetesRequest:
    """What the TaskExecutor container and its pod ask Kubernetes for.

    Example:
        ``-D external-resources=gpu -D external-resource.gpu.amount=2
        -D external-resource.gpu.vendor=nvidia.com -D local.number-taskmanager=2`` gives
        ``resources == {"nvidia.com/gpu": 4}``, no node selector and no tolerations.

    Attributes:
        resources: extended resource name to the container's quantity (already multiplied by
            ``local.number-taskmanager``); the same value goes to ``requests`` and ``limits``.
        node_selector: node labels the pod must match.
        tolerations: ``V1Toleration``-shaped dicts (camelCase keys), without duplicates.
    """

    resources: Mapping[str, int] = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "resources", MappingProxyType(dict(self.resources)))
        object.__setattr__(self, "node_selector", MappingProxyType(dict(self.node_selector)))


@dataclass(frozen=True, slots=True)
class _Origin:
    """Who set an entry: a config key (``driver`` False) or a driver factory."""

    text: str
    key: str
    driver: bool = False

    @classmethod
    def of_driver(cls, spec: ExternalResourceSpec) -> _Origin:
        key = spec.key("driver-factory.class")
        return cls(f"driver {spec.driver_factory!r} of resource {spec.name!r} ({key})", key, True)


class _Entries(Generic[V]):
    """Values by key; each remembers its origin; a second, different value is refused."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.values: dict[str, tuple[V, _Origin]] = {}

    def add(self, key: str, value: V, origin: _Origin) -> None:
        if key not in self.values:
            self.values[key] = (value, origin)
            return
        old, first = self.values[key]
        if old == value:
            return
        message = (
            f"{self.what} {key!r} is {old!r} from {first.text} but {value!r} from "
            f"{origin.text}; make them agree or remove one"
        )
        if first.driver or origin.driver:
            raise DeploymentError(message)
        raise ConfigError(message, key=origin.key)

    def plain(self) -> dict[str, V]:
        return {key: value for key, (value, _) in self.values.items()}


def kubernetes_request(config: Configuration) -> KubernetesRequest:
    """Collect the extended resources, node selector and tolerations of the TaskExecutor pod.

    Raises:
        ConfigError: a node-selector label or toleration in the config is invalid, or two
            config keys disagree.
        DeploymentError: a driver's entry is invalid or conflicts with the config.
        DriverLoadError: a configured driver factory cannot be loaded.
    """
    resources: _Entries[int] = _Entries("extended resource")
    selector: _Entries[str] = _Entries("node-selector label")
    tolerations: list[Mapping[str, Any]] = []
    for spec in config.external_resources.values():
        _add_config_entries(config, spec, resources, selector, tolerations)
        driver = ask_decorator(spec, KubernetesResourceDecorator, "kubernetes_resources",
                               KubernetesResources, "accelflow.resources.KubernetesResources")
        if driver is not None:
            _add_driver_entries(spec, driver, resources, selector, tolerations)
        elif not spec.kubernetes_config_key:
            log.warning(
                "external resource %r is not requested from Kubernetes, so the pod may land on "
                "a node without it; set %s (e.g. 'nvidia.com/gpu') or %s (e.g. 'nvidia.com')",
                spec.name, spec.key("kubernetes.config-key"), spec.key("vendor"),
            )
    per_container = config.get(NUMBER_TASKMANAGER)
    return KubernetesRequest(
        resources={key: amount * per_container for key, amount in resources.plain().items()},
        node_selector=selector.plain(),
        tolerations=tuple(tolerations),
    )


def yarn_request(config: Configuration) -> dict[str, int]:
    """YARN resource types and the container's amounts, e.g. ``{"yarn.io/gpu": 2}``.

    Raises:
        DeploymentError: a driver's entry is invalid or conflicts with the config.
        DriverLoadError: a configured driver factory cannot be loaded.
    """
    entries: _Entries[int] = _Entries("YARN resource type")
    for spec in config.external_resources.values():
        if spec.yarn_config_key:
            key = spec.key("yarn.config-key")
            entries.add(spec.yarn_config_key, spec.amount, _Origin(key, key))
        driver = ask_decorator(spec, YarnResourceDecorator, "yarn_resources", Mapping,
                               "a mapping of resource type to amount")
        if driver is not None:
            _add_yarn_driver_entries(spec, driver, entries)
        elif not spec.yarn_config_key:
            example = SPARK_YARN_RESOURCE_TYPES.get(spec.name, "yarn.io/gpu")
            log.warning(
                "external resource %r is not requested from YARN, so the container may land on "
                "a node without it; set %s (e.g. %r)",
                spec.name, spec.key("yarn.config-key"), example,
            )
    per_container = config.get(NUMBER_TASKMANAGER)
    return {key: amount * per_container for key, amount in entries.plain().items()}


# -- config entries ------------------------------------------------------------------------


def _add_config_entries(
    config: Configuration,
    spec: ExternalResourceSpec,
    resources: _Entries[int],
    selector: _Entries[str],
    tolerations: list[Mapping[str, Any]],
) -> None:
    if spec.kubernetes_config_key:
        key = spec.key("kubernetes.config-key")
        key = key if key in config.raw else spec.key("vendor")
        resources.add(spec.kubernetes_config_key, spec.amount, _Origin(key, key))
    for label, value in _config_selector(config, spec).items():
        key = spec.key("kubernetes.node-selector")
        if label == GPU_PRODUCT_LABEL and spec.key("kubernetes.gpu-product") in config.values:
            key = spec.key("kubernetes.gpu-product")
        if why := (label_key_problem(label) or label_value_problem(value)):
            raise ConfigError(why, key=key)
        selector.add(label, value, _Origin(key, key))
    key = spec.key("kubernetes.tolerations")
    for position, toleration in enumerate(spec.kubernetes_tolerations, 1):
        if why := toleration_problem(toleration):
            raise ConfigError(f"toleration {position}: {why}", key=key)
        _append_new(tolerations, toleration)


def _config_selector(config: Configuration, spec: ExternalResourceSpec) -> Mapping[str, str]:
    """The spec's selector, refusing a ``gpu-product`` that contradicts ``node-selector``."""
    given = config.values.get(spec.key("kubernetes.node-selector")) or {}
    product = config.values.get(spec.key("kubernetes.gpu-product"))
    if product is not None and given.get(GPU_PRODUCT_LABEL, product) != product:
        raise ConfigError(
            f"{product!r} contradicts {GPU_PRODUCT_LABEL}={given[GPU_PRODUCT_LABEL]!r} in "
            f"{spec.key('kubernetes.node-selector')}; set the GPU product in one place only",
            key=spec.key("kubernetes.gpu-product"),
        )
    return spec.kubernetes_node_selector


def toleration_problem(toleration: object) -> str | None:
    """Why ``toleration`` is not a valid ``V1Toleration`` dict, or ``None``.

    Example:
        >>> toleration_problem({"key": "nvidia.com/gpu", "operator": "Exists"})
        >>> toleration_problem({"operator": "Maybe"})
        "operator 'Maybe' is not one of Equal, Exists"
    """
    if not isinstance(toleration, Mapping):
        return (
            'expected an object such as {"key": "nvidia.com/gpu", "operator": "Exists"}, '
            f"got {toleration!r}"
        )
    if unknown := sorted(set(toleration) - set(_TOLERATION_FIELDS)):
        names = ", ".join(map(repr, unknown))
        return f"unknown field(s) {names}; known: {', '.join(_TOLERATION_FIELDS)}"
    for name in ("key", "operator", "value", "effect"):
        if not isinstance(toleration.get(name, ""), str):
            return f"{name} must be a string, got {toleration[name]!r}"
    return _toleration_rule_problem(toleration)


def _toleration_rule_problem(toleration: Mapping[str, Any]) -> str | None:
    operator = toleration.get("operator", "Equal")
    key, value, effect = (toleration.get(n, "") for n in ("key", "value", "effect"))
    if operator not in _OPERATORS:
        return f"operator {operator!r} is not one of {', '.join(_OPERATORS)}"
    if operator == "Exists" and value:
        return "operator Exists takes no value; remove the value or use operator Equal"
    if not key and operator != "Exists":
        return "a toleration without a key must use operator Exists (it tolerates every taint)"
    if why := (key and label_key_problem(key)) or label_value_problem(value):
        return why
    if effect and effect not in _EFFECTS:
        return f"effect {effect!r} is not one of {', '.join(_EFFECTS)} (or empty for all)"
    seconds = toleration.get("tolerationSeconds")
    if seconds is not None:
        if isinstance(seconds, bool) or not isinstance(seconds, int):
            return f"tolerationSeconds must be a whole number, got {seconds!r}"
        if effect != "NoExecute":
            return "tolerationSeconds only applies to effect NoExecute"
    return None


def _append_new(items: list[Mapping[str, Any]], item: Mapping[str, Any]) -> None:
    if dict(item) not in [dict(existing) for existing in items]:
        items.append(dict(item))


# -- driver entries ------------------------------------------------------------------------




def _add_driver_entries(
    spec: ExternalResourceSpec,
    result: KubernetesResources,
    resources: _Entries[int],
    selector: _Entries[str],
    tolerations: list[Mapping[str, Any]],
) -> None:
    origin = _Origin.of_driver(spec)
    for name, amount in dict(result.resources).items():
        _check_driver_key(origin, name, kubernetes_extended_resource_problem)
        _check_quantity(origin, name, amount)
        resources.add(name, amount, origin)
    for label, value in dict(result.node_selector).items():
        if not isinstance(label, str) or not isinstance(value, str):
            raise DeploymentError(
                f"{origin.text}: node selector {label!r}: {value!r} must be strings"
            )
        if why := label_key_problem(label) or label_value_problem(value):
            raise DeploymentError(f"{origin.text}: node selector: {why}")
        selector.add(label, value, origin)
    for toleration in result.tolerations:
        if why := toleration_problem(toleration):
            raise DeploymentError(f"{origin.text}: toleration: {why}")
        _append_new(tolerations, toleration)


def _add_yarn_driver_entries(
    spec: ExternalResourceSpec, result: Mapping[str, Any], entries: _Entries[int]
) -> None:
    origin = _Origin.of_driver(spec)
    for name, amount in dict(result).items():
        _check_driver_key(origin, name, yarn_resource_type_problem)
        _check_quantity(origin, name, amount)
        entries.add(name, amount, origin)


def _check_driver_key(origin: _Origin, name: object, rule: Callable[[str], str | None]) -> None:
    why = rule(name) if isinstance(name, str) else f"expected a string, got {name!r}"
    if why:
        raise DeploymentError(f"{origin.text}: resource name {name!r}: {why}")


def _check_quantity(origin: _Origin, name: str, amount: object) -> None:
    if isinstance(amount, bool) or not isinstance(amount, int):
        raise DeploymentError(
            f"{origin.text}: the quantity of {name!r} must be a positive whole number, got "
            f"{amount!r} ({type(amount).__name__}); cluster managers cannot grant a fraction "
            "of a device"
        )
    if amount < 1:
        raise DeploymentError(
            f"{origin.text}: the quantity of {name!r} must be a positive whole number, got {amount}"
        )
