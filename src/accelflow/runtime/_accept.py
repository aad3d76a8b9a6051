"""Serving authenticated Unix-socket connections so that one bad client stops no other.

``multiprocessing.connection.Listener.accept`` authenticates inline: a client that fails
the handshake (a wrong key, or killed halfway, e.g. a subtask cancelled while connecting)
raised out of the accept loop and ended it for good, and a client that stalled in the
handshake held everyone else back. Here the listener is made without a key and each
connection is authenticated on its own thread, with the same handshake.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from multiprocessing import AuthenticationError
from multiprocessing.connection import Connection, Listener, answer_challenge, deliver_challenge


def unix_listener(path: str) -> Listener:
    """A listener for :func:`serve_forever` (it authenticates, not the listener)."""
    return Listener(path, "AF_UNIX")


def serve_forever(listener: Listener, authkey: bytes, serve: Callable[[Connection], None],
                  stopped: Callable[[], bool], name: str) -> None:
    """Accept connections until ``stopped()``; each one that passes the handshake is served by
    ``serve(conn)`` on a daemon thread called ``name``; one that fails it is closed."""
    while not stopped():
        try:
            conn = listener.accept()
        except OSError:  # closed (stopping), or e.g. out of file descriptors for a moment
            if stopped():
                return
            time.sleep(0.01)
            continue
        if stopped():  # the wake-up of close_listener
            conn.close()
            return
        threading.Thread(target=_authenticated, args=(conn, authkey, serve), daemon=True, name=name).start()


def _authenticated(conn: Connection, authkey: bytes, serve: Callable[[Connection], None]) -> None:
    try:
        deliver_challenge(conn, authkey)
        answer_challenge(conn, authkey)
    except (AuthenticationError, EOFError, OSError):
        conn.close()
        return
    serve(conn)


def close_listener(listener: Listener) -> None:
    """Close a listener that :func:`serve_forever` serves (its ``stopped()`` already true),
    waking its accept loop first: closing the socket does not end an ``accept`` in progress."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as wake:
            wake.connect(listener.address)
    except OSError:
        pass
    listener.close()
