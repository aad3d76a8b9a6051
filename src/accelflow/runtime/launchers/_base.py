"""The launcher boundary: how TaskExecutors come to life and how the JobManager talks to them.

The JobManager only sends messages to :class:`TaskExecutorHandle` objects and reads events
``(taskexecutor_id, message)`` from one queue. The local launcher backs this with OS
processes and Unix sockets; a Ray launcher backs it with actors and actor calls.
"""

from __future__ import annotations

import atexit
import os
import queue
import secrets
import shutil
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from accelflow.runtime import Command, TaskExecutorEvent, make_work_dir

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
    """Starts, restarts and stops TaskExecutors for one JobManager.

    Subclasses call :meth:`_set_up` once they can start TaskExecutors (e.g. once connected to
    Ray), which creates what every launcher has: the working directory, the authentication
    key and the event queue, with :meth:`stop` registered to run at exit.
    """

    #: private working directory (sockets, the TaskExecutors' temporary files; arrays only where
    #: there is no memfd), removed by :meth:`stop`, or by the next cluster's start when this
    #: process dies first (:func:`accelflow.runtime.make_work_dir`)
    workdir: Path
    #: the key of every connection between the JobManager, TaskExecutors and subtasks
    authkey: bytes
    #: ``(taskexecutor_id, message)`` events, read by the JobManager's event pump
    events: queue.Queue[Event]

    def _set_up(self) -> None:
        self.workdir = make_work_dir()  # after removing those of clusters whose client died
        self.authkey = secrets.token_bytes(32)
        self.events = queue.Queue()
        atexit.register(self.stop)

    def _torn_down(self) -> None:
        """Remove the working directory and the exit hook (the end of :meth:`stop`)."""
        shutil.rmtree(self.workdir, ignore_errors=True)
        atexit.unregister(self.stop)

    @abstractmethod
    def start(self, ids: list[str]) -> None:
        """Start TaskExecutors with these ids; each reports a ``Registration`` or a
        ``RegistrationFailed`` as an event."""

    def warm_ahead(self, wanted: Mapping[str, tuple[int, int]]) -> None:
        """Before :meth:`start`: the devices the job this cluster is started for wants warm,
        ``{resource: (devices, subtasks per device)}``; the local launcher's TaskExecutors
        spawn their warm processes at start. Others ignore it (a session cluster warms a
        device once it has had work)."""

    @abstractmethod
    def handle(self, te_id: str) -> TaskExecutorHandle: ...

    @abstractmethod
    def channel_address(self, name: str) -> str:
        """Address a subtask listens on for its inputs."""

    @abstractmethod
    def stop(self) -> None:
        """Stop every TaskExecutor (devices released) and remove the working directory."""

    #: how NumPy source arrays reach subtasks on other machines: ``put_array(array)`` gives
    #: an id and a handle the TaskExecutors resolve (Ray's object store); None where every
    #: subtask runs on the client's host and maps the client's shared memory
    put_array: Callable[[Any], tuple[str, Any]] | None = None


def child_environment() -> dict[str, str]:
    """What every TaskExecutor inherits besides the client's environment: the client's import
    path, so modules next to the job script import there too, and ``PYTHONHASHSEED=0``, so
    ``hash()`` agrees across processes."""
    path = [p for p in sys.path if p and os.path.isdir(p)]
    return {"PYTHONHASHSEED": "0", "PYTHONPATH": os.pathsep.join(path)}
