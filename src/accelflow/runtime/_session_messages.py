"""The messages between a client and a session cluster (the submission channel), beside
:mod:`._messages`: frozen ``msgspec.Struct`` classes.

:class:`SubmitJob` → :class:`JobAccepted`, then :class:`JobProgress`... and
:class:`JobSucceeded` or :class:`JobFailed`; the client may send ``CancelJob``.
:class:`StatusRequest` → :class:`StatusReply`; :class:`StopRequest` → :class:`Stopping`;
:class:`ConfigRequest` → :class:`ConfigReply`; :class:`TriggerSavepoint` →
:class:`SavepointDone` or :class:`SavepointFailed` (``accelflow savepoint|stop``).
"""

from __future__ import annotations

from typing import Any

from accelflow._errors import RemoteError
from accelflow.runtime._messages import _Message


class SubmitJob(_Message, frozen=True):
    graph_blob: bytes
    config: dict[str, Any]


class JobAccepted(_Message, frozen=True):
    job_id: str
    url: str


class JobProgress(_Message, frozen=True):
    snapshot: dict[str, Any]


class JobSucceeded(_Message, frozen=True):
    result: Any  # a JobResult


class JobFailed(_Message, frozen=True):
    error: RemoteError


class StatusRequest(_Message, frozen=True):
    pass


class StatusReply(_Message, frozen=True):
    overview: dict[str, Any]


class StopRequest(_Message, frozen=True):
    pass


class Stopping(_Message, frozen=True):
    pass


class ConfigRequest(_Message, frozen=True):
    pass


class ConfigReply(_Message, frozen=True):
    config: dict[str, Any]


class TriggerSavepoint(_Message, frozen=True):
    """Take a savepoint of job ``job_id`` in ``target`` (None: the job's
    ``execution.checkpointing.savepoint-dir``); ``stop``: end the job after it (Flink's
    stop-with-savepoint)."""

    job_id: str
    target: str | None = None
    stop: bool = False


class SavepointDone(_Message, frozen=True):
    """The savepoint's directory (once the stopped job has ended, for ``stop``)."""

    path: str


class SavepointFailed(_Message, frozen=True):
    error: RemoteError
