"""The driver SDK: what a third-party external resource driver implements.

A driver author imports only :mod:`accelflow.resources`. The flow, as in Flink's FLIP-108:

1. The config names a factory (``external-resource.<name>.driver-factory.class``).
2. On every TaskExecutor, the factory builds one driver from the resource's ``param.*`` keys.
3. The driver's :meth:`ExternalResourceDriver.retrieve_resource_info` is called once with the
   configured amount and returns one :class:`ExternalResourceInfo` per device.
4. The scheduler hands those devices (whole or shared) to operator subtasks; on shutdown the
   runtime calls :meth:`ExternalResourceDriver.release` and :meth:`ExternalResourceDriver.close`.

Factories may also implement the optional cluster-manager protocols at the bottom of this
module (:class:`KubernetesResourceDecorator`, :class:`YarnResourceDecorator`); the runtime
detects them with ``isinstance`` so a driver need not support every deployment.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Collection, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

_ADDRESS_KEYS = ("index", "uuid", "id", "address")
_NUMBER = re.compile(r"\d+")


class ExternalResourceInfo(Mapping[str, str]):
    """One discovered device (or unit) of an external resource: string properties.

    Immutable, hashable and ordered (by address, numerically: ``"2"`` sorts before ``"10"``).
    It is also a read-only ``Mapping[str, str]``, so ``dict(info)`` gives its properties.

    Example:
        >>> info = ExternalResourceInfo(index="0", uuid="GPU-8f6c", name="NVIDIA H100")
        >>> info.get_property("index"), info.get_property("vendor")
        ('0', None)
        >>> info
        ExternalResourceInfo(index='0', name='NVIDIA H100', uuid='GPU-8f6c')

    Args:
        properties: property name to value; values are converted with ``str``. Keys and values
            must be non-empty and keys must not start or end with whitespace.
        **kwargs: more properties, for convenience.

    Raises:
        ValueError: no properties, a key that is not a non-empty trimmed string, or a value
            that is ``None`` or empty.
    """

    __slots__ = ("_props", "_hash")

    def __init__(self, properties: Mapping[str, object] | None = None, /, **kwargs: object) -> None:
        merged: dict[str, object] = {**(properties or {}), **kwargs}
        if not merged:
            raise ValueError("an ExternalResourceInfo needs at least one property, e.g. index='0'")
        for key in merged:
            if not isinstance(key, str) or not key.strip() or key != key.strip():
                raise ValueError(f"property names must be non-empty trimmed strings, got {key!r}")
        props: dict[str, str] = {}
        for key, value in sorted(merged.items()):
            text = "" if value is None else str(value)
            if not text.strip():
                raise ValueError(f"property {key!r} has an empty value ({value!r})")
            props[key] = text
        self._props: Mapping[str, str] = MappingProxyType(props)
        self._hash = hash(tuple(props.items()))

    # -- Flink's interface ------------------------------------------------------------------
    def get_property(self, key: str) -> str | None:
        """The value of property ``key``, or ``None`` if this device has no such property."""
        return self._props.get(key)

    def get_keys(self) -> Collection[str]:
        """The names of all properties, sorted."""
        return tuple(self._props)

    # -- identity ---------------------------------------------------------------------------
    @property
    def address(self) -> str:
        """The device's address for scheduling: ``index``, else ``uuid``, ``id`` or ``address``."""
        for key in _ADDRESS_KEYS:
            if key in self._props:
                return self._props[key]
        return ",".join(f"{k}={v}" for k, v in self._props.items())

    def _sort_key(self) -> tuple[tuple[int, int | str], ...]:
        parts = _NUMBER.split(self.address)
        numbers = _NUMBER.findall(self.address)
        key: list[tuple[int, int | str]] = []
        for i, text in enumerate(parts):
            key.append((1, text))
            if i < len(numbers):
                key.append((0, int(numbers[i])))
        return tuple(key)

    def to_dict(self) -> dict[str, str]:
        """The properties as a plain dict (for JSON and for crossing process boundaries)."""
        return dict(self._props)

    # -- Mapping / value semantics ---------------------------------------------------------
    def __getitem__(self, key: str) -> str:
        return self._props[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._props)

    def __len__(self) -> int:
        return len(self._props)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ExternalResourceInfo):
            return dict(self._props) == dict(other._props)
        return NotImplemented

    def _order(self) -> tuple[object, ...]:
        return (self._sort_key(), tuple(self._props.items()))

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, ExternalResourceInfo):
            return NotImplemented
        return self._order() < other._order()

    def __le__(self, other: object) -> bool:
        if not isinstance(other, ExternalResourceInfo):
            return NotImplemented
        return self._order() <= other._order()

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, ExternalResourceInfo):
            return NotImplemented
        return self._order() > other._order()

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, ExternalResourceInfo):
            return NotImplemented
        return self._order() >= other._order()

    def __reduce__(self) -> tuple[Any, ...]:
        return (ExternalResourceInfo, (dict(self._props),))

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self._props.items())
        return f"ExternalResourceInfo({inner})"


