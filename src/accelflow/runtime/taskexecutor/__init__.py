"""The TaskExecutor process: drivers once at start-up, slots, one forked process per subtask.

``TaskExecutor`` and ``main`` load on first use (PEP 562), so ``__main__`` can start the
forkserver before it imports them (see ``_early``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from accelflow._exports import lazy_exports

from accelflow.runtime.taskexecutor._early import AUTHKEY_ENV_VAR, start_forkserver, whole_lines
from accelflow.runtime.taskexecutor._trace import TRACE_ENV_VAR, process_started, trace
from accelflow.runtime.taskexecutor import _zygote as zygote  # the zygote's program (stdlib only)

if TYPE_CHECKING:
    from accelflow.runtime.taskexecutor._taskexecutor import TaskExecutor, main

__all__ = [
    "AUTHKEY_ENV_VAR", "TRACE_ENV_VAR", "TaskExecutor", "main", "process_started", "start_forkserver",
    "trace", "whole_lines", "zygote",
]


__getattr__, __dir__ = lazy_exports(globals(), {"._taskexecutor": ("TaskExecutor", "main")})
