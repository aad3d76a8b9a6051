"""A warm subtask process: spawned ahead by a TaskExecutor for one device (never forked: CUDA
cannot survive a fork), with that device's isolation environment (``CUDA_VISIBLE_DEVICES``).

It imports the device framework and creates its CUDA context, the subtask runtime and NumPy
(imported with this module) and the configured modules (``warm.preload``), says
:class:`~accelflow.runtime.WarmReady` on the socket it was started with and waits. The
TaskExecutor takes it for one subtask that holds that device: it sends
:class:`~accelflow.runtime.StartSubtask` and the same socket becomes the subtask's status pipe,
on which it runs :func:`run_subtask` exactly as a forked subtask does. It is never used for a
second subtask: it exits with its subtask.
"""

from __future__ import annotations

import os
import signal
import sys
from multiprocessing.connection import Connection

from accelflow.runtime import (
    WORK_DIR_ENV_VAR, StartSubtask, WarmReady, die_with_parent, expected_parent, keep_tempdir_in, whole_lines,
)
from accelflow.runtime import preload, warm_device
from accelflow.runtime.subtask._runner import run_subtask


def main(argv: list[str] | None = None) -> None:
    """``FD FRAMEWORK PRELOAD_KEY [MODULE ...]``: the socket to the TaskExecutor, what to
    initialise (``warm.framework``), the key that named the modules, the modules."""
    fd, framework, key, *modules = argv if argv is not None else sys.argv[1:]
    # its TaskExecutor's spawning thread, which lives as long as it (killed now if already gone)
    die_with_parent(parent=expected_parent())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the client's to handle
    whole_lines()
    keep_tempdir_in(os.environ.get(WORK_DIR_ENV_VAR))  # its TaskExecutor's: the cluster's work directory
    conn = Connection(int(fd))
    used, note = warm_device(framework)
    preload(modules, key)
    try:
        conn.send(WarmReady(os.getpid(), used, note))
        start = conn.recv()
    except (EOFError, OSError):  # the TaskExecutor closed its pool: never used
        os._exit(0)
    assert isinstance(start, StartSubtask), start
    run_subtask(start.descriptor, conn, start.env, start.watch)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
