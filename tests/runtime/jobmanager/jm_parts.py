"""What the unit tests of the JobManager's parts share: a launcher that runs no process, the
registrations it sends, and small jobs.

The parts (``CheckpointCoordinator``, ``Deployer``, ``EventPump``, ``Membership``) are the real
ones; only the process boundary is replaced: :class:`ScriptedLauncher` puts on its event queue
what TaskExecutors would send, and records the commands sent to them. Time is a
``ManualClock``: no test here sleeps or starts a thread.
"""

from __future__ import annotations

import itertools
import queue
from pathlib import Path
from typing import Any

from accelflow import Environment
from accelflow.config import config_from
from accelflow.dataflow import build_job_graph
from accelflow.runtime import Command, RegisteredDevice, RegisteredResource, Registration, TaskExecutorEvent
from accelflow.runtime.jobmanager import Job
from accelflow.runtime.launchers import Launcher, TaskExecutorHandle

#: one start of a TaskExecutor: the messages it sends, the error its start raises, or None
#: (it registers as usual)
Start = list[TaskExecutorEvent] | BaseException | None


def registration(te_id: str, pid: int, slots: int = 1, gpus: int = 0) -> Registration:
    """What a TaskExecutor with ``gpus`` GPUs (addresses "0", "1"...) registers."""
    devices = tuple(RegisteredDevice(str(i), {"index": str(i)}) for i in range(gpus))
    return Registration(te_id, pid, slots, (RegisteredResource("gpu", gpus, "gpu", devices=devices),) if gpus else ())


class _Handle(TaskExecutorHandle):
    def __init__(self, te_id: str, sent: list[tuple[str, Command]]) -> None:
        self.id = te_id
        self._sent = sent

    def send(self, message: Command) -> None:
        self._sent.append((self.id, message))


class ScriptedLauncher(Launcher):
    """Starts no process. Each start of a TaskExecutor takes the next entry of ``script[id]``
    (messages put on :attr:`events` as it would send them, or an error :meth:`start` raises);
    without one (or with None), it registers ``slots`` slots and ``gpus`` GPUs under a new pid.
    :attr:`started` lists the ids of every start, :attr:`sent` every ``(id, command)`` sent."""

    def __init__(self, workdir: Path, *, slots: int = 1, gpus: int = 0,
                 script: dict[str, list[Start]] | None = None) -> None:
        self.workdir = workdir
        self.authkey = b"k" * 32
        self.events = queue.Queue()
        self.slots, self.gpus = slots, gpus
        self.script = script or {}
        self.started: list[list[str]] = []
        self.sent: list[tuple[str, Command]] = []
        self._pids = itertools.count(1000)

    def start(self, ids: list[str]) -> None:
        self.started.append(list(ids))
        for te_id in ids:
            starts = self.script.get(te_id)
            start = starts.pop(0) if starts else None
            if isinstance(start, BaseException):
                raise start
            for message in [self.registration(te_id)] if start is None else start:
                self.events.put((te_id, message))

    def registration(self, te_id: str) -> Registration:
        return registration(te_id, next(self._pids), self.slots, self.gpus)

    def handle(self, te_id: str) -> TaskExecutorHandle:
        return _Handle(te_id, self.sent)

    def channel_address(self, name: str) -> str:
        return str(self.workdir / f"{name}.sock")

    def stop(self) -> None:
        pass

    def commands(self, kind: type) -> list[tuple[str, Any]]:
        """The ``(id, command)`` sent so far that are ``kind``s."""
        return [(te_id, c) for te_id, c in self.sent if isinstance(c, kind)]


def job(job_id: str = "job-1", config: dict[str, Any] | None = None, *, gpus: int = 0,
        parallelism: int = 1) -> Job:
    """A job ``sequence -> rebalance -> count -> print`` (two chains: a source chain and one
    more), its ``count`` operator asking for ``gpus`` GPUs per subtask."""
    env = Environment({"parallelism.default": parallelism})
    resources = {"gpu": gpus} if gpus else None
    env.from_sequence(1, 10).rebalance().map(_identity, name="count", resources=resources).print()
    graph = build_job_graph(job_id, list(env._transformations))
    return Job(job_id, graph, config_from(values=config or {}), 0.0)


def _identity(x: Any) -> Any:
    return x
