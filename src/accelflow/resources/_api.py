"""The driver SDK: what a third-party external resource driver implements.

A driver author imports only :mod:`accelflow.resources`. The flow, as in Flink's FLIP-108:

1. The config names a factory (``external-resource.<name>.driver-factory.class``).
2. On every TaskExecutor, the factory builds one driver from the resource's ``param.*`` keys.
3. The driver's :meth:`ExternalResourceDriver.retrieve_resource_info` is called once with the
   configured amount and returns one :class:`ExternalResourceInfo` per device.
4. The scheduler hands those devices (whole or shared) to operator subtasks; on shutdown the
   runtime calls :meth:`ExternalResourceDriver.release` and :meth:`ExternalResourceDriver.close`.

Factories may also implement the optional cluster-manager protocols at the bottom of this
module (:class:`KubernetesResourceDecorator`, :class:`YarnResourceDecorator`,
:class:`RayResourceDecorator`); the runtime detects them with ``isinstance`` so a driver need
not support every deployment.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from accelflow.resources._device_watch import DeviceWatch

_ADDRESS_KEYS = ("index", "uuid", "id", "address")
_NUMBER = re.compile(r"\d+")


class ExternalResourceInfo(Mapping[str, str]):
    """One discovered device (or unit) of an external resource: string properties.

    Immutable, hashable and ordered (by address, numerically: ``"2"`` sorts before ``"10"``).
    It is also a read-only ``Mapping[str, str]``, so ``dict(info)`` gives its properties.

    As in Flink, a driver may subclass it and implement only :meth:`get_property` and
    :meth:`get_keys` over its own attributes, without calling ``super().__init__()``: equality,
    hashing, ordering, ``address`` and serialisation all go through those two methods (see
    :func:`info_properties`), and such an info crosses processes as a plain
    ``ExternalResourceInfo`` with the same properties.

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
    # Subclasses may override these two and never call ``super().__init__()`` (Flink's
    # ExternalResourceInfo is a Java interface); every other method below goes through them.
    def get_property(self, key: str) -> str | None:
        """The value of property ``key``, or ``None`` if this device has no such property."""
        return self._props.get(key)

    def get_keys(self) -> Collection[str]:
        """The names of all properties, sorted."""
        return tuple(self._props)

    def _properties(self) -> Mapping[str, str]:
        cls = type(self)
        if (
            cls.get_property is ExternalResourceInfo.get_property
            and cls.get_keys is ExternalResourceInfo.get_keys
        ):
            return self._props
        return info_properties(self)  # a subclass implements the interface its own way

    # -- identity ---------------------------------------------------------------------------
    @property
    def address(self) -> str:
        """The device's address for scheduling: ``index``, else ``uuid``, ``id`` or ``address``."""
        props = self._properties()
        for key in _ADDRESS_KEYS:
            if key in props:
                return props[key]
        return ",".join(f"{k}={v}" for k, v in props.items())

    def _sort_key(self) -> tuple[tuple[int, int | str], ...]:
        address = self.address
        parts = _NUMBER.split(address)
        numbers = _NUMBER.findall(address)
        key: list[tuple[int, int | str]] = []
        for i, text in enumerate(parts):
            key.append((1, text))
            if i < len(numbers):
                key.append((0, int(numbers[i])))
        return tuple(key)

    def to_dict(self) -> dict[str, str]:
        """The properties as a plain dict (for JSON and for crossing process boundaries)."""
        return dict(self._properties())

    # -- Mapping / value semantics ---------------------------------------------------------
    def __getitem__(self, key: str) -> str:
        return self._properties()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._properties())

    def __len__(self) -> int:
        return len(self._properties())

    def __hash__(self) -> int:
        props = self._properties()
        if props is getattr(self, "_props", None):
            return self._hash
        return hash(tuple(props.items()))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ExternalResourceInfo):
            return dict(self._properties()) == dict(other._properties())
        return NotImplemented

    def _order(self) -> tuple[object, ...]:
        return (self._sort_key(), tuple(self._properties().items()))

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
        # crosses process boundaries as the plain value type: the receiver needs no plugin code
        return (ExternalResourceInfo, (dict(self._properties()),))

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self._properties().items())
        return f"{type(self).__name__}({inner})"


