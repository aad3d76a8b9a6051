"""What a TaskExecutor process does before its own imports: start its forkserver, so the
forkserver's preloads (the subtask runtime, NumPy, cloudpickle) import while this process
imports the rest (drivers, messages) instead of after it, on the way to the first subtask.

Only the standard library here: ``__main__`` imports this module first.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
from multiprocessing import forkserver
from typing import Any

AUTHKEY_ENV_VAR = "ACCELFLOW_AUTHKEY"
#: the subtask runtime, named, not imported: the forkserver imports it (with NumPy), not us
SUBTASK_MODULE = (__package__ or "").rsplit(".", 1)[0] + ".subtask"


class _Module:
    def __init__(self, name: str) -> None:
        self.name = name

    def __reduce__(self) -> tuple[Any, ...]:
        return importlib.import_module, (self.name,)


class SubtaskEntry:
    """``run_subtask`` as a ``Process`` target, pickled by name: the forked child resolves it
    from the module its forkserver preloaded, and the TaskExecutor never imports it."""

    def __reduce__(self) -> tuple[Any, ...]:
        return getattr, (_Module(SUBTASK_MODULE), "run_subtask")

    def __call__(self, *args: Any) -> None:
        importlib.import_module(SUBTASK_MODULE).run_subtask(*args)


def start_forkserver() -> None:
    """Start this process's forkserver, which forks the subtasks (a no-op once it runs).

    ``_forkserver_guard`` first: it makes the forkserver die with this process, and subtasks
    die with the forkserver, so nothing outlives a TaskExecutor that is SIGKILLed. The
    authentication key (still in the environment this early) is kept from the forkserver.
    It returns at once: the forkserver imports its preloads on its own, and the first subtask
    fork waits for them.
    """
    ctx = multiprocessing.get_context("forkserver")
    guard = f"{__package__}._forkserver_guard"  # named, not imported: importing it ties us too
    ctx.set_forkserver_preload([guard, SUBTASK_MODULE, "numpy", "cloudpickle"])
    key = os.environ.pop(AUTHKEY_ENV_VAR, None)
    try:
        forkserver.ensure_running()
    finally:
        if key is not None:
            os.environ[AUTHKEY_ENV_VAR] = key
