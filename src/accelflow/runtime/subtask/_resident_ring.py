"""The arrays of resident requests and replies through shared memory: one ring per direction
of a subtask's connection to its device host.

Each end writes the arrays of the chunks it sends (a NumPy array, or
:class:`~accelflow.dataflow.Columns` of arrays) into a ring of its own, one copy straight from
the array, and the message says where they lie (:class:`~accelflow.runtime.SharedArrays`);
the socket carries no array bytes. The ring is an anonymous memory file (``memfd``, as the
data channels' rings of ``_shm.py``): made at the first chunk worth it, its descriptor passed
once over the connection itself (``SCM_RIGHTS``), no name in ``/dev/shm``, gone with the
last process that maps it, whichever end is killed.

No credits travel: a ring's space is freed by what the protocol says anyway. The subtask's
space of request ``seq`` is free once its reply came (the host is done with the records: a
reply is sent after the batch's outputs are); the host's space of reply ``seq`` is free once
a later request says the subtask has read it (``ResidentRequest.read``). The window of
requests a subtask keeps in flight (``_resident.WINDOW``) bounds both: a ring holds
``WINDOW + 2`` chunks as large as the largest so far (a larger chunk comes with a new ring, the
old one unmapped once the other end is done with its chunks), so a chunk never waits for
space. One that finds none anyway, or holds no arrays (Python records, object arrays), or is
too small to be worth it (under 64 KiB) or too large for a ring (over ``RING_MAX_BYTES / 6``),
is pickled on the connection as before (arrays out of band, ``runtime/_oob.py``). So is every
chunk of an end that could not make a ring (no descriptor left, ``memfd`` refused, no memory
to map it): its rings are off from then on, said once in the log.

The receiver takes a chunk's arrays as views of the ring, or copies (``recv(copy=True)``). The
host copies what the user's code gets, which it may keep (as Flink with object reuse off): a
``map``'s records as they arrive, a ``map_batches`` batch as it is made (several requests are
joined, a copy; one is copied); a device stage copies each batch to pinned memory, then the
device. The subtask copies its outputs out, as their space is reused.

Example:
    >>> import numpy as np
    >>> from multiprocessing import Pipe
    >>> from accelflow.runtime import ResidentReply
    >>> a, b = Pipe()
    >>> mine, theirs = SharedChunks(slots=4), SharedChunks(slots=4)
    >>> batch = np.arange(100_000, dtype=np.uint8)
    >>> mine.send(a, ResidentReply(1, shared=mine.share(batch, 1)), batch)
    >>> reply, chunk = theirs.recv(b, copy=True)
    >>> reply.shared.arrays[0][0], bool((chunk == batch).all())
    (0, True)
    >>> mine.release(1); mine.close(); theirs.close()
"""

from __future__ import annotations

import logging
import mmap
import os
import socket
from collections import deque
from multiprocessing.connection import Connection
from multiprocessing.reduction import sendfds
from typing import Any

import numpy as np

from accelflow.dataflow import Columns
from accelflow.runtime import SharedArrays, recv_chunk, send_chunk
from accelflow.runtime.subtask._shm import MIN_RING_BATCH, _aligned, _arrays_of, map_received_ring, ring_error, ring_fit

_log = logging.getLogger("accelflow.resident")

#: a ring holds at least, and at most, this many bytes
RING_MIN_BYTES, RING_MAX_BYTES = 4 * 1024 * 1024, 512 * 1024 * 1024


