"""What ``map(fn, resident=True)`` and ``map_batches(fn, resident=True)`` hold instead of ``fn``:
the function pickled once, where the job is built, and the key of its instance on a device.

A resident operator's instance lives in the device host of each device it runs on, opened
once per (operator, device) and kept for later attempts and later jobs of a session cluster
(``docs/gpu.md``, "Warm devices and resident models"). Its subtasks never unpickle ``fn``:
they ship their records to the host. Two operators are the same instance when their pickled
bytes and call options are the same, so the bytes must be the same each time ``fn`` is
pickled; :meth:`ResidentFunction.of` pickles it twice to find out.

The user's own code travels by value: classes and functions of modules that are neither the
standard library's, an installed package's nor accelflow's (e.g. ``mymodel.Predict`` from a
module next to the job script) are pickled with their code, as cloudpickle pickles a job
script's. So an edited module changes the bytes (a fresh instance, not the old one), and the
device host, a process that outlives jobs, runs the new code rather than the module it
imported for an earlier job. Hashing the module's file for the key alone would not do: the
host would open a "fresh" instance of the class it already imported. What must still go by
name (a module object the code uses as a whole, e.g. ``import helper``, or a module whose
code cloudpickle cannot pickle by value) adds its file's contents to the key.

Example:
    >>> class Scale:
    ...     def map(self, x):
    ...         return 2 * x
    >>> ResidentFunction.of(Scale(), ("map",), "operator 'scale'").label
    'Scale'
"""

from __future__ import annotations

import hashlib
import os
import sys
import sysconfig
import types
from collections.abc import Mapping
from typing import IO, Any

import cloudpickle

from accelflow._errors import AccelflowInternalError, ConfigError
from accelflow.dataflow._pickling import Pickler, dumps
from accelflow.scheduling import format_amount


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
            (first, by_name), (second, _) = _pickled(fn), _pickled(fn)
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
        for module in sorted(by_name, key=lambda m: m.__name__):
            digest.update(module.__name__.encode() + _source(module))
        return cls(first, digest.hexdigest()[:16], _label(fn))

    def __call__(self, *args: Any) -> Any:
        raise AccelflowInternalError("a resident operator's function runs in its device host only")

    def __reduce__(self) -> tuple[Any, ...]:
        return ResidentFunction, (self.blob, self.key, self.label)

    def __repr__(self) -> str:
        return f"ResidentFunction({self.label}, key={self.key})"


def check_one_device(resources: Mapping[str, Any], where: str) -> None:
    """A resident operator asks for (a share of) exactly one device.

    Raises:
        ConfigError: it asks for no device, several resources or more than one device, e.g.
            ``it asks for resources={'gpu': 2}`` (amounts as written, naming ``where``).
    """
    if len(resources) != 1 or any(amount > 1 for amount in resources.values()):
        asked = "{" + ", ".join(f"{r!r}: {format_amount(a)}" for r, a in resources.items()) + "}"
        raise ConfigError(
            "resident=True keeps one instance per device, so the operator must ask for (a share "
            "of) one device, e.g. resources={'gpu': 0.5}; it asks for "
            + (f"resources={asked}" if resources else "nothing"), key=where)


class _UsersByValue(Pickler):
    """Pickles the classes and functions of the user's own modules by value, registering each
    module with cloudpickle as it meets it (``registered``, to undo); ``by_name`` gathers the
    user's modules that still go by name (module objects)."""

    def __init__(self, out: IO[bytes], protocol: int, registered: list[types.ModuleType],
                 by_name: set[types.ModuleType]) -> None:
        super().__init__(out, protocol=protocol)
        self.registered, self.by_name = registered, by_name

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, type | types.FunctionType):
            module = sys.modules.get(getattr(obj, "__module__", None) or "")
            if module is not None and _users(module) and module not in self.registered:
                cloudpickle.register_pickle_by_value(module)
                self.registered.append(module)
        elif isinstance(obj, types.ModuleType) and _users(obj):
            self.by_name.add(obj)
        return super().reducer_override(obj)


def _pickled(fn: Any) -> tuple[bytes, set[types.ModuleType]]:
    """``fn`` pickled with the user's code by value, and the user's modules it names; where
    that fails (e.g. a module function using a lock of its module), ``fn`` pickled as plain
    cloudpickle would, naming every user module whose classes or functions it references."""
    registered: list[types.ModuleType] = []
    by_name: set[types.ModuleType] = set()
    try:
        return dumps(fn, lambda out, protocol: _UsersByValue(out, protocol, registered, by_name)), by_name
    except Exception:  # e.g. a lock in a module-level function's globals: by name, as before
        pass
    finally:
        for module in registered:
            cloudpickle.unregister_pickle_by_value(module)
    return dumps(fn), by_name | set(registered)


def _users(module: types.ModuleType) -> bool:
    """Whether ``module`` is the user's: a file neither in the standard library, an installed
    package nor accelflow (``__main__`` goes by value anyway)."""
    file = getattr(module, "__file__", None)
    if not file or module.__name__ == "__main__":
        return False
    path = os.path.realpath(file)
    return not path.startswith(_NOT_USERS) and f"{os.sep}site-packages{os.sep}" not in path


_NOT_USERS = tuple({os.path.realpath(os.path.dirname(os.path.dirname(__file__))) + os.sep,
                    *(os.path.realpath(sysconfig.get_paths()[k]) + os.sep
                      for k in ("stdlib", "platstdlib", "purelib", "platlib"))})


def _source(module: types.ModuleType) -> bytes:
    """The contents of ``module``'s file (b"" where it cannot be read)."""
    try:
        with open(getattr(module, "__file__", "") or "", "rb") as f:
            return f.read()
    except OSError:
        return b""


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
