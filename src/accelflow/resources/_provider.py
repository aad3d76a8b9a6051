"""The per-TaskExecutor info provider: build each driver once, run it once, hold the infos."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

from accelflow._errors import (
    AccelflowError, ConfigError, ConfigProblem, DiscoveryError, decode_error, encode_error,
)
from accelflow.config.keys import KEYS, RESOURCE_PREFIX
from accelflow.config import Configuration, ExternalResourceSpec
from accelflow.resources._api import (
    ExternalResourceDriver,
    ExternalResourceInfo,
    info_properties,
)
from accelflow.resources._device_watch import DeviceWatch
from accelflow.resources._health_params import HealthConfig, split_health_params
from accelflow.resources._registry import load_driver_factory

log = logging.getLogger("accelflow.resources")

Status = Literal["ok", "no-driver", "degraded"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceStatus:
    """The outcome of discovery for one resource on one TaskExecutor.

    Attributes:
        spec: the resource's config.
        status: ``ok``; ``no-driver`` (none configured: requested from cluster managers only,
            no infos, as in Flink); or ``degraded`` (discovery failed under
            ``on-discovery-failure: degrade``; ``message`` says why).
        infos: the discovered devices, sorted.
        message: the discovery error or warning, if any.
        health: how its devices are watched (its ``param.health.*`` keys).
    """

    spec: ExternalResourceSpec
    status: Status
    infos: tuple[ExternalResourceInfo, ...] = ()
    message: str | None = None
    warnings: tuple[str, ...] = field(default=())
    health: HealthConfig = field(default_factory=HealthConfig)

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready view (``accelflow resources --json``; the REST API shows the same fields)."""
        return {
            "name": self.spec.name,
            "amount": self.spec.amount,
            "driver": self.spec.driver_factory,
            "status": self.status,
            "message": self.message,
            "warnings": list(self.warnings),
            "infos": [info_properties(info) for info in self.infos],
            "kubernetes_config_key": self.spec.kubernetes_config_key,
            "yarn_config_key": self.spec.yarn_config_key,
        }


