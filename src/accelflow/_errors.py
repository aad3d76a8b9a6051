"""The one error tree of accelflow.

Every error a user can meet is an :class:`AccelflowError`; the CLI turns it into a one-line
message and a non-zero exit code, without a traceback::

    AccelflowError
    ├── ConfigError              a config key, file, CLI argument or env var is wrong
    │                            (carries every problem found, one per key)
    │   └── NotSupportedError    a (Py)Flink method accelflow cannot honour; names the alternative
    ├── DriverLoadError          a driver factory cannot be imported or built
    ├── DiscoveryError           a driver ran but could not discover the devices it was asked for
    ├── CoordinationError        the host coordination file is unusable
    ├── AllocationError          a resource request cannot be met (names the culprit per device)
    ├── DataFormatError          an input file (e.g. IDX) is malformed; names the file
    ├── CheckpointError          a checkpoint or savepoint cannot be read, written or matched
    ├── JobError                 a job failed at run time (user code raised, a TaskExecutor died)
    │   ├── JobCancelledError    the job was cancelled on request
    │   ├── SubtaskHung          a subtask made no progress for heartbeat.timeout (has its stack)
    │   ├── TransportError       a channel between accelflow's own processes broke
    │   │   ├── ChannelClosed    a neighbouring subtask closed its data channel mid-stream
    │   │   └── RingError        this process cannot make or map a shared-memory ring (fails at once)
    │   ├── DeviceFault          a device faulted under a subtask (an application Xid: it stays)
    │   │   └── HardwareFailure  the device failed and is quarantined (a hardware Xid, ECC, lost)
    │   └── DeviceMemoryExceeded a subtask used more device memory than it asked for
    ├── DeploymentError          a Kubernetes/YARN/Ray request cannot be rendered or placed
    ├── MissingDependencyError   an optional extra is needed; names the ``pip install`` to run
    └── AccelflowInternalError   a bug in accelflow itself: please report it

Errors cross process boundaries (subtask, TaskExecutor, session, Ray actor → JobManager, client)
through one codec, :func:`encode_error` and :func:`decode_error`: the receiving side raises the
*same class* with the same attributes (e.g. ``DataFormatError.path``). Any other exception of user
code (a ``ValueError`` in a map) arrives as ``JobError(ValueError)``, a subclass of both (as Ray's
``RayTaskError``). The traceback travels along; the CLI shows it with ``accelflow -v``.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from accelflow._exceptions import class_named, made_again, parts_of, pickles, user_traceback


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


class NotSupportedError(ConfigError, NotImplementedError):
    """A PyFlink or Flink method that accelflow cannot honour (also a ``NotImplementedError``);
    ``key`` names the method, the message what to use instead.

    Example:
        >>> raise NotSupportedError("accelflow runs no JVM: ship Python modules instead",
        ...                         key="StreamExecutionEnvironment.add_jars()")
        Traceback (most recent call last):
        accelflow.NotSupportedError: StreamExecutionEnvironment.add_jars(): accelflow runs no JVM: ship Python modules instead
    """

    @classmethod
    def pyflink(cls, method: str, alternative: str) -> NotSupportedError:
        """The error of the PyFlink ``method`` (``Class.name()``) with what to do instead."""
        return cls(f"accelflow cannot honour this PyFlink method: {alternative}", key=method)


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
    """A job failed while running; the message says which subtask and why. User code's own
    exception arrives as a subclass of both: ``JobError(ValueError)`` (see :func:`decode_error`)."""


class JobCancelledError(JobError):
    """The job was cancelled on request."""


class SubtaskHung(JobError):
    """A subtask was stuck in user or device code (no progress for ``heartbeat.timeout``
    while it had work) and was killed; its TaskExecutor dumped its threads' stacks first.

    Attributes:
        subtask: which subtask, e.g. ``map (2/4)``.
        timeout_s: the ``heartbeat.timeout`` it exceeded.
        stack: every thread's stack when found (``faulthandler``; ``py-spy``'s too where installed).
    """

    def __init__(self, message: str, *, subtask: str, timeout_s: float, stack: str) -> None:
        self.subtask = subtask
        self.timeout_s = timeout_s
        self.stack = stack
        super().__init__(message)


class TransportError(JobError):
    """A data or control channel between accelflow's own processes broke (e.g. a downstream
    subtask never came up, or a relay lost its receiver). Not a bug in user code."""


class ChannelClosed(TransportError):
    """A neighbouring subtask closed its data channel mid-stream: a consequence of its failure (docs/failover.md)."""


class RingError(TransportError):
    """This process cannot make, pass, take or map a shared-memory ring (no descriptor or memory left)."""


class DeviceFault(JobError):
    """A device faulted under the subtask (an NVIDIA application Xid: a bad kernel, not a bad card).

    Attributes:
        device: which device, e.g. ``gpu 0``.
        uuid: its UUID, when known.
        xid: the Xid, when the fault is one.
    """

    def __init__(self, message: str, *, device: str, uuid: str | None = None, xid: int | None = None) -> None:
        self.device, self.uuid, self.xid = device, uuid, xid
        super().__init__(message)


class HardwareFailure(DeviceFault):
    """The device failed (a hardware Xid, ECC, off the bus): quarantined, its subtasks restart elsewhere."""


class DeviceMemoryExceeded(JobError):
    """A subtask used more device memory than its operator asked for (``resources={"gpu":
    {"memory": ...}}``): it failed alone, its device's other subtasks go on.

    Attributes:
        operator: the operator whose request was exceeded.
        requested: the bytes it asked for.
        used: the bytes it held, or asked for, when it failed (``None``: unknown).
    """

    def __init__(self, message: str, *, operator: str, requested: int, used: int | None = None) -> None:
        self.operator, self.requested, self.used = operator, requested, used
        super().__init__(message)


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
        user_traceback: the same without accelflow's own frames (the user's code first);
            ``None`` without a traceback or when no frame is left.
        args: the exception's ``args`` when they pickle, else ``None``.
        context: what failed, e.g. ``subtask map (1/2) on taskexecutor-1 failed``: set where
            :func:`decode_error` raised it, kept when it travels on (session cluster → client).
    """

    class_path: str
    message: str
    attributes: dict[str, Any] = field(default_factory=dict)
    remote_traceback: str | None = None
    user_traceback: str | None = None
    args: tuple[Any, ...] | None = None
    context: str | None = None

    @property
    def class_name(self) -> str:
        return self.class_path.rpartition(":")[2]