class ExternalResourceDriver(ABC):
    """Discovers the devices of one external resource on one TaskExecutor.

    Subclasses implement :meth:`retrieve_resource_info`; the other methods are optional hooks
    with do-nothing defaults.
    """

    @abstractmethod
    def retrieve_resource_info(self, amount: int) -> Set[ExternalResourceInfo]:
        """Discover ``amount`` devices and return one info per device.

        Called once per TaskExecutor at start-up, with the configured amount (a positive int).
        Returning fewer infos than ``amount`` is a discovery failure (the runtime gives them
        back at once with :meth:`release`); returning more keeps the first ``amount`` (in info
        order) with a warning and releases the rest at once.

        Raises:
            accelflow.DiscoveryError: (or any exception) when the devices cannot be found; the
                TaskExecutor then fails or degrades per ``on-discovery-failure``.
        """

    def isolation_env(self, infos: Collection[ExternalResourceInfo]) -> Mapping[str, str]:
        """Environment variables that restrict a subtask to ``infos``.

        E.g. the GPU driver returns ``{"CUDA_VISIBLE_DEVICES": "0,2",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}``. Called in the TaskExecutor before a subtask that
        was assigned ``infos`` starts. The default sets nothing.
        """
        return {}

    def release(self, infos: Collection[ExternalResourceInfo]) -> None:
        """Give the devices back (e.g. to a host coordination file).

        Called at shutdown with the devices the TaskExecutor kept, and right after discovery
        with any it rejected (too few, or more than ``amount``); never with an empty set.
        """

    def close(self) -> None:
        """Free whatever the driver holds. Called once, after :meth:`release`."""


class ExternalResourceDriverFactory(ABC):
    """Builds the driver of one external resource from its ``param.*`` keys.

    Registered under the entry-point group ``accelflow.external_resources`` or named by its
    import path in ``external-resource.<name>.driver-factory.class``. Must be constructible
    without arguments.
    """

    @abstractmethod
    def create_external_resource_driver(self, params: Mapping[str, str]) -> ExternalResourceDriver:
        """Build the driver.

        Args:
            params: the keys ``external-resource.<name>.param.<p>``, as ``{p: value}``; read-only.

        Raises:
            accelflow.ConfigError: a parameter is wrong (name it by its full key).
        """


# -- optional cluster-manager protocols ------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class KubernetesResources:
    """What a factory adds to the Kubernetes container/pod that runs TaskExecutors.

    Attributes:
        resources: extended resources for ``requests`` and ``limits`` (same value in both).
        node_selector: node labels the pod must match, e.g. ``{"nvidia.com/gpu.product": "A100"}``.
        tolerations: ``V1Toleration``-shaped dicts, e.g. ``{"key": "nvidia.com/gpu",
            "operator": "Exists", "effect": "NoSchedule"}``.
    """

    resources: Mapping[str, int] = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: Sequence[Mapping[str, str]] = ()


@runtime_checkable
class KubernetesResourceDecorator(Protocol):
    """Optional: a factory that shapes Kubernetes requests for its resource."""

    def kubernetes_resources(
        self, params: Mapping[str, str], amount: int
    ) -> KubernetesResources:
        """What the TaskExecutor container needs for ``amount`` devices per TaskExecutor."""
        ...


@runtime_checkable
class YarnResourceDecorator(Protocol):
    """Optional: a factory that shapes YARN container requests for its resource."""

    def yarn_resources(self, params: Mapping[str, str], amount: int) -> Mapping[str, int]:
        """YARN resource types and amounts for ``amount`` devices per TaskExecutor."""
        ...