class ExternalResourceInfoProvider:
    """Holds the discovered infos of one TaskExecutor, by resource name.

    Build it with :meth:`from_config` once per TaskExecutor; :meth:`close` gives every device
    back (drivers' ``release`` then ``close``). Usable as a context manager.
    """

    def __init__(
        self,
        statuses: Collection[ResourceStatus] = (),
        drivers: Mapping[str, ExternalResourceDriver] | None = None,
    ) -> None:
        self._statuses = {s.spec.name: s for s in statuses}
        self._infos = {name: frozenset(s.infos) for name, s in self._statuses.items()}
        self._drivers = dict(drivers or {})
        self._closed = False

    @classmethod
    def from_config(cls, config: Configuration) -> ExternalResourceInfoProvider:
        """Run every configured driver once with its amount.

        Raises:
            DriverLoadError: a factory cannot be loaded (always fatal: it is a config error).
            ConfigError: a factory rejected its ``param.*`` keys.
            DiscoveryError: a driver failed and its resource says ``on-discovery-failure: fail``.
        """
        statuses: list[ResourceStatus] = []
        drivers: dict[str, ExternalResourceDriver] = {}
        try:
            for spec in config.external_resources.values():
                status, driver = _discover(spec)
                statuses.append(status)
                if driver is not None:
                    drivers[spec.name] = driver
        except BaseException:
            cls(statuses, drivers).close()  # give back what the earlier drivers found
            raise
        return cls(statuses, drivers)

    def get_external_resource_infos(self, name: str) -> frozenset[ExternalResourceInfo]:
        """The devices of resource ``name``; empty for unknown or degraded resources."""
        return self._infos.get(name, frozenset())

    @property
    def statuses(self) -> Mapping[str, ResourceStatus]:
        return MappingProxyType(self._statuses)

    def isolation_env(self, assigned: Mapping[str, Collection[ExternalResourceInfo]]) -> dict[str, str]:
        """The environment that restricts a subtask to its ``assigned`` devices, from the drivers.

        ``assigned`` may hold plain infos rebuilt from properties (as they cross processes);
        each driver is handed its own info objects for them, so a driver whose info class
        carries more than its properties still gets its own instances back.
        """
        env: dict[str, str] = {}
        for name, infos in assigned.items():
            driver = self._drivers.get(name)
            if driver is not None and infos:
                env.update(driver.isolation_env(self._own_infos(name, infos)))
        return env

    def device_watches(self) -> dict[str, tuple[DeviceWatch, HealthConfig]]:
        """Per resource whose devices are watched (discovered, ``param.health.enabled``, and a
        driver that can: :meth:`ExternalResourceDriver.device_watch`), its watch and health
        config. A driver whose watch fails to start is logged and left unwatched."""
        watches = {}
        for name, status in self._statuses.items():
            driver = self._drivers.get(name)
            if driver is None or status.status != "ok" or not status.infos or not status.health.enabled:
                continue
            try:
                watch = driver.device_watch(status.infos)
            except Exception as exc:
                log.warning("%s: its devices are not watched: %s", name, _describe(exc))
                continue
            if watch is not None:
                watches[name] = (watch, status.health)
        return watches

    def _own_infos(
        self, name: str, infos: Collection[ExternalResourceInfo]
    ) -> list[ExternalResourceInfo]:
        own = {info: info for info in self._infos.get(name, frozenset())}  # equal by properties
        return [own.get(info, info) for info in infos]

    def close(self) -> None:
        """Release every device and close every driver; safe to call twice. Errors are logged."""
        if self._closed:
            return
        self._closed = True
        for name, driver in self._drivers.items():
            _close_driver(name, driver, self._infos.get(name, frozenset()))

    def __enter__(self) -> ExternalResourceInfoProvider:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _discover(spec: ExternalResourceSpec) -> tuple[ResourceStatus, ExternalResourceDriver | None]:
    if spec.driver_factory is None:
        return ResourceStatus(spec=spec, status="no-driver"), None
    health, params = _health_params(spec)
    driver = _create_driver(spec, params)
    try:
        infos, warnings = _retrieve(driver, spec)
    except Exception as exc:
        message = f"discovery of {spec.name!r} failed: {_describe(exc)}"
        if spec.on_discovery_failure == "fail":
            _close_driver(spec.name, driver, ())
            if isinstance(exc, AccelflowError) and not isinstance(exc, DiscoveryError):
                # e.g. CoordinationError: keep its class (and ``path``) for the caller
                raise decode_error(encode_error(exc), context=f"discovery of {spec.name!r} failed") from exc
            raise DiscoveryError(
                f"{message} (set {spec.key('on-discovery-failure')}: degrade to start without it)",
                resource=spec.name,
            ) from exc
        log.warning("%s; continuing without it (on-discovery-failure: degrade)", message)
        return ResourceStatus(spec=spec, status="degraded", message=message, health=health), driver
    for warning in warnings:
        log.warning("%s", warning)
    return ResourceStatus(spec=spec, status="ok", infos=infos, warnings=warnings, health=health), driver


def _health_params(spec: ExternalResourceSpec) -> tuple[HealthConfig, dict[str, str]]:
    """The resource's ``param.health.*`` keys (every driver's), and the driver's own keys.

    Raises:
        ConfigError: a wrong ``health.*`` key, named in full.
    """
    try:
        return split_health_params(spec.params)
    except ConfigError as exc:
        raise ConfigError(_qualified(exc.problems, spec)) from exc


