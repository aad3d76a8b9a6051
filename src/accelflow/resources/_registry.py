"""Find driver factories: by import path or by entry point name.

``external-resource.<name>.driver-factory.class`` may be ``package.module:Class``,
``package.module.Class`` or the name of an entry point in the group
``accelflow.external_resources`` (the built-in GPU driver registers as ``gpu`` like any
third-party driver). Only the factories a config names are ever imported.

Configs written for Flink run verbatim: the class names in :data:`DRIVER_ALIASES` stand for
accelflow's own drivers (``org.apache.flink.externalresource.gpu.GPUDriverFactory`` is the
built-in GPU driver, whose ``param.*`` keys follow Flink's; see ``docs/gpu.md``).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

from accelflow._errors import DriverLoadError
from accelflow.config.keys import ENTRY_POINT_GROUP
from accelflow.resources._api import ExternalResourceDriverFactory

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")

DRIVER_ALIASES: Mapping[str, str] = MappingProxyType({
    "org.apache.flink.externalresource.gpu.GPUDriverFactory": "accelflow.resources.gpu:GPUDriverFactory",
})
"""Driver-factory names from other engines and the accelflow driver each one loads."""


@dataclass(frozen=True, slots=True)
class DriverEntryPoint:
    """A registered driver factory, e.g. ``gpu -> accelflow.resources.gpu:GPUDriverFactory``."""

    name: str
    value: str
    distribution: str | None
    version: str | None


def list_driver_entry_points() -> list[DriverEntryPoint]:
    """Every factory registered in the entry-point group, with the package that provides it."""
    found = []
    from importlib.metadata import entry_points  # slow to import: only when drivers are looked up

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        dist = ep.dist
        found.append(
            DriverEntryPoint(
                ep.name,
                ep.value,
                dist.metadata["Name"] if dist is not None else None,
                dist.version if dist is not None else None,
            )
        )
    return sorted(found, key=lambda e: (e.name, e.distribution or ""))


def _distribution(ep: EntryPoint) -> str:
    return ep.dist.metadata["Name"] if ep.dist is not None else "an unknown distribution"


def load_driver_factory(reference: str, *, resource: str, key: str) -> ExternalResourceDriverFactory:
    """Import and instantiate the factory ``reference`` names.

    Args:
        reference: an import path, an entry point name or an alias (:data:`DRIVER_ALIASES`).
        resource: the resource name (for errors).
        key: the config key that named it (for errors).

    Raises:
        DriverLoadError: no such module, attribute or entry point; not a factory; or its
            constructor raised.
    """
    target = _import(DRIVER_ALIASES.get(reference, reference), resource=resource, key=key)
    if isinstance(target, type):
        if not issubclass(target, ExternalResourceDriverFactory):
            raise DriverLoadError(
                f"{reference!r} is not a subclass of accelflow.resources.ExternalResourceDriverFactory",
                resource=resource,
                key=key,
            )
        try:
            return target()
        except Exception as exc:
            raise DriverLoadError(
                f"building {reference!r} failed: {type(exc).__name__}: {exc}",
                resource=resource,
                key=key,
            ) from exc
    if isinstance(target, ExternalResourceDriverFactory):
        return target
    raise DriverLoadError(
        f"{reference!r} is a {type(target).__name__}, not an ExternalResourceDriverFactory class",
        resource=resource,
        key=key,
    )


def _import(reference: str, *, resource: str, key: str) -> object:
    read_as = ""
    if ":" in reference:
        module_name, _, attr = reference.partition(":")
    elif "." in reference:
        module_name, _, attr = reference.rpartition(".")
        # name the configured class too: 'org.example.Foo' fails as module 'org.example'
        read_as = f" (for {reference!r}, read as 'module.Class')"
    else:
        return _load_entry_point(reference, resource=resource, key=key)
    if not (_DOTTED.fullmatch(module_name) and _DOTTED.fullmatch(attr)):
        raise DriverLoadError(
            f"{reference!r} is not an import path: expected 'package.module:Class' or "
            "'package.module.Class', or an entry point name such as 'gpu'",
            resource=resource,
            key=key,
        )
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, or whatever the module raises while importing
        raise DriverLoadError(
            f"cannot import module {module_name!r}{read_as}: {type(exc).__name__}: {exc}",
            resource=resource,
            key=key,
        ) from exc
    target: object = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise DriverLoadError(
                f"module {module_name!r} has no attribute {attr!r}{read_as}",
                resource=resource,
                key=key,
            ) from None
    return target


def _load_entry_point(name: str, *, resource: str, key: str) -> object:
    from importlib.metadata import entry_points

    matches = list(entry_points(group=ENTRY_POINT_GROUP, name=name))
    if len(matches) > 1:
        sources = ", ".join(sorted(f"{e.value} from {_distribution(e)}" for e in matches))
        raise DriverLoadError(
            f"the driver name {name!r} is registered more than once ({sources}); uninstall one "
            "or give the import path of the one you mean",
            resource=resource,
            key=key,
        )
    if not matches:
        known = ", ".join(e.name for e in list_driver_entry_points()) or "none"
        raise DriverLoadError(
            f"no driver named {name!r} in the entry-point group {ENTRY_POINT_GROUP!r} "
            f"(registered: {known}); give an import path such as 'package.module:Factory' "
            "or install the package that provides it",
            resource=resource,
            key=key,
        )
    try:
        return matches[0].load()
    except Exception as exc:
        raise DriverLoadError(
            f"loading entry point {name!r} ({matches[0].value}) failed: {type(exc).__name__}: {exc}",
            resource=resource,
            key=key,
        ) from exc
