"""Data channels between subtasks: Unix-socket connections on one host, or through the
TaskExecutor's relay (the Ray target), with the same ``send``/``close`` interface."""

from __future__ import annotations

import os
import time
from multiprocessing.connection import Client, Connection, Listener
from typing import Any

from accelflow._errors import TransportError
from accelflow.runtime import ChannelDone, ChannelFailed, OpenChannel
from accelflow.runtime.subtask._shm import ShmSender

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


def listen(address: str, authkey: bytes) -> Listener:
    return Listener(channel_path(address), "AF_UNIX", authkey=authkey)


def connect(address: str, authkey: bytes, sender: Any = None) -> ShmSender | RelayedChannel:
    """A channel to the subtask listening at ``address``: direct, with array batches in a
    shared-memory ring (:mod:`._shm`); for a relay address, to the TaskExecutor's relay, told
    first which channel the chunks are for and who sends them (the sender's ``SubtaskKey``,
    which a relay failure is reported against)."""
    if not address.startswith(RELAY_PREFIX):
        return ShmSender(connect_unix(address, authkey))
    name = address[len(RELAY_PREFIX):]
    conn = connect_unix(os.path.join(os.environ[RELAY_DIR_ENV_VAR], RELAY_SOCKET), authkey)
    conn.send(OpenChannel(name, sender))
    return RelayedChannel(conn, name)


class RelayedChannel:
    """A channel through the TaskExecutor's relay. Chunks go as on a direct connection;
    ending the stream (``None``) waits for the relay's :class:`ChannelDone`, so a chunk the relay could
    not deliver fails this sending subtask (naming the channel and why) instead of leaving the
    receiver waiting for an end that never comes."""

    def __init__(self, conn: Connection, name: str) -> None:
        self.conn = conn
        self.name = name

    def send(self, chunk: Any) -> None:
        try:
            self.conn.send(chunk)
        except OSError:
            raise TransportError(self._relay_error()) from None
        if chunk is None:
            try:
                reply = self.conn.recv()
            except (EOFError, OSError):
                reply = ChannelFailed("the relay closed the channel")
            if not isinstance(reply, ChannelDone):
                raise TransportError(f"data channel {self.name}: {_reason(reply)}")

    def _relay_error(self) -> str:
        try:
            if self.conn.poll(1.0):
                return f"data channel {self.name}: {_reason(self.conn.recv())}"
        except (EOFError, OSError):
            pass
        return f"data channel {self.name}: the relay closed the channel"

    def close(self) -> None:
        self.conn.close()


def connect_unix(address: str, authkey: bytes) -> Connection:
    """Connect to a Unix-socket listener, waiting up to :data:`CONNECT_TIMEOUT_S` for it."""
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    delay = 0.001
    while True:
        try:
            return Client(address, "AF_UNIX", authkey=authkey)
        except (FileNotFoundError, ConnectionRefusedError):
            if time.monotonic() > deadline:
                raise TransportError(f"downstream subtask at {address} never came up") from None
            time.sleep(delay)
            delay = min(delay * 2, 0.01)  # a late listener costs at most 10 ms more


def _reason(reply: Any) -> str:
    return reply.reason if isinstance(reply, ChannelFailed) else f"unexpected reply {reply!r}"
