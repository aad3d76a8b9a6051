"""The REST API's HTTP server: the standard library's ``http.server`` with bounded resources.

Why not an ASGI server: the API is a handful of small JSON routes polled by one UI and one
Prometheus; a stdlib server keeps the session cluster free of a web-framework dependency, and
what made the plain ``ThreadingHTTPServer`` fall over is fixed here:

- **A connection reaches a thread only with a complete request.** An accepted connection
  waits in a *waiting room* (one ``selectors`` loop, no thread per connection) that reads,
  without blocking, the request line, the headers and the body (by ``Content-Length``). Only
  then does one of a fixed pool of :data:`WORKERS` threads serve it, from memory. So slow or
  half-open clients (slow-loris: a request line and one header, then nothing) cost a buffer,
  never a worker.
- **Deadlines and caps:** the whole request must arrive within :data:`REQUEST_S` of the
  accept (one deadline, not per read: trickling a byte at a time does not extend it; the
  server answers ``408`` and closes), the request line and headers may have at most
  :data:`MAX_HEADER` bytes (``431``), a body at most :data:`MAX_BODY` (the handler answers
  ``413`` without reading it). A ``Transfer-Encoding`` (chunked) body is not read: the handler
  answers ``411 Length Required`` (every client of this API can send ``Content-Length``).
- **Bounded waiting room:** at most :func:`max_waiting` connections wait at once (the oldest
  is closed to make room), so they can exhaust neither threads nor file descriptors
  (``EMFILE`` on accept also closes the oldest waiter). The listen backlog is 128.
- **Responses** are HTTP/1.0 (one request per connection); each write times out after
  :data:`IO_TIMEOUT_S`. A client that goes away logs one line (``REST: 127.0.0.1:51234
  dropped the connection (BrokenPipeError)``), never a traceback.
"""

from __future__ import annotations

import errno
import io
import json
import logging
import queue
import resource
import selectors
import socket
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

WORKERS = 16
#: seconds from the accept within which the whole request (headers and body) must arrive
REQUEST_S = 10.0
#: seconds each write of a response may block
IO_TIMEOUT_S = 15.0
#: the most bytes of request line and headers
MAX_HEADER = 32 << 10
#: the largest request body read (a savepoint request is a few dozen bytes)
MAX_BODY = 64 << 10
BACKLOG = 128
#: headers of every response, the waiting room's refusals included
SAFE_HEADERS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}
_log = logging.getLogger("accelflow.rest")


