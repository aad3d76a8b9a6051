"""A message and its chunk over a ``Connection``, the chunk's arrays out of band (pickle
protocol 5): between a subtask and the device host of a resident operator.

``conn.send(chunk)`` pickles an array's bytes into the pickle (a copy), and the receiver
reads the message into a buffer of its own and unpickles it (two more). Here the pickle
(sent with ``conn.send``) holds only the arrays' metadata and sizes; each array's buffer then
goes to the socket as it is, and is read straight into a fresh ``bytearray`` that the array
is rebuilt on (writable, as a chunk from a data channel is). ``benchmarks/warm.py`` measures
both (``benchmarks/results/warm.txt``).

Example:
    >>> import numpy as np
    >>> from multiprocessing import Pipe
    >>> a, b = Pipe()
    >>> send_chunk(a, "header", np.arange(3))
    >>> recv_chunk(b)
    ('header', array([0, 1, 2]))
"""

from __future__ import annotations

import os
import pickle
from multiprocessing.connection import Connection
from typing import Any


def send_chunk(conn: Connection, header: Any, chunk: Any) -> None:
    """Send ``header`` and ``chunk``: one frame of pickle and sizes, then one per buffer."""
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps((header, chunk), protocol=5, buffer_callback=buffers.append)
    views = [b.raw() for b in buffers]
    conn.send((data, [v.nbytes for v in views]))
    fd = conn.fileno()
    for view in views:
        while view:
            view = view[os.write(fd, view):]


def recv_chunk(conn: Connection) -> tuple[Any, Any]:
    """What :func:`send_chunk` sent: ``(header, chunk)``.

    Raises:
        EOFError: the other side closed the connection.
    """
    data, sizes = conn.recv()
    fd = conn.fileno()
    buffers = []
    for size in sizes:
        buffer = bytearray(size)
        view, got = memoryview(buffer), 0
        while got < size:
            n = os.readv(fd, [view[got:]])
            if not n:
                raise EOFError("the connection closed in the middle of a chunk")
            got += n
        buffers.append(buffer)
    header, chunk = pickle.loads(data, buffers=buffers)
    return header, chunk