#: where :func:`decode_error` keeps the :class:`RemoteError` an exception was made from
_REMOTE = "_remote"


def encode_error(exc: BaseException, *, with_traceback: bool = False) -> RemoteError:
    """``exc`` as a :class:`RemoteError`, keeping its class, ``args`` and picklable attributes
    (and with ``with_traceback``, where it was raised). An exception that :func:`decode_error`
    made travels on as it came, with its context: a session cluster forwards a subtask's error
    to the client unchanged."""
    forwarded = vars(exc).get(_REMOTE)
    if isinstance(forwarded, RemoteError):
        return forwarded
    args, state = parts_of(exc)
    cls = type(exc)
    return RemoteError(
        f"{cls.__module__}:{cls.__qualname__}", str(exc),
        {name: value for name, value in state.items() if pickles(value)},
        "".join(traceback.format_exception(exc)) if with_traceback else None,
        user_traceback(exc) if with_traceback else None,
        args if pickles(args) else None,
    )


def decode_error(error: RemoteError, *, context: str | None = None) -> AccelflowError:
    """The exception to raise for ``error`` on this side, ``context`` saying what failed (e.g.
    ``subtask map (1/2) on taskexecutor-1 failed``):

    - an :class:`AccelflowError` subclass: the same class with the same attributes, its message
      prefixed by the context, the remote traceback in a note;
    - any other :class:`Exception` whose class is importable here (user code raised
      ``ValueError``): an instance of ``JobError(ValueError)``, a subclass of both
      :class:`JobError` and that class (as Ray's ``RayTaskError``), so ``except ValueError``
      and ``except JobError`` both catch it. It has the original's ``args`` and attributes,
      its ``__cause__`` is the original made again, and its message is the context line
      followed by the user's traceback (accelflow's own frames dropped);
    - otherwise (the class cannot be imported or subclassed here, or is no ``Exception``, as
      ``KeyboardInterrupt``): a :class:`JobError` with that message, its ``__cause__`` the
      original made again where that works.

    Example:
        >>> try:
        ...     raise KeyError("user-42")
        ... except KeyError as exc:
        ...     wire = encode_error(exc, with_traceback=True)
        >>> error = decode_error(wire, context="subtask map (1/2) on taskexecutor-1 failed")
        >>> isinstance(error, KeyError), isinstance(error, JobError), error.args
        (True, True, ('user-42',))
        >>> str(error).splitlines()[0], str(error).splitlines()[-1]
        ('subtask map (1/2) on taskexecutor-1 failed', "KeyError: 'user-42'")
    """
    joined = ": ".join(c for c in (context, error.context) if c)
    remote = replace(error, context=joined or None)
    cls = class_named(error.class_path)
    if cls is not None and issubclass(cls, AccelflowError):
        exc = _accelflow_error(cls, remote)
    else:
        exc = _job_error(cls, remote)
    vars(exc)[_REMOTE] = remote
    return exc


