"""The TaskExecutor process: drivers once at start-up, slots, one forked process per subtask;
as an OS process (``__main__``) or inside a Ray actor (``TaskExecutorActor``, with the relay
that carries the subtasks' data channels between actors).

``TaskExecutor``, ``main`` and ``TaskExecutorActor`` load on first use (PEP 562), so
``__main__`` can start the forkserver before it imports them (see ``_early``), and Ray is
imported only where the actor runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from accelflow._exports import lazy_exports

from accelflow.runtime.taskexecutor._early import AUTHKEY_ENV_VAR, start_forkserver
from accelflow.runtime.taskexecutor._trace import TRACE_ENV_VAR, process_started, trace
from accelflow.runtime.taskexecutor._ahead import write_warm_ahead
from accelflow.runtime.taskexecutor import _zygote as zygote  # the zygote's program (stdlib only)

if TYPE_CHECKING:
    from accelflow.runtime.taskexecutor._ray_actor import TaskExecutorActor
    from accelflow.runtime.taskexecutor._taskexecutor import TaskExecutor, main

__all__ = [
    "AUTHKEY_ENV_VAR", "TRACE_ENV_VAR", "TaskExecutor", "TaskExecutorActor", "main", "process_started", "start_forkserver",
    "trace", "write_warm_ahead", "zygote",
]


__getattr__, __dir__ = lazy_exports(globals(), {"._taskexecutor": ("TaskExecutor", "main"),
                                             "._ray_actor": ("TaskExecutorActor",)})
