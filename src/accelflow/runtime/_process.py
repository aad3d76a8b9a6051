"""Process hygiene shared by every runtime process (session, TaskExecutor, forkserver, subtask)."""

from __future__ import annotations

import ctypes
import signal
import sys

_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask Linux to send ``sig`` to this process when its parent dies (no-op elsewhere)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, sig)
    except (OSError, AttributeError):
        pass


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
