"""What ``map(fn, resident=True)`` and ``map_batches(fn, resident=True)`` hold instead of ``fn``:
the function pickled once, where the job is built, and the key of its instance on a device.

A resident operator's instance lives in the device host of each device it runs on, opened
once per (operator, device) and kept for later attempts and later jobs of a session cluster
(``docs/gpu.md``, "Warm devices and resident models"). Its subtasks never unpickle ``fn``:
they ship their records to the host. Two operators are the same instance when their pickled
bytes and call options are the same, so the bytes must be the same each time ``fn`` is
pickled; :meth:`ResidentFunction.of` pickles it twice to find out.

Example:
    >>> class Scale:
    ...     def map(self, x):
    ...         return 2 * x
    >>> ResidentFunction.of(Scale(), ("map",), "operator 'scale'").label
    'Scale'
"""

from __future__ import annotations

import hashlib
from typing import Any

import cloudpickle

from accelflow._errors import AccelflowInternalError, ConfigError


class ResidentFunction:
    """``blob``: the function (or object, or class) pickled with cloudpickle; ``key``: what
    identifies its instance on a device (the bytes and the call options, hashed); ``label``:
    its name for people (the REST API, ``accelflow cluster status``)."""

    __slots__ = ("blob", "key", "label")

    def __init__(self, blob: bytes, key: str, label: str) -> None:
        self.blob, self.key, self.label = blob, key, label

    @classmethod
    def of(cls, fn: Any, options: tuple[Any, ...], where: str) -> ResidentFunction:
        """``fn`` pickled, with the key of (its bytes, ``options``).

        Raises:
            ConfigError: ``fn`` cannot be pickled, or its bytes differ from one pickling to
                the next (they could not be compared with a resident instance's), naming
                ``where`` (e.g. ``operator 'classify'``).
        """
        try:
            first, second = cloudpickle.dumps(fn), cloudpickle.dumps(fn)
        except Exception as exc:
            raise ConfigError(
                f"resident=True needs an operator that can be pickled (its instance is opened in the "
                f"device's host process), but pickling it failed: {type(exc).__name__}: {exc}", key=where) from exc
        if first != second:
            raise ConfigError(
                "resident=True needs an operator whose pickled bytes are the same each time (they "
                "identify the instance kept on the device), but pickling it twice gave different "
                "bytes, e.g. a lambda or object holding state that changes when it is pickled; make "
                "it a class or module-level function with fixed arguments, or drop resident=True",
                key=where)
        digest = hashlib.sha256(_without_class_ids(first))
        digest.update(repr(options).encode())
        return cls(first, digest.hexdigest()[:16], _label(fn))

    def __call__(self, *args: Any) -> Any:
        raise AccelflowInternalError("a resident operator's function runs in its device host only")

    def __reduce__(self) -> tuple[Any, ...]:
        return ResidentFunction, (self.blob, self.key, self.label)

    def __repr__(self) -> str:
        return f"ResidentFunction({self.label}, key={self.key})"


def _without_class_ids(blob: bytes) -> bytes:
    """``blob`` with the ids cloudpickle gives classes it pickles by value (those of a job
    script) replaced by their order: a fresh uuid per class and process, so the same script
    run again would never find its resident instance."""
    try:
        from cloudpickle import cloudpickle as internals

        ids = {i.encode() for i in internals._DYNAMIC_CLASS_TRACKER_BY_CLASS.values()}
    except (ImportError, AttributeError):  # another cloudpickle: keep the bytes as they are
        return blob
    for n, found in enumerate(sorted((i for i in ids if i in blob), key=blob.find)):
        blob = blob.replace(found, b"%032d" % n)
    return blob


def _label(fn: Any) -> str:
    named = fn if isinstance(fn, type) or callable(fn) and hasattr(fn, "__qualname__") else type(fn)
    return str(getattr(named, "__qualname__", type(fn).__name__))
