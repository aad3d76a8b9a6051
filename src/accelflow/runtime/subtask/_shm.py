"""Array batches between subtasks of one host through a per-channel shared-memory ring.

A NumPy chunk (or :class:`~accelflow.dataflow.Columns` of arrays) is copied once, straight from
the producer's array (strided or not) into the channel's ring; the socket carries only a small
:class:`_Batch` naming where each array lies. The receiver copies each array out of the ring
into memory of its own and sends a credit back on the same socket; the sender reuses ring
space only once its credit came back. A slow receiver therefore blocks the sender when the
ring is full: the ring bounds the memory of a channel (credit-based backpressure).

Measured against pickling the chunk over the Unix socket in ``benchmarks/results/dataplane.txt``
(2x to 8x the throughput for batches of 1024 to 4096 rows of 784 values).

Leaks are impossible by construction: the ring is an anonymous memory file (Linux ``memfd``)
whose descriptor the sender passes to the receiver over the socket itself (``SCM_RIGHTS``),
so it has no name in ``/dev/shm`` and goes away with the last process holding it, whichever
end is killed. A batch is announced only after it is fully written, so a sender killed
mid-write never delivers a torn batch: the receiver sees the socket close instead.

Everything else (lists of Python records, arrays of Python objects, a batch larger than the
ring, platforms without ``memfd``) keeps the pickled path on the same socket.
"""

from __future__ import annotations

import collections
import mmap
import os
import threading
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.reduction import recv_handle, send_handle
from typing import Any

import numpy as np

from accelflow._errors import ChannelClosed, RingError
from accelflow.dataflow import Columns
from accelflow.runtime.subtask import _heartbeat

#: a channel's ring holds at least this many bytes, and at least four times its first batch
RING_BYTES = 32 * 1024 * 1024
#: smaller batches are pickled on the socket (a credit round trip costs more than the copy)
MIN_RING_BATCH = 64 * 1024
#: batches in the ring at once, so that credits never fill the socket back to the sender
MAX_IN_FLIGHT = 64
_ALIGN = 64


@dataclass(frozen=True, slots=True)
class _RingOpen:
    """The ring's descriptor follows this message on the socket."""

    size: int


@dataclass(frozen=True, slots=True)
class _Batch:
    """One chunk in the ring: per array its offset, dtype and shape."""

    arrays: tuple[tuple[int, np.dtype[Any], tuple[int, ...]], ...]
    columns: bool


def _arrays_of(chunk: Any) -> tuple[np.ndarray[Any, Any], ...] | None:
    """The arrays of a chunk that can travel through the ring, or None."""
    if isinstance(chunk, Columns):
        arrays = chunk.columns()
    elif isinstance(chunk, np.ndarray) and type(chunk) is np.ndarray:
        arrays = (chunk,)
    else:
        return None
    if any(a.dtype.hasobject for a in arrays):
        return None
    return arrays