class HttpError(Exception):
    """An answer other than 200: its status, message (the JSON ``error``) and headers."""

    def __init__(self, status: HTTPStatus, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


def max_waiting() -> int:
    """How many connections may wait for a complete request: a share of the fd limit."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 512
    return max(8, min(512, (soft - 64) // 2))


def log_dropped(client: Any, why: BaseException | str) -> None:
    where = f"{client[0]}:{client[1]}" if isinstance(client, tuple) and len(client) >= 2 else str(client)
    _log.info("REST: %s dropped the connection (%s)", where,
              why if isinstance(why, str) else type(why).__name__)


def content_length(value: str | bytes | None) -> int | None:
    """The body length a ``Content-Length`` value gives: 0 when absent, None when it is not a
    plain decimal number (``+5``, ``5_0``, ``-1`` and ``0x10`` are not).

    Example:
        >>> content_length("12"), content_length(None), content_length("5_0")
        (12, 0, None)
    """
    if value is None:
        return 0
    text = value.strip()
    return int(text) if text.isdigit() and text.isascii() else None


def frame(data: bytes | bytearray) -> tuple[int, int] | None:
    """``(end of the headers, end of the request)`` once the headers are in, else None.

    The body counts only when ``Content-Length`` is valid and at most :data:`MAX_BODY` and
    there is no ``Transfer-Encoding``; otherwise the request ends with its headers and the
    handler refuses it (400, 411 or 413) from them alone.

    Example:
        >>> frame(b"POST /x HTTP/1.0\\r\\nContent-Length: 2\\r\\n\\r\\n{}")
        (39, 41)
        >>> frame(b"GET / HTTP/1.0\\r\\nHost: a\\r\\n") is None
        True
    """
    ends = [i + len(sep) for sep in (b"\n\r\n", b"\n\n") if (i := data.find(sep)) >= 0]
    if not ends:
        return None
    end = min(ends)
    length: bytes | None = None
    for line in bytes(data[:end]).split(b"\n")[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"transfer-encoding":
            return end, end
        if name == b"content-length" and length is None:
            length = value
    size = content_length(length)
    return end, end + (size if size is not None and size <= MAX_BODY else 0)


@dataclass(slots=True)
class _Parked:
    client: Any
    deadline: float
    data: bytearray = field(default_factory=bytearray)


class RequestHandler(BaseHTTPRequestHandler):
    """Serves a request the waiting room read whole: ``self.request`` is ``(socket, bytes)``;
    ``rfile`` reads those bytes, ``wfile`` writes to the socket."""

    def setup(self) -> None:
        sock, data = self.request
        self.request = self.connection = sock
        self.rfile = io.BytesIO(data)
        self.wfile = sock.makefile("wb")


class BoundedHTTPServer(HTTPServer):
    """An ``HTTPServer`` whose waiting room reads whole requests and whose fixed worker pool
    serves them; its handler must be a :class:`RequestHandler`."""

    request_queue_size = BACKLOG
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], handler: type[RequestHandler]) -> None:
        self._limit = max_waiting()
        self._waiting: OrderedDict[socket.socket, _Parked] = OrderedDict()
        self._lock = threading.Lock()
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._work: queue.SimpleQueue[tuple[socket.socket, bytes, Any] | None] = queue.SimpleQueue()
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
                with self._lock:
                    self._close_oldest_locked()  # make room; the next accept succeeds
            raise

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._lock:
            while len(self._waiting) >= self._limit:
                self._close_oldest_locked()
            request.setblocking(False)
            self._waiting[request] = _Parked(client_address, time.monotonic() + REQUEST_S)
            self._selector.register(request, selectors.EVENT_READ)
        self._wake_w.send(b"\0")

    def _unpark_locked(self, sock: socket.socket) -> None:
        del self._waiting[sock]
        self._selector.unregister(sock)

    def _close_oldest_locked(self) -> None:
        if self._waiting:
            sock = next(iter(self._waiting))
            self._unpark_locked(sock)
            sock.close()

    # -- the waiting room: read whole requests, hand them to the workers, close late ones -----
    def _room(self) -> None:
        while not self._closed.is_set():
            events = self._selector.select(timeout=0.5)
            with self._lock:
                for key, _ in events:
                    sock = key.fileobj
                    if sock is self._wake_r:
                        self._wake_r.recv(4096)
                    elif isinstance(sock, socket.socket) and sock in self._waiting:
                        self._read_locked(sock, self._waiting[sock])
                now = time.monotonic()
                while self._waiting:
                    sock, parked = next(iter(self._waiting.items()))
                    if now < parked.deadline:
                        break  # parked in accept order: the rest are later
                    self._refuse_locked(sock, parked, HTTPStatus.REQUEST_TIMEOUT,
                                        f"the request did not arrive whole within {REQUEST_S:g} s")

    def _read_locked(self, sock: socket.socket, parked: _Parked) -> None:
        why: BaseException | str = "closed mid-request"
        try:
            chunk = sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            chunk, why = b"", exc
        if not chunk:
            self._unpark_locked(sock)
            sock.close()
            if parked.data:  # a connection closed before its first byte is no news
                log_dropped(parked.client, why)
            return
        parked.data += chunk
        framed = frame(parked.data)
        if (framed[0] if framed else len(parked.data)) > MAX_HEADER:
            self._refuse_locked(sock, parked, HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                                f"the request line and headers may have at most {MAX_HEADER} bytes")
        elif framed is not None and len(parked.data) >= framed[1]:
            self._unpark_locked(sock)
            self._work.put((sock, bytes(parked.data), parked.client))

    def _refuse_locked(self, sock: socket.socket, parked: _Parked, status: HTTPStatus, message: str) -> None:
        """Answer ``status`` as far as the socket takes it without blocking, and close."""
        self._unpark_locked(sock)
        if parked.data:  # nothing for a client that never spoke (a port scan, an idle peer)
            body = json.dumps({"error": message}).encode()
            head = [f"HTTP/1.0 {status.value} {status.phrase}", "Content-Type: application/json",
                    f"Content-Length: {len(body)}", "Connection: close",
                    *(f"{name}: {value}" for name, value in SAFE_HEADERS.items())]
            try:
                sock.send("\r\n".join([*head, "", ""]).encode() + body)
                sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        sock.close()

    def _worker(self) -> None:
        while (item := self._work.get()) is not None:
            sock, data, client = item
            try:
                sock.setblocking(True)
                sock.settimeout(IO_TIMEOUT_S)
                self.finish_request((sock, data), client)  # type: ignore[arg-type]
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