def remote_traceback(exc: BaseException) -> str | None:
    """Where ``exc`` was raised, when :func:`decode_error` made it from another process's error
    and that traceback travelled with it; else ``None``."""
    remote = vars(exc).get(_REMOTE)
    return remote.remote_traceback if isinstance(remote, RemoteError) else None


def _accelflow_error(cls: type[AccelflowError], remote: RemoteError) -> AccelflowError:
    exc = cls.__new__(cls)
    Exception.__init__(exc, (f"{remote.context}: " if remote.context else "") + remote.message)
    vars(exc).update(remote.attributes)
    note = f"remote traceback:\n{remote.remote_traceback.rstrip()}" if remote.remote_traceback else None
    if note and note not in getattr(exc, "__notes__", ()):
        exc.add_note(note)
    return exc


def _job_error(cls: type[BaseException] | None, remote: RemoteError) -> JobError:
    args = remote.args if remote.args is not None else (remote.message,)
    original = made_again(cls, args, remote.attributes) if cls is not None else None
    dual = _dual_class(cls) if cls is not None and original is not None else None
    exc = made_again(dual, args, remote.attributes) if dual is not None else None
    if not isinstance(exc, JobError):
        exc = JobError(_job_message(remote))
    exc.__cause__ = original
    return exc


def _job_message(remote: RemoteError) -> str:
    """The context line, then the user's traceback; without one, ``context: Class: message``."""
    head = f"{remote.class_name}: {remote.message}" if remote.message else remote.class_name
    if remote.user_traceback:
        return f"{remote.context or head}\n{remote.user_traceback}"
    return f"{remote.context}: {head}" if remote.context else head


_DUAL_CLASSES: dict[type[BaseException], type[JobError] | None] = {}


def _dual_class(cls: type[BaseException]) -> type[JobError] | None:
    """``JobError(ValueError)``: a subclass of both :class:`JobError` and ``cls``, made once per
    class; ``None`` where ``cls`` is no :class:`Exception` or refuses to be subclassed."""
    if cls not in _DUAL_CLASSES:
        dual: type[JobError] | None = None
        if issubclass(cls, Exception):
            try:
                dual = type(f"JobError({cls.__name__})", (JobError, cls), {
                    "__module__": "accelflow", "__str__": _dual_str, "__reduce__": _dual_reduce,
                    "__doc__": f"A job failed with {cls.__qualname__} (see decode_error).",
                })
            except Exception:  # an incompatible layout or metaclass, an __init_subclass__ that refuses
                dual = None
        _DUAL_CLASSES.setdefault(cls, dual)
    return _DUAL_CLASSES[cls]


def _dual_str(self: BaseException) -> str:
    remote = vars(self).get(_REMOTE)
    return _job_message(remote) if isinstance(remote, RemoteError) else BaseException.__str__(self)


def _dual_reduce(self: BaseException) -> tuple[Any, ...]:
    return decode_error, (vars(self)[_REMOTE],)


__all__ = [
    "AccelflowError",
    "AccelflowInternalError",
    "AllocationError",
    "ChannelClosed",
    "CheckpointError",
    "ConfigError",
    "ConfigProblem",
    "CoordinationError",
    "DataFormatError",
    "DeploymentError",
    "DeviceFault",
    "DeviceMemoryExceeded",
    "DiscoveryError",
    "DriverLoadError",
    "HardwareFailure",
    "JobCancelledError",
    "JobError",
    "MissingDependencyError",
    "NotSupportedError",
    "RemoteError",
    "SubtaskHung",
    "TransportError",
    "decode_error",
    "encode_error",
    "remote_traceback",
]
