"""Running out of file descriptors for real, as under ``ulimit -n``, for the tests of rings that
cannot be made, passed or taken: light (no pytest, no test module), so subtask processes,
device hosts and plain subprocesses import it by reference."""

from __future__ import annotations

import os
import resource


def no_descriptor_left() -> None:
    """Lower this process's open-file limit to its lowest free descriptor: no new descriptor,
    such as a ring's passed over a connection, can be taken. Once lowered, again is a no-op."""
    try:
        free = os.dup(0)
    except OSError:
        return  # lowered already (a batch before)
    os.close(free)
    resource.setrlimit(resource.RLIMIT_NOFILE, (free, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