def _aligned(n: int) -> int:
    return max(_ALIGN, (n + _ALIGN - 1) // _ALIGN * _ALIGN)


def ring_fit(head: int, tail: int, size: int, need: int) -> int | None:
    """Where ``need`` bytes fit in a ring of ``size`` bytes holding ``[tail, head)``, possibly
    wrapped (not empty), or None.

    Example:
        >>> ring_fit(60, 20, 100, 30), ring_fit(80, 40, 100, 30), ring_fit(80, 20, 100, 30), ring_fit(10, 60, 100, 60)
        (60, 0, None, None)
    """
    if head > tail:
        if head + need <= size:
            return head
        return 0 if need <= tail else None  # wrap around to the start
    return head if head + need <= tail else None


class ShmSender:
    """The sending end of a direct channel: ``send(chunk)``, ``close()`` (sends the end)."""

    def __init__(self, conn: Connection, ring_bytes: int = RING_BYTES,
                 min_batch: int = MIN_RING_BATCH) -> None:
        self.conn = conn
        self.ring_bytes = ring_bytes
        self.min_batch = min_batch
        self.ring: mmap.mmap | None = None
        self.size = 0
        self.head = 0  # where the next batch goes
        self.in_flight: collections.deque[tuple[int, int]] = collections.deque()  # (start, end)
        #: set while waiting for the receiver's credit (tests watch it)
        self.waiting = threading.Event()
        self.enabled = hasattr(os, "memfd_create")

    @property
    def in_flight_bytes(self) -> int:
        return sum(end - start for start, end in self.in_flight)

    def send(self, chunk: Any) -> None:
        arrays = _arrays_of(chunk) if chunk is not None and self.enabled else None
        need = sum(_aligned(a.nbytes) for a in arrays) if arrays is not None else 0
        if arrays is None or need < self.min_batch or (self.ring is not None and need > self.size):
            self._send(chunk)  # Python records, the end, small, or larger than the ring
            return
        if self.ring is None:
            self._open_ring(max(self.ring_bytes, 4 * need))
        start = self._reserve(need)
        specs, offset = [], start
        for a in arrays:
            self._write(offset, a)
            specs.append((offset, a.dtype, a.shape))
            offset += _aligned(a.nbytes)
        self._send(_Batch(tuple(specs), isinstance(chunk, Columns)))

    def _write(self, offset: int, array: np.ndarray[Any, Any]) -> None:
        assert self.ring is not None
        np.copyto(np.ndarray(array.shape, array.dtype, buffer=self.ring, offset=offset), array)

    def _open_ring(self, size: int) -> None:
        size = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE * mmap.PAGESIZE
        try:
            fd = os.memfd_create("accelflow-channel", os.MFD_CLOEXEC)
        except OSError as exc:
            raise ring_error("make the shared-memory ring of a data channel", size, exc) from exc
        try:
            try:
                os.ftruncate(fd, size)
                self.ring = mmap.mmap(fd, size)
            except OSError as exc:
                raise ring_error("make the shared-memory ring of a data channel", size, exc) from exc
            self._send(_RingOpen(size))
            try:
                send_handle(self.conn, fd, 0)
            except OSError:
                raise ChannelClosed("the downstream subtask closed its data channel") from None
        finally:
            os.close(fd)  # the mapping (and the receiver's copy of the descriptor) keep it
        self.size = size

    def _reserve(self, need: int) -> int:
        """Ring space for ``need`` bytes, waiting for credits while the ring is full."""
        while True:
            self._take_credits(block=False)
            start = self._fit(need)
            if start is not None:
                self.in_flight.append((start, start + need))
                self.head = start + need
                return start
            self.waiting.set()
            try:
                with _heartbeat.current.waiting():  # the receiver's delay, not this subtask's
                    self._take_credits(block=True)
            finally:
                self.waiting.clear()

    def _fit(self, need: int) -> int | None:
        """Where ``need`` bytes fit now (the ring holds ``[tail, head)``, possibly wrapped)."""
        if not self.in_flight:
            self.head = 0
            return 0
        if len(self.in_flight) >= MAX_IN_FLIGHT:
            return None
        return ring_fit(self.head, self.in_flight[0][0], self.size, need)

    def _take_credits(self, *, block: bool) -> None:
        try:
            while block or self.conn.poll():
                self.conn.recv()
                self.in_flight.popleft()
                block = False
        except (EOFError, OSError):
            raise ChannelClosed("the downstream subtask closed its data channel") from None

    def _send(self, message: Any) -> None:
        try:
            with _heartbeat.current.waiting():  # a full socket: the receiver's delay
                self.conn.send(message)
        except OSError:
            raise ChannelClosed("the downstream subtask closed its data channel") from None

    def close(self) -> None:
        try:
            self.conn.close()
        finally:
            if self.ring is not None:
                self.ring.close()
                self.ring = None


class ShmReceiver:
    """The receiving ends of a subtask's direct channels: ``recv(conn)`` gives the next chunk
    (``None`` at the end of that channel's stream)."""

    def __init__(self) -> None:
        self.rings: dict[Connection, mmap.mmap] = {}

    def recv(self, conn: Connection) -> Any:
        """The next chunk from ``conn`` (``None`` ends the stream).

        Raises:
            EOFError: the sender is gone without ending its stream (a peer that dies with
                credits unread resets the connection: that is the same news).
        """
        try:
            message = conn.recv()
        except ConnectionResetError:
            raise EOFError("the sender reset the connection") from None
        if isinstance(message, _RingOpen):
            self.rings[conn] = map_received_ring(conn, message.size, "a data channel", read_only=True)
            message = conn.recv()
        if not isinstance(message, _Batch):
            if message is None:
                self.close(conn)
            return message
        ring = self.rings[conn]
        arrays = [np.ndarray(shape, dtype, buffer=ring, offset=off).copy()
                  for off, dtype, shape in message.arrays]
        try:
            conn.send(1)  # the credit: this batch's ring space is free again
        except OSError:
            pass  # the sender has closed (its end of stream, or EOF, is read next)
        return Columns(arrays) if message.columns else arrays[0]

    def close(self, conn: Connection) -> None:
        ring = self.rings.pop(conn, None)
        if ring is not None:
            ring.close()

    def close_all(self) -> None:
        for conn in list(self.rings):
            self.close(conn)


def map_received_ring(conn: Connection, size: int, what: str, *, read_only: bool = False) -> mmap.mmap:
    """Map the ring of ``size`` bytes whose descriptor comes next on ``conn`` (``send_handle``).

    Raises:
        EOFError: the sender closed or reset the connection.
        RingError: the descriptor could not be taken (none left in this process) or the ring
            not mapped (no memory): this end's fault, named with the fix.
    """
    try:
        fd = recv_handle(conn)
    except ConnectionError:
        raise EOFError("the sender reset the connection") from None
    except (OSError, RuntimeError) as exc:  # RuntimeError: the kernel dropped the descriptor
        raise ring_error(f"take the shared-memory ring of {what}", size, exc) from exc
    try:
        return mmap.mmap(fd, size, access=mmap.ACCESS_READ if read_only else mmap.ACCESS_DEFAULT)
    except OSError as exc:
        raise ring_error(f"map the shared-memory ring of {what}", size, exc) from exc
    finally:
        os.close(fd)


def ring_error(doing: str, size: int, exc: BaseException) -> RingError:
    """The error of a shared-memory ring this process cannot make, pass, take or map: its own
    fault, not a neighbour's (a :class:`~accelflow.RingError`, reported as the job's cause and
    not waited on for a rollback).

    Example:
        >>> ring_error("map the shared-memory ring of a data channel", 32 << 20,
        ...            RuntimeError("received 0 items of ancdata")).args[0][:92]
        'cannot map the shared-memory ring of a data channel (32 MiB): its descriptor was dropped on '
    """
    reason = ("its descriptor was dropped on receipt (Too many open files)" if isinstance(exc, RuntimeError)
              else str(exc))
    return RingError(
        f"cannot {doing} ({size >> 20} MiB): {reason}; with 'Too many open files' raise the "
        "open-file limit (ulimit -n), with 'Cannot allocate memory' free memory or send smaller batches")
