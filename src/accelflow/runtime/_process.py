"""Process hygiene shared by every runtime process (session, TaskExecutor, forkserver, subtask).

Dying with the parent (``die_with_parent`` and how a child learns its parent's pid) is
``accelflow._parent``'s, which the embedded Kafka broker shares; re-exported here, as is the
command line of every Python child (:func:`python_command`: without the working directory on
``sys.path``). Keeping
temporary files in the cluster's work directory (:func:`keep_tempdir_in`, see
:mod:`accelflow.runtime._workdirs`). Standard library only: a TaskExecutor imports this first.
"""

from __future__ import annotations

import os
import sys
from multiprocessing import process

from accelflow._parent import (
    PARENT_PID_ENV_VAR, die_with_parent, expected_parent, parent_env, pid_namespace, python_command,
)

__all__ = [
    "PARENT_PID_ENV_VAR", "WORK_DIR_ENV_VAR", "die_with_parent", "expected_parent", "keep_tempdir_in",
    "parent_env", "pid_namespace", "python_command", "whole_lines", "work_dir_env",
]

#: the cluster's work directory, in the environment of the processes a TaskExecutor spawns
#: (warm subtask processes, device hosts: :func:`work_dir_env`)
WORK_DIR_ENV_VAR = "ACCELFLOW_WORK_DIR"
#: the longest path of a Unix socket (``sun_path`` holds 108 bytes with the final NUL)
_MAX_SOCKET_PATH = 107


def whole_lines() -> None:
    """Make this process's stdout and stderr write each line in one piece (line buffering).

    A TaskExecutor, its subtasks and the session cluster share one stdout (a session's log, or
    the client's terminal): block-buffered, a file got 8 KB pieces cut mid-line; unbuffered
    (``PYTHONUNBUFFERED``), ``print(a, b)`` wrote ``a``, the space, ``b`` and the newline
    apart. Either way another process's line landed inside one: ``record 1 2record 5\n``.
    Subtasks forked afterwards (by the forkserver) keep it.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(line_buffering=True, write_through=False)  # type: ignore[union-attr]
        except (AttributeError, ValueError):  # replaced by something else (e.g. an embedding program)
            pass


def keep_tempdir_in(workdir: str | None) -> None:
    """Make ``workdir`` multiprocessing's temporary directory in this process (where a
    forkserver's socket goes, and what ``multiprocessing.util.get_temp_dir`` gives: the
    watchdog's files, the device hosts' sockets, a ``Manager`` of the user's), instead of a
    ``pymp-*`` directory of its own in ``$TMPDIR``.

    multiprocessing removes its ``pymp-*`` when the process exits, but a SIGKILLed process
    cannot: ``$TMPDIR`` kept one per kill. The cluster's work directory goes as a whole when
    the cluster stops, or at the next start when its owner died. Nothing changes when
    ``workdir`` is None, when the directory is chosen already (a second call), or when a
    socket path in ``workdir`` would be too long for a Unix socket.

    Example: the forkserver listens on ``/tmp/accelflow-k2j4x0ab/listener-7b6e5d4c`` instead
    of ``/tmp/pymp-3f9a1c2d/listener-7b6e5d4c``.
    """
    config = process.current_process()._config  # type: ignore[attr-defined]
    if workdir is None or config.get("tempdir") is not None:
        return
    workdir = os.path.abspath(workdir)
    if len(workdir) + len("/listener-12345678") <= _MAX_SOCKET_PATH:
        config["tempdir"] = workdir


def work_dir_env() -> dict[str, str]:
    """What a process this one spawns (a fresh interpreter, which forgets multiprocessing's
    settings) needs to keep its temporary files where this one does: its first call of
    ``keep_tempdir_in(os.environ.get(WORK_DIR_ENV_VAR))`` then does. Empty where this process
    has no such directory chosen.

    Example:
        >>> env = dict(os.environ, **work_dir_env())  # what a TaskExecutor gives a warm process
    """
    tempdir = process.current_process()._config.get("tempdir")  # type: ignore[attr-defined]
    return {} if tempdir is None else {WORK_DIR_ENV_VAR: tempdir}
