"""``serve_forever``: the Unix-socket servers of the runtime (the local JobManager socket, the
session's submission socket, a Ray actor's relay) keep serving whatever their clients do
wrong in the handshake. Before, ``Listener.accept`` authenticated inline: one client that
failed the handshake ended the accept loop for good (a subtask cancelled while it connected
to its actor's relay hung every later attempt of the job), and one that stalled in it held
back every other client."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Connection
from pathlib import Path

import pytest

from accelflow.runtime import close_listener, serve_forever, unix_listener

KEY = b"k" * 32


@pytest.fixture
def echo_server(tmp_path: Path) -> Iterator[str]:
    """A server answering each message with itself, on a short path (sun_path is limited)."""
    path = str(tmp_path / "s.sock")
    listener = unix_listener(path)
    stopped = threading.Event()

    def echo(conn: Connection) -> None:
        with conn:
            while True:
                try:
                    conn.send(conn.recv())
                except EOFError:
                    return

    thread = threading.Thread(target=serve_forever, args=(listener, KEY, echo, stopped.is_set, "echo"),
                              daemon=True)
    thread.start()
    yield path
    stopped.set()
    close_listener(listener)
    thread.join(5)
    assert not thread.is_alive(), "the accept loop did not end once stopped and closed"


def _echo(path: str, message: str) -> str | None:
    """The server's reply, or None when it did not answer within 10 s (a dead accept loop
    leaves the client waiting in the handshake forever)."""
    replies: list[str] = []

    def ask() -> None:
        with Client(path, "AF_UNIX", authkey=KEY) as conn:
            conn.send(message)
            replies.append(conn.recv())

    thread = threading.Thread(target=ask, daemon=True)
    thread.start()
    thread.join(10)
    return replies[0] if replies else None


def test_a_client_with_a_wrong_key_is_refused_and_the_next_one_served(echo_server: str) -> None:
    with pytest.raises(AuthenticationError):
        Client(echo_server, "AF_UNIX", authkey=b"wrong" * 8)
    assert _echo(echo_server, "after a wrong key") == "after a wrong key"


def test_a_client_gone_in_the_middle_of_the_handshake_stops_nothing(echo_server: str) -> None:
    for _ in range(3):  # e.g. a subtask SIGKILLed while connecting
        raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        raw.connect(echo_server)
        raw.recv(1)  # the challenge has started
        raw.close()
    assert _echo(echo_server, "still here") == "still here"


def test_a_client_stalled_in_the_handshake_holds_back_no_other(echo_server: str) -> None:
    stalled = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stalled.connect(echo_server)  # connected, never answers the challenge
    try:
        assert _echo(echo_server, "not held back") == "not held back"
    finally:
        stalled.close()
