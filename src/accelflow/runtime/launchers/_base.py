"""The launcher boundary: how TaskExecutors come to life and how the JobManager talks to them.

The JobManager only sends messages to :class:`TaskExecutorHandle` objects and reads events
``(taskexecutor_id, message)`` from one queue. The local launcher backs this with OS
processes and Unix sockets; a Ray launcher backs it with actors and actor calls.
"""

from __future__ import annotations

import queue
from abc import ABC, abstractmethod
from pathlib import Path

from accelflow.runtime import Command, TaskExecutorEvent

#: ``(taskexecutor_id, message)``
Event = tuple[str, TaskExecutorEvent]


class TaskExecutorHandle(ABC):
    id: str

    @abstractmethod
    def send(self, message: Command) -> None:
        """Send a command; a dead TaskExecutor is reported as a
        :class:`~accelflow.runtime.TaskExecutorLost` event (see :mod:`accelflow.runtime._messages`).
        """


class Launcher(ABC):
    """Starts, restarts and stops TaskExecutors for one JobManager."""

    #: private working directory (sockets; arrays only where there is no memfd), removed by :meth:`stop`
    workdir: Path
    #: where data channels listen; subtask ``address(name)`` gives one endpoint
    events: queue.Queue[Event]

    @abstractmethod
    def start(self, ids: list[str]) -> None:
        """Start TaskExecutors with these ids; each reports a ``Registration`` or a
        ``RegistrationFailed`` as an event."""

    @abstractmethod
    def handle(self, te_id: str) -> TaskExecutorHandle: ...

    @abstractmethod
    def channel_address(self, name: str) -> str:
        """Address a subtask listens on for its inputs."""

    @abstractmethod
    def stop(self) -> None:
        """Stop every TaskExecutor (devices released) and remove the working directory."""
