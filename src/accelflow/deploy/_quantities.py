"""CPU and memory of the container that hosts the TaskExecutors.

``taskmanager.cpu.cores`` (default: ``taskmanager.numberOfTaskSlots``) and
``taskmanager.memory.process.size`` (a Kubernetes quantity such as ``'2Gi'``) are per
TaskExecutor; the container hosts ``local.number-taskmanager`` of them, so both are
multiplied. Memory is parsed by accelflow's config parser (no ``kubernetes`` client needed).
"""

from __future__ import annotations

import importlib
from fractions import Fraction
from typing import Any

from accelflow._errors import ConfigError, MissingDependencyError
from accelflow.config.keys import (
    NUMBER_OF_TASK_SLOTS,
    NUMBER_TASKMANAGER,
    TASKMANAGER_CPU,
    TASKMANAGER_MEMORY,
)
from accelflow.config import Configuration, memory_bytes

MIB = 2**20
_BINARY_SUFFIXES = tuple((s, 1024**p) for p, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"), 1))
_DECIMAL_SUFFIXES = tuple((s, 1000**p) for p, s in enumerate(("k", "M", "G", "T", "P", "E"), 1))


def kubernetes_module(name: str, *, what: str) -> Any:
    """Import ``name`` (a ``kubernetes`` module) lazily.

    Raises:
        MissingDependencyError: the ``kubernetes`` package is not installed.
    """
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise MissingDependencyError(what, extra="kubernetes") from exc


def container_cpu(config: Configuration) -> Fraction:
    """CPU cores of the container: cores per TaskExecutor times TaskExecutors."""
    cores = config.get_optional(TASKMANAGER_CPU)
    if cores is None:
        cores = Fraction(config.get(NUMBER_OF_TASK_SLOTS))
    return Fraction(cores) * config.get(NUMBER_TASKMANAGER)


def container_memory_bytes(config: Configuration) -> int:
    """Memory of the container in bytes: the per-TaskExecutor size times TaskExecutors.

    Example:
        >>> from accelflow.config import config_from
        >>> container_memory_bytes(config_from(values={"taskmanager.memory.process.size": "2Gi",
        ...                                            "local.number-taskmanager": 3}))
        6442450944

    Raises:
        ConfigError: ``taskmanager.memory.process.size`` is not a positive whole number of
            bytes written as a Kubernetes quantity.
    """
    try:
        size = memory_bytes(config.get(TASKMANAGER_MEMORY))
    except ValueError as exc:  # a Configuration is validated; this guards hand-made ones
        raise ConfigError(str(exc), key=TASKMANAGER_MEMORY.name) from None
    return size * config.get(NUMBER_TASKMANAGER)


def kubernetes_cpu(cores: Fraction) -> str:
    """A Kubernetes CPU quantity: ``"2"``, ``"1500m"``.

    Raises:
        ConfigError: the value is finer than Kubernetes' precision of one millicore.
    """
    if cores.denominator == 1:
        return str(cores.numerator)
    millicores = cores * 1000
    if millicores.denominator != 1:
        raise ConfigError(
            f"gives the container {cores} cores (this value times {NUMBER_TASKMANAGER.name}), "
            "which is not a whole number of millicores (Kubernetes' CPU precision); use e.g. "
            "'0.5' or '1.25'",
            key=TASKMANAGER_CPU.name,
        )
    return f"{millicores.numerator}m"


def kubernetes_memory(size: int) -> str:
    """The shortest exact Kubernetes quantity for ``size`` bytes: ``"4Gi"``, ``"3G"``, ``"1000"``."""
    candidates = [str(size)]
    for suffix, factor in _BINARY_SUFFIXES + _DECIMAL_SUFFIXES:
        if size % factor == 0:
            candidates.append(f"{size // factor}{suffix}")
    return min(candidates, key=len)


def yarn_vcores(cores: Fraction) -> int:
    """YARN vcores: whole numbers only.

    Raises:
        ConfigError: the container's cores are not whole.
    """
    if cores.denominator != 1:
        raise ConfigError(
            f"gives the container {cores} cores (this value times {NUMBER_TASKMANAGER.name}), "
            "but YARN grants whole vcores; choose a value whose product is whole, e.g. '1'",
            key=TASKMANAGER_CPU.name,
        )
    return cores.numerator


def yarn_memory_mib(size: int) -> int:
    """YARN memory in MiB, rounded up so the container never gets less than asked."""
    return -(-size // MIB)
