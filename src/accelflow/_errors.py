"""The one error tree of accelflow.

Every error a user can meet is an :class:`AccelflowError`; the CLI turns it into a one-line
message and a non-zero exit code, without a traceback::

    AccelflowError
    ├── ConfigError              a config key, file, CLI argument or env var is wrong
    │                            (carries every problem found, one per key)
    ├── DriverLoadError          a driver factory cannot be imported or built
    ├── DiscoveryError           a driver ran but could not discover the devices it was asked for
    ├── CoordinationError        the host coordination file is unusable
    ├── AllocationError          a resource request cannot be met (names the culprit per device)
    ├── DataFormatError          an input file (e.g. IDX) is malformed; names the file
    ├── CheckpointError          a checkpoint or savepoint cannot be read, written or matched
    ├── JobError                 a job failed at run time (user code raised, a TaskExecutor died)
    │   ├── JobCancelledError    the job was cancelled on request
    │   └── TransportError       a channel between accelflow's own processes broke
    ├── DeploymentError          a Kubernetes/YARN/Ray request cannot be rendered or placed
    ├── MissingDependencyError   an optional extra is needed; names the ``pip install`` to run
    └── AccelflowInternalError   a bug in accelflow itself: please report it

Errors cross process boundaries (TaskExecutor → JobManager, subtask → JobManager, session
cluster → client, Ray actor → client) through one codec, :func:`encode_error` and
:func:`decode_error`: the receiving side raises the *same class* with the same attributes
(e.g. ``DataFormatError.path``), whatever its constructor looks like.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any


class AccelflowError(Exception):
    """Base class of every error accelflow raises on purpose."""


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """One problem with one config key (or argument), e.g. ``external-resource.gpu.amount``."""

    key: str
    message: str
    source: str | None = None

    def __str__(self) -> str:
        where = f" (from {self.source})" if self.source else ""
        return f"{self.key}{where}: {self.message}"


class ConfigError(AccelflowError):
    """One or more config problems, reported together, one line per key.

    Attributes:
        problems: every problem found, in key order.
    """

    def __init__(self, problems: Iterable[ConfigProblem] | str, key: str | None = None) -> None:
        if isinstance(problems, str):
            problems = [ConfigProblem(key or "config", problems)]
        self.problems: tuple[ConfigProblem, ...] = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(p.key for p in self.problems)


class DriverLoadError(AccelflowError):
    """A driver factory could not be imported, found or built.

    Attributes:
        resource: the external resource name, e.g. ``gpu``.
        key: the config key naming the factory.
    """

    def __init__(self, message: str, *, resource: str, key: str) -> None:
        self.resource = resource
        self.key = key
        super().__init__(f"{key}: {message}")


class DiscoveryError(AccelflowError):
    """A driver could not discover the devices it was asked for.

    Attributes:
        resource: the external resource name (may be ``None`` when raised inside a driver; the
            provider fills it in).
    """

    def __init__(self, message: str, *, resource: str | None = None) -> None:
        self.resource = resource
        super().__init__(message)


class CoordinationError(AccelflowError):
    """The coordination file that keeps co-located TaskExecutors apart is unusable.

    Attributes:
        path: the coordination file.
    """

    def __init__(self, message: str, *, path: str) -> None:
        self.path = path
        super().__init__(f"{path}: {message}")


class AllocationError(AccelflowError):
    """A resource request cannot be satisfied.

    Attributes:
        reasons: one line per TaskExecutor/device saying why it does not fit.
    """

    def __init__(self, message: str, reasons: Sequence[str] = ()) -> None:
        self.reasons = tuple(reasons)
        text = message if not self.reasons else message + "\n" + "\n".join(
            f"  {r}" for r in self.reasons
        )
        super().__init__(text)


class DataFormatError(AccelflowError):
    """An input data file is malformed.

    Attributes:
        path: the offending file.
    """

    def __init__(self, message: str, *, path: str) -> None:
        self.path = path
        super().__init__(f"{path}: {message}")


class CheckpointError(AccelflowError):
    """A checkpoint or savepoint cannot be used: missing, incomplete, corrupt, of another
    format or version, or its state does not fit the job restored from it.

    Attributes:
        path: the checkpoint directory or the file inside it that is at fault.
    """

    def __init__(self, message: str, *, path: str) -> None:
        self.path = path
        super().__init__(f"{path}: {message}")


class JobError(AccelflowError):
    """A job failed while running; the message says which subtask and why."""


class JobCancelledError(JobError):
    """The job was cancelled on request."""


class TransportError(JobError):
    """A data or control channel between accelflow's own processes broke (e.g. a downstream
    subtask never came up, or a relay lost its receiver). Not a bug in user code."""


class DeploymentError(AccelflowError):
    """A request to a cluster manager (Kubernetes, YARN, Ray) cannot be rendered or placed."""


class MissingDependencyError(AccelflowError, ImportError):
    """An optional dependency is missing.

    Attributes:
        extra: the accelflow extra that provides it, e.g. ``nvml``.
    """

    def __init__(self, what: str, *, extra: str) -> None:
        self.extra = extra
        super().__init__(f"{what} needs an optional dependency: pip install 'accelflow[{extra}]'")


class AccelflowInternalError(AccelflowError):
    """A bug in accelflow itself. Please report it with the message and traceback."""


@dataclass(frozen=True, slots=True)
class RemoteError:
    """An exception on its way between processes (picklable; see :func:`encode_error`).

    Attributes:
        class_path: ``module:qualname`` of the exception's class.
        message: ``str(exc)``.
        attributes: the exception's own attributes that pickle (e.g. ``path``, ``reasons``).
        remote_traceback: the formatted traceback where it was raised, or ``None``.
    """

    class_path: str
    message: str
    attributes: dict[str, Any] = field(default_factory=dict)
    remote_traceback: str | None = None

    @property
    def class_name(self) -> str:
        return self.class_path.rpartition(":")[2]


def encode_error(exc: BaseException, *, with_traceback: bool = False) -> RemoteError:
    """``exc`` as a :class:`RemoteError`, keeping its class and picklable attributes."""
    import pickle
    import traceback

    attributes: dict[str, Any] = {}
    for name, value in getattr(exc, "__dict__", {}).items():
        try:
            pickle.dumps(value)
        except Exception:
            continue
        attributes[name] = value
    cls = type(exc)
    return RemoteError(
        f"{cls.__module__}:{cls.__qualname__}", str(exc), attributes,
        "".join(traceback.format_exception(exc)) if with_traceback else None,
    )


def decode_error(error: RemoteError, *, context: str | None = None) -> AccelflowError:
    """The exception to raise for ``error`` on this side: the same :class:`AccelflowError`
    subclass with the same attributes, its message prefixed by ``context`` (e.g. ``subtask
    map (1/2) on taskexecutor-1 failed``). Any other exception (user code raised
    ``ValueError``) becomes a :class:`JobError` carrying the remote traceback.
    """
    cls = _accelflow_class(error.class_path)
    prefix = f"{context}: " if context else ""
    if cls is None:
        if error.remote_traceback:
            return JobError(f"{context or 'remote error'}:\n{error.remote_traceback.rstrip()}")
        return JobError(f"{prefix}{error.class_name}: {error.message}")
    exc = cls.__new__(cls)
    Exception.__init__(exc, prefix + error.message)
    try:
        exc.__dict__.update(error.attributes)
    except AttributeError:  # a __slots__ exception: attributes cannot travel
        pass
    if error.remote_traceback:
        exc.add_note("remote traceback:\n" + error.remote_traceback.rstrip())
    return exc


def _accelflow_class(class_path: str) -> type[AccelflowError] | None:
    """The :class:`AccelflowError` subclass named ``module:qualname``; ``None`` for any
    other class (or one that cannot be imported here)."""
    module_name, _, qualname = class_path.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except Exception:
        return None
    if isinstance(obj, type) and issubclass(obj, AccelflowError):
        return obj
    return None


__all__ = [
    "AccelflowError",
    "AccelflowInternalError",
    "AllocationError",
    "CheckpointError",
    "ConfigError",
    "ConfigProblem",
    "CoordinationError",
    "DataFormatError",
    "DeploymentError",
    "DiscoveryError",
    "DriverLoadError",
    "JobCancelledError",
    "JobError",
    "MissingDependencyError",
    "RemoteError",
    "TransportError",
    "decode_error",
    "encode_error",
]
