"""The data channels' addresses and connections, shared by the processes on both ends: the
launcher names addresses (``relay:<name>`` on the Ray target), the subtask listens and
connects, and the Ray actor's relay carries ``relay:`` channels between actors."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from multiprocessing.connection import Client, Connection

from accelflow._errors import ChannelClosed, TransportError

CONNECT_TIMEOUT_S = 60.0
#: channel addresses with this prefix go through the TaskExecutor's relay (the Ray target):
#: ``relay:<name>`` listens on ``<relay dir>/<name>.sock`` and sends to ``<relay dir>/relay.sock``
RELAY_PREFIX = "relay:"
#: the relay's directory on this machine, set by a relaying TaskExecutor in the subtask's env
RELAY_DIR_ENV_VAR = "ACCELFLOW_RELAY_DIR"
RELAY_SOCKET = "relay.sock"


def channel_path(address: str) -> str:
    """The Unix socket a subtask listens on for ``address`` (a relay address maps into the
    relay directory of this machine)."""
    if address.startswith(RELAY_PREFIX):
        return os.path.join(os.environ[RELAY_DIR_ENV_VAR], address[len(RELAY_PREFIX):] + ".sock")
    return address


def connect_unix(address: str, authkey: bytes, meanwhile: Callable[[], None] | None = None) -> Connection:
    """Connect to a Unix-socket listener, waiting up to :data:`CONNECT_TIMEOUT_S` for it;
    ``meanwhile`` runs between two tries (a subtask takes its commands there: a rollback in
    place ends the wait for a subtask that failed before it listened, or after)."""
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    delay = 0.001
    while True:
        try:
            return Client(address, "AF_UNIX", authkey=authkey)
        except (FileNotFoundError, ConnectionRefusedError):
            if time.monotonic() > deadline:
                raise TransportError(f"downstream subtask at {address} never came up") from None
            if meanwhile is not None:
                meanwhile()
            time.sleep(delay)
            delay = min(delay * 2, 0.01)  # a late listener costs at most 10 ms more
        except (EOFError, ConnectionResetError, BrokenPipeError):  # it ended before it accepted
            raise ChannelClosed(f"downstream subtask at {address} closed its data channel") from None
