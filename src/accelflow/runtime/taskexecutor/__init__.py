"""The TaskExecutor process: drivers once at start-up, slots, one forked process per subtask.

``TaskExecutor`` and ``main`` load on first use (PEP 562), so ``__main__`` can start the
forkserver before it imports them (see ``_early``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from accelflow.runtime.taskexecutor._early import AUTHKEY_ENV_VAR, start_forkserver
from accelflow.runtime.taskexecutor._trace import TRACE_ENV_VAR, trace

if TYPE_CHECKING:
    from accelflow.runtime.taskexecutor._taskexecutor import TaskExecutor, main

__all__ = ["AUTHKEY_ENV_VAR", "TRACE_ENV_VAR", "TaskExecutor", "main", "start_forkserver", "trace"]


def __getattr__(name: str) -> Any:
    if name not in ("TaskExecutor", "main"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from accelflow.runtime.taskexecutor import _taskexecutor

    value = getattr(_taskexecutor, name)
    globals()[name] = value
    return value