def info_properties(info: ExternalResourceInfo) -> dict[str, str]:
    """The properties of ``info`` through Flink's interface only (``get_keys``/``get_property``).

    Use this wherever infos are serialised or compared: a third-party subclass may implement
    just those two methods and never call ``ExternalResourceInfo.__init__``. Keys are sorted,
    values turned into strings, and keys whose value is ``None`` or empty are left out.

    Example:
        >>> class CardInfo(ExternalResourceInfo):
        ...     def __init__(self, serial):
        ...         self.serial = serial
        ...     def get_property(self, key):
        ...         return self.serial if key == "serial" else None
        ...     def get_keys(self):
        ...         return ["serial"]
        >>> info_properties(CardInfo("AC-0017"))
        {'serial': 'AC-0017'}

    Raises:
        TypeError: ``get_keys`` returned something that is not a collection of strings.
    """
    keys = info.get_keys()
    if isinstance(keys, str | bytes) or not isinstance(keys, Iterable):
        raise TypeError(
            f"{type(info).__name__}.get_keys() returned {type(keys).__name__}, not a collection "
            "of property names"
        )
    props: dict[str, str] = {}
    for key in sorted(keys):
        if not isinstance(key, str):
            raise TypeError(
                f"{type(info).__name__}.get_keys() returned {key!r}, not a property name (str)"
            )
        value = info.get_property(key)
        text = "" if value is None else str(value)
        if text.strip():
            props[key] = text
    return props


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

    def device_watch(self, infos: Collection[ExternalResourceInfo]) -> DeviceWatch | None:
        """How the TaskExecutor watches ``infos`` (the devices it kept) while jobs run: their
        probes, fault events and compute processes (see ``docs/gpu.md``, "Health and
        memory"). Called once after discovery, unless ``param.health.enabled`` is false. The
        default, ``None``: nobody watches them, they are trusted for the TaskExecutor's life.
        """
        return None


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


@dataclass(frozen=True, slots=True, kw_only=True)
class RayResources:
    """What a factory asks Ray for on behalf of each TaskExecutor actor.

    Example: the GPU plugin with ``amount: 2`` returns
    ``RayResources(num_gpus=2, accelerator_ids_env="ACCELFLOW_RAY_GPU_IDS")``: Ray picks two
    GPUs for the actor, the actor writes their ids into that variable before the drivers run,
    and the GPU driver reports exactly those GPUs instead of discovering on its own.

    Attributes:
        num_gpus: Ray's ``num_gpus`` (whole GPUs; Ray then sets the actor's
            ``CUDA_VISIBLE_DEVICES``).
        resources: Ray custom resources, e.g. ``{"acme.com/fpga": 2}``.
        accelerator_ids_env: when set, the actor puts the ids Ray assigned it (for
            ``accelerator``, comma-separated) in this environment variable before the drivers
            run, so the driver can report Ray's choice.
        accelerator: the key of ``ray.get_runtime_context().get_accelerator_ids()`` to read.

    Raises:
        ValueError: a negative or non-finite amount, or ``accelerator_ids_env`` that is empty.
    """

    num_gpus: int = 0
    resources: Mapping[str, float] = field(default_factory=dict)
    accelerator_ids_env: str | None = None
    accelerator: str = "GPU"

    def __post_init__(self) -> None:
        amounts = {"num_gpus": self.num_gpus, **self.resources}
        for name, value in amounts.items():
            if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
                raise ValueError(f"Ray resource {name!r}: expected an amount >= 0, got {value!r}")
            if value == float("inf"):
                raise ValueError(f"Ray resource {name!r}: expected a finite amount, got {value!r}")
        if self.accelerator_ids_env is not None and not self.accelerator_ids_env.strip():
            raise ValueError("accelerator_ids_env must name an environment variable or be None")


@runtime_checkable
class RayResourceDecorator(Protocol):
    """Optional: a factory that shapes the Ray actor options of its resource.

    Without it the Ray launcher asks for the resource as a Ray custom resource named
    ``external-resource.<name>.ray.resource-name`` (default: the resource name).
    """

    def ray_resources(self, params: Mapping[str, str], amount: int) -> RayResources:
        """What one TaskExecutor actor needs for ``amount`` devices."""
        ...
