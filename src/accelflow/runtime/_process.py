"""Process hygiene shared by every runtime process (session, TaskExecutor, forkserver, subtask).

Dying with the parent (``die_with_parent`` and how a child learns its parent's pid) is
``accelflow._parent``'s, which the embedded Kafka broker shares; re-exported here.
"""

from __future__ import annotations

import sys

from accelflow._parent import PARENT_PID_ENV_VAR, die_with_parent, expected_parent, parent_env

__all__ = ["PARENT_PID_ENV_VAR", "die_with_parent", "expected_parent", "parent_env", "whole_lines"]


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