def _create_driver(spec: ExternalResourceSpec, params: Mapping[str, str]) -> ExternalResourceDriver:
    key = spec.key("driver-factory.class")
    factory = load_driver_factory(spec.driver_factory or "", resource=spec.name, key=key)
    try:
        driver = factory.create_external_resource_driver(MappingProxyType(dict(params)))
    except ConfigError as exc:
        raise ConfigError(_qualified(exc.problems, spec)) from exc
    except AccelflowError:
        raise
    except Exception as exc:
        raise ConfigError(
            f"driver factory {spec.driver_factory!r} rejected its parameters: "
            f"{type(exc).__name__}: {exc}",
            key=key,
        ) from exc
    if not isinstance(driver, ExternalResourceDriver):
        raise ConfigError(
            f"{spec.driver_factory!r} returned {type(driver).__name__}, not an ExternalResourceDriver",
            key=key,
        )
    return driver


def _qualified(problems: Collection[ConfigProblem], spec: ExternalResourceSpec) -> list[ConfigProblem]:
    """Factories name their keys relative to the resource (``param.path``); users need the full
    key (``external-resource.gpu.param.path``). A problem without a key (``config``) is about
    the parameters as a whole."""
    out = []
    for problem in problems:
        key = problem.key
        if key == "config":
            key = spec.key("param.*")
        elif not key.startswith(RESOURCE_PREFIX) and key not in KEYS:
            key = spec.key(key)
        out.append(ConfigProblem(key, problem.message, problem.source))
    return out


def _retrieve(
    driver: ExternalResourceDriver, spec: ExternalResourceSpec
) -> tuple[tuple[ExternalResourceInfo, ...], tuple[str, ...]]:
    found = driver.retrieve_resource_info(spec.amount)
    if not isinstance(found, Collection) or isinstance(found, str | Mapping):
        raise DiscoveryError(
            f"the driver returned {type(found).__name__}, not a set of ExternalResourceInfo"
        )
    infos = tuple(sorted({info for info in found if isinstance(info, ExternalResourceInfo)}))
    try:
        _check_infos(found, infos, spec)
    except DiscoveryError:
        _close_driver(spec.name, driver, infos, close=False)  # rejected: give them back now
        raise
    if len(infos) == spec.amount:
        return infos, ()
    kept, extra = infos[: spec.amount], infos[spec.amount :]
    _close_driver(spec.name, driver, extra, close=False)
    warning = (
        f"{spec.name}: the driver returned {len(infos)} devices, keeping the first "
        f"{spec.amount} ({', '.join(i.address for i in kept)}) per {spec.key('amount')} "
        f"and releasing {', '.join(i.address for i in extra)}"
    )
    return kept, (warning,)


def _check_infos(
    found: Collection[object], infos: tuple[ExternalResourceInfo, ...], spec: ExternalResourceSpec
) -> None:
    bad = next((i for i in found if not isinstance(i, ExternalResourceInfo)), None)
    if bad is not None:
        raise DiscoveryError(
            f"the driver returned {bad!r} ({type(bad).__name__}), not an ExternalResourceInfo"
        )
    empty = next((i for i in infos if not len(i)), None)
    if empty is not None:
        raise DiscoveryError(
            f"the driver returned an info without properties ({type(empty).__name__}); "
            "get_keys() must name at least one property with a value, e.g. 'index'"
        )
    addresses = [info.address for info in infos]
    if len(set(addresses)) != len(addresses):
        raise DiscoveryError(f"the driver returned duplicate addresses: {addresses}")
    if len(infos) < spec.amount:
        raise DiscoveryError(
            f"found {len(infos)} device(s) {addresses}, but {spec.key('amount')} is {spec.amount}"
        )


def _close_driver(
    name: str,
    driver: ExternalResourceDriver,
    infos: Collection[ExternalResourceInfo],
    *,
    close: bool = True,
) -> None:
    """``release(infos)`` (if any) then ``close()``; errors are logged, never raised, so one
    failing driver cannot keep the others from giving their devices back."""
    steps: list[Callable[[], None]] = [lambda: driver.release(infos)] if infos else []
    if close:
        steps.append(driver.close)
    for step in steps:
        try:
            step()
        except Exception:
            log.exception("releasing external resource %r failed", name)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, AccelflowError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"
