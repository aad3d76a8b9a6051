"""Data channels between subtasks: Unix-socket connections on one host, or through the
TaskExecutor's relay (the Ray target), with the same ``send``/``close`` interface."""

from __future__ import annotations

import os
from collections.abc import Callable
from multiprocessing.connection import Connection, Listener
from typing import Any

from accelflow._errors import TransportError
from accelflow.runtime import (
    RELAY_DIR_ENV_VAR, RELAY_PREFIX, RELAY_SOCKET, ChannelDone, ChannelFailed, OpenChannel, channel_path,
    connect_unix,
)
from accelflow.runtime.subtask._shm import ShmSender

def listen(address: str, authkey: bytes) -> Listener:
    return Listener(channel_path(address), "AF_UNIX", authkey=authkey)


def connect(address: str, authkey: bytes, sender: Any = None,
            meanwhile: Callable[[], None] | None = None) -> ShmSender | RelayedChannel:
    """A channel to the subtask listening at ``address``: direct, with array batches in a
    shared-memory ring (:mod:`._shm`); for a relay address, to the TaskExecutor's relay, told
    first which channel the chunks are for and who sends them (the sender's ``SubtaskKey``,
    which a relay failure is reported against). ``meanwhile`` runs while it waits for the
    listener (the runner's commands: a :class:`Rollback` ends the wait, see ``connect_unix``)."""
    if not address.startswith(RELAY_PREFIX):
        return ShmSender(connect_unix(address, authkey, meanwhile))
    name = address[len(RELAY_PREFIX):]
    conn = connect_unix(os.path.join(os.environ[RELAY_DIR_ENV_VAR], RELAY_SOCKET), authkey, meanwhile)
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


def _reason(reply: Any) -> str:
    return reply.reason if isinstance(reply, ChannelFailed) else f"unexpected reply {reply!r}"
