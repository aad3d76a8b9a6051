"""The launcher boundary: how TaskExecutors come to life and how the JobManager talks to them.

The JobManager only sends messages to :class:`TaskExecutorHandle` objects and reads events
``(taskexecutor_id, message)`` from one queue. The local launcher backs this with OS
processes and Unix sockets; a Ray launcher backs it with actors and actor calls.
"""

from __future__ import annotations

import queue
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

Event = tuple[str, tuple[Any, ...]]


class TaskExecutorHandle(ABC):
    id: str

    @abstractmethod
    def send(self, message: tuple[Any, ...]) -> None:
        """Send a command; a dead TaskExecutor is reported as a ``("te_lost", ...)`` event.

        Events about a TaskExecutor's end carry the pid of the incarnation they are about, so
        a restarted TaskExecutor with the same id is not mistaken for the dead one:
        ``("te_lost", te_id, pid)`` (its connection dropped) and ``("te_exit", te_id,
        exitcode, pid)`` (its process ended).
        """


class Launcher(ABC):
    """Starts, restarts and stops TaskExecutors for one JobManager."""

    #: private working directory (sockets, spilled arrays), removed by :meth:`stop`
    workdir: Path
    #: where data channels listen; subtask ``address(name)`` gives one endpoint
    events: queue.Queue[Event]

    @abstractmethod
    def start(self, ids: list[str]) -> None:
        """Start TaskExecutors with these ids; each reports ``("register", ...)`` or
        ``("register_failed", ...)`` as an event."""

    @abstractmethod
    def handle(self, te_id: str) -> TaskExecutorHandle: ...

    @abstractmethod
    def channel_address(self, name: str) -> str:
        """Address a subtask listens on for its inputs."""

    @abstractmethod
    def stop(self) -> None:
        """Stop every TaskExecutor (devices released) and remove the working directory."""
