"""The REST API's HTTP server: the standard library's ``http.server`` with bounded resources.

Why not an ASGI server: the API is a handful of small JSON routes polled by one UI and one
Prometheus; a stdlib server keeps the session cluster free of a web-framework dependency, and
the three things that made the plain ``ThreadingHTTPServer`` fall over are fixed here:

- **Idle connections cost no thread.** An accepted connection waits in a *waiting room* (one
  ``selectors`` loop) until its first bytes arrive; only then does one of a fixed pool of
  :data:`WORKERS` threads serve it. A connection that sends nothing within :data:`IDLE_S` is
  closed, and at most :func:`max_waiting` connections wait at once (the oldest is closed to
  make room), so half-open connections can neither exhaust threads nor file descriptors
  (``EMFILE`` on accept also closes the oldest waiter). The listen backlog is 128.
- **Slow clients are bounded:** every read and write of a served connection times out after
  :data:`IO_TIMEOUT_S`; responses are HTTP/1.0 (one request per connection).
- **A client that goes away logs one line** (``REST: 127.0.0.1:51234 dropped the connection
  (BrokenPipeError)``), never a traceback.
"""

from __future__ import annotations

import errno
import logging
import queue
import resource
import selectors
import socket
import threading
import time
from collections import OrderedDict
from http.server import HTTPServer
from typing import Any

WORKERS = 16
IDLE_S = 15.0
IO_TIMEOUT_S = 15.0
BACKLOG = 128
_log = logging.getLogger("accelflow.rest")


def max_waiting() -> int:
    """How many connections may wait for their first bytes: a share of the fd limit."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 512
    return max(8, min(512, (soft - 64) // 2))


def log_dropped(client: Any, exc: BaseException) -> None:
    where = f"{client[0]}:{client[1]}" if isinstance(client, tuple) and len(client) >= 2 else str(client)
    _log.info("REST: %s dropped the connection (%s)", where, type(exc).__name__)


class BoundedHTTPServer(HTTPServer):
    """An ``HTTPServer`` with a waiting room for idle connections and a fixed worker pool."""

    request_queue_size = BACKLOG
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], handler: Any) -> None:
        self._limit = max_waiting()
        self._waiting: OrderedDict[socket.socket, tuple[float, Any]] = OrderedDict()
        self._lock = threading.Lock()
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._work: queue.SimpleQueue[tuple[socket.socket, Any] | None] = queue.SimpleQueue()
        self._closed = threading.Event()
        self._threads = [threading.Thread(target=self._room, daemon=True, name="accelflow-rest-wait")]
        self._threads += [threading.Thread(target=self._worker, daemon=True, name=f"accelflow-rest-{i}")
                          for i in range(WORKERS)]
        super().__init__(address, handler)  # binds (closing everything when that fails)
        for t in self._threads:
            t.start()

    # -- accepting: park the connection --------------------------------------------------------
    def get_request(self) -> tuple[socket.socket, Any]:
        try:
            return super().get_request()
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE):
                self._close_oldest()  # make room; the next accept succeeds
            raise

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._lock:
            while len(self._waiting) >= self._limit:
                self._close_oldest_locked()
            request.setblocking(False)
            self._waiting[request] = (time.monotonic(), client_address)
            self._selector.register(request, selectors.EVENT_READ)
        self._wake_w.send(b"\0")

    def _close_oldest(self) -> None:
        with self._lock:
            self._close_oldest_locked()

    def _close_oldest_locked(self) -> None:
        if self._waiting:
            sock, _ = self._waiting.popitem(last=False)
            self._selector.unregister(sock)
            sock.close()

    # -- the waiting room: hand readable connections to the workers, close idle ones ---------
    def _room(self) -> None:
        while not self._closed.is_set():
            events = self._selector.select(timeout=0.5)
            now = time.monotonic()
            with self._lock:
                for key, _ in events:
                    sock = key.fileobj
                    if sock is self._wake_r:
                        self._wake_r.recv(4096)
                        continue
                    assert isinstance(sock, socket.socket)
                    entry = self._waiting.pop(sock, None)
                    if entry is not None:
                        self._selector.unregister(sock)
                        self._work.put((sock, entry[1]))
                while self._waiting:
                    sock, (since, _) = next(iter(self._waiting.items()))
                    if now - since < IDLE_S:
                        break
                    self._close_oldest_locked()

    def _worker(self) -> None:
        while (item := self._work.get()) is not None:
            sock, client = item
            try:
                sock.setblocking(True)
                sock.settimeout(IO_TIMEOUT_S)
                self.finish_request(sock, client)
            except (ConnectionError, TimeoutError) as exc:
                log_dropped(client, exc)
            except Exception:  # a bug in a route is answered 500 by the handler; this is ours
                _log.exception("REST: internal error while serving %s", client)
            finally:
                self.shutdown_request(sock)

    def server_close(self) -> None:
        self._closed.set()
        super().server_close()
        for _ in range(WORKERS):
            self._work.put(None)
        self._wake_w.send(b"\0")
        if self._threads[0].is_alive():
            self._threads[0].join(2)
        with self._lock:
            while self._waiting:
                self._close_oldest_locked()
            self._selector.close()
        self._wake_r.close()
        self._wake_w.close()


class BoundedHTTPServer6(BoundedHTTPServer):
    address_family = socket.AF_INET6