class SharedChunks:
    """One end of a resident connection: the ring it writes its chunks' arrays into (made on
    first use) and the other end's ring it reads from.

    Args:
        slots: chunks in flight at most (a ring holds ``slots + 2`` of its largest chunk).
        min_batch: chunks of fewer bytes are pickled on the connection.
    """

    def __init__(self, slots: int, min_batch: int = MIN_RING_BATCH) -> None:
        self.slots, self.min_batch = slots, min_batch
        self.enabled = hasattr(os, "memfd_create")
        self.ring: mmap.mmap | None = None
        self.fd = -1  # the ring's descriptor, for the other end
        self.size = 0
        self.head = 0  # where the next chunk goes
        self.used: deque[tuple[int, int, int]] = deque()  # (tag, start, end), oldest first
        self.peer: mmap.mmap | None = None

    # -- the sending side ----------------------------------------------------------------------
    def share(self, chunk: Any, tag: int) -> SharedArrays | None:
        """Copy ``chunk``'s arrays into the ring, their space tagged ``tag`` until
        :meth:`release`; where they lie, or None: ``chunk`` goes pickled."""
        arrays = _arrays_of(chunk) if self.enabled and chunk is not None else None
        if arrays is None:
            return None
        need = sum(_aligned(a.nbytes) for a in arrays)
        if need < self.min_batch or need * (self.slots + 2) > RING_MAX_BYTES:
            return None
        try:
            new = self._open(need) if need * (self.slots + 2) > self.size else 0
        except OSError as exc:  # no descriptor left, memfd refused, no memory for the mapping
            self._switch_off(exc)
            return None
        start = 0 if new else self._fit(need)  # a new ring is announced by this chunk: it goes in
        if start is None:
            return None
        assert self.ring is not None
        specs, offset = [], start
        for a in arrays:
            np.copyto(np.ndarray(a.shape, a.dtype, buffer=self.ring, offset=offset), a)
            specs.append((offset, a.dtype, a.shape))
            offset += _aligned(a.nbytes)
        self.used.append((tag, start, start + need))
        self.head = start + need
        return SharedArrays(tuple(specs), isinstance(chunk, Columns), new)

    def _open(self, need: int) -> int:
        """A first ring, or a larger one instead of the old (the other end maps both until it
        is done with the old one's chunks); its size."""
        self._close_ring()
        size = max(RING_MIN_BYTES, (self.slots + 2) * need)
        size = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE * mmap.PAGESIZE
        self.fd = os.memfd_create("accelflow-resident", os.MFD_CLOEXEC)
        os.ftruncate(self.fd, size)
        self.ring, self.size = mmap.mmap(self.fd, size), size
        return size

    def _switch_off(self, exc: OSError) -> None:
        """No ring could be made: every later chunk of this end goes pickled on the connection
        (as without rings), said once in the log."""
        self._close_ring()
        self.enabled = False
        _log.warning("resident requests and replies: cannot make a shared-memory ring (%s); this "
                     "connection's chunks go pickled over it from now on (slower, same results)", exc)

    def _fit(self, need: int) -> int | None:
        """Where ``need`` bytes fit now (the ring holds ``[tail, head)``, possibly wrapped)."""
        if not self.used:
            return 0 if need <= self.size else None
        return ring_fit(self.head, self.used[0][1], self.size, need)

    def release(self, tag: int) -> None:
        """The other end is done with every chunk tagged up to ``tag``: their space is free."""
        while self.used and self.used[0][0] <= tag:
            self.used.popleft()

    def send(self, conn: Connection, header: Any, chunk: Any) -> None:
        """Send ``header`` (with ``shared`` from :meth:`share`, or None), then the new ring's
        descriptor, or ``chunk`` pickled where it is not shared.

        Raises:
            OSError: the connection is gone.
            RingError: the new ring's descriptor cannot be passed (no descriptor left for the
                socket that passes it): found before anything is sent, so the connection can
                still say why.
        """
        shared: SharedArrays | None = header.shared
        if shared is None or not shared.ring:
            send_chunk(conn, header, None if shared is not None else chunk)
            return
        try:  # what send_handle() does, its socket made first
            sock = socket.fromfd(conn.fileno(), socket.AF_UNIX, socket.SOCK_STREAM)
        except OSError as exc:
            raise ring_error("pass the shared-memory ring of resident requests or replies", shared.ring, exc) from exc
        with sock:
            send_chunk(conn, header, None)
            sendfds(sock, [self.fd])

    # -- the receiving side --------------------------------------------------------------------
    def recv(self, conn: Connection, *, copy: bool) -> tuple[Any, Any]:
        """The next ``(header, chunk)`` from ``conn``; a shared chunk's arrays are views of the
        other end's ring, or copies (``copy``).

        Raises:
            EOFError: the other end closed the connection.
            RingError: this end cannot take or map the other end's new ring.
        """
        header, chunk = recv_chunk(conn)
        shared: SharedArrays | None = getattr(header, "shared", None)
        if shared is None:
            return header, chunk
        if shared.ring:  # the old one: unmapped once its last view goes
            self.peer = map_received_ring(conn, shared.ring, "resident requests or replies")
        assert self.peer is not None
        arrays = [np.ndarray(shape, dtype, buffer=self.peer, offset=offset) for offset, dtype, shape in shared.arrays]
        if copy:
            arrays = [a.copy() for a in arrays]
        return header, Columns(arrays) if shared.columns else arrays[0]

    def close(self) -> None:
        """Unmap this end's ring, close its descriptor, and let go of the other end's ring (an
        array that is a view of it keeps it mapped, as its ``base``: unmapped once the last one
        goes; ``mmap.close()`` would leave such views dangling)."""
        self.peer = None
        self._close_ring()

    def _close_ring(self) -> None:
        if self.ring is not None:
            self.ring.close()
            self.ring = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.size = self.head = 0
        self.used.clear()
