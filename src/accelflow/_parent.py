"""Dying with the parent: Linux's parent-death signal, without its fork-to-prctl window.

``prctl(PR_SET_PDEATHSIG)`` ties a process to its parent only from the call on: a parent that
dies between the fork (or spawn) and the call leaves the child re-parented (to init or a
subreaper) and never signalled, an orphan that runs on with whatever it holds (a device's
memory). The standard fix: the parent records its own pid before it forks or spawns the child,
the child compares it with ``os.getppid()`` *after* the ``prctl`` and, when they differ (the
parent is gone: no signal will come), signals itself at once.

The expected pid reaches the child by :func:`expected_parent`: recorded at every ``os.fork``
of a process that imported this module (the TaskExecutor's forkserver forking a subtask), or
passed in the environment by a parent that spawns a new interpreter (:func:`parent_env`).

The command line of every such child, :func:`python_command` (``python -P``: the directory it
starts in is not on its ``sys.path``), is here too.

Shared by the runtime's processes (``accelflow.runtime`` re-exports it) and by the embedded
Kafka broker's holder process (``connectors/kafka/_broker.py``), which may not import the
runtime. Standard library only.

Example (a parent spawning a child that must not outlive it; the child's first line ties it)::

    import subprocess, sys

    tie = "from accelflow._parent import *; die_with_parent(parent=expected_parent()); print('tied')"
    child = subprocess.run(python_command("-c", tie), env=dict(os.environ, **parent_env()),
                           capture_output=True, text=True, check=True)
    assert child.stdout == "tied\n"  # its parent (this process) is alive
"""

from __future__ import annotations

import ctypes
import functools
import os
import signal
import sys

#: the pid of the process that spawned this one, set by it (:func:`parent_env`)
PARENT_PID_ENV_VAR = "ACCELFLOW_PARENT_PID"
_PR_SET_PDEATHSIG = 1
#: Python's safe-path flag (3.11+): the working directory (``python -m``) or ``''`` (``-c``)
#: does not go first on ``sys.path``
SAFE_PATH_FLAG = "-P"

_forking_pid: int | None = None  # this process's pid, recorded just before each fork
_forked_by: int | None = None  # in a forked child: the pid of the process that forked it


def _before_fork() -> None:
    global _forking_pid
    _forking_pid = os.getpid()


def _in_child() -> None:
    global _forked_by
    _forked_by = _forking_pid


os.register_at_fork(before=_before_fork, after_in_child=_in_child)


def parent_env() -> dict[str, str]:
    """The environment entry that tells a process this one spawns who its parent is.

    Example: ``subprocess.Popen(argv, env=dict(os.environ, **parent_env()))``; the child
    reads it with :func:`expected_parent`.
    """
    return {PARENT_PID_ENV_VAR: str(os.getpid())}


def expected_parent() -> int | None:
    """The pid this process's parent had when it started this process, or None if unknown.

    A process forked (without ``exec``) from one that imported this module: the forking
    process's pid, recorded before the fork. Otherwise ``$ACCELFLOW_PARENT_PID``
    (:func:`parent_env`). The variable is removed from the environment either way, so that
    the processes this one starts do not inherit a pid that is not their parent's.
    """
    spawned_by = os.environ.pop(PARENT_PID_ENV_VAR, None)
    if _forked_by is not None:
        return _forked_by
    return int(spawned_by) if spawned_by and spawned_by.isdigit() else None


def die_with_parent(sig: int = signal.SIGKILL, parent: int | None = None) -> None:
    """Ask Linux to send ``sig`` to this process when its parent dies (no-op elsewhere).

    Args:
        sig: the signal the parent's death sends.
        parent: the pid the parent had when it started this process (:func:`expected_parent`).
            If the parent has already died (``os.getppid()`` differs once the signal is set up),
            no signal would ever come: the process raises ``sig`` on itself at once, as the
            parent's death would have (and exits with ``128 + sig`` if it survives that: a
            handled signal). None: not checked.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, sig)
    except (OSError, AttributeError):
        return
    if parent is not None and os.getppid() != parent:
        signal.raise_signal(sig)
        os._exit(128 + sig)


def python_command(*args: str) -> list[str]:
    """``[sys.executable, "-P", *args]``: this interpreter, without the working directory on
    ``sys.path``.

    ``python -m module`` and ``python -c code`` put the directory they start in first on
    ``sys.path``: a ``cloudpickle.py`` or ``numpy.py`` lying there (a download folder, a shared
    directory) would be imported by the process instead of the real one and run with its
    rights. Every Python child of accelflow (TaskExecutors and their zygote, warm subtask
    processes, device hosts, the session cluster, the Kafka broker's holder) starts with ``-P``
    instead; modules next to the job script still import there, because the job's directory
    reaches the children on ``PYTHONPATH`` (with the user's own entries), where ``-P`` has no
    effect. Processes started by these through :mod:`multiprocessing` (the forkserver) inherit
    the flag.

    Example:
        >>> python_command("-m", "json.tool")[1:]
        ['-P', '-m', 'json.tool']
    """
    return [sys.executable, SAFE_PATH_FLAG, *args]


@functools.cache  # a process keeps its namespace
def pid_namespace() -> int | None:
    """This process's PID namespace: the inode of ``/proc/self/ns/pid`` (None without
    ``/proc``). A pid recorded by a process of another namespace (a container or a Ray node
    sharing a file or ``$TMPDIR``) names nothing here.

    Example:
        >>> pid_namespace() == os.stat("/proc/self/ns/pid").st_ino
        True
    """
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


def killed_by(returncode: int | None) -> str | None:
    """The signal that ended a process whose return code (as ``subprocess`` and
    ``multiprocessing`` report it: negative for a signal) is ``returncode``, by name; ``None``
    when it exited (or runs on).

    Example:
        >>> killed_by(-9), killed_by(-200), killed_by(1), killed_by(None)
        ('SIGKILL', 'signal 200', None, None)
    """
    if returncode is None or returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"
