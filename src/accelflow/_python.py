"""The command line of every Python process accelflow starts (:func:`python_command`).

Shared by the runtime's processes (``accelflow.runtime`` re-exports it), the session cluster's
command and the embedded Kafka broker's holder process. Standard library only.
"""

from __future__ import annotations

import sys

#: Python's safe-path flag (3.11+): the working directory (``python -m``) or ``''`` (``-c``)
#: does not go first on ``sys.path``
SAFE_PATH_FLAG = "-P"


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
        >>> python_command("-m", "accelflow.runtime.service")[1:]
        ['-P', '-m', 'accelflow.runtime.service']
    """
    return [sys.executable, SAFE_PATH_FLAG, *args]
