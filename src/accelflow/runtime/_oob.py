"""A message and its chunk over a ``Connection``, the chunk's arrays out of band (pickle
protocol 5): between a subtask and the device host of a resident operator.

``conn.send(chunk)`` pickles an array's bytes into the pickle (one copy), and the receiver
copies them out again. Here the pickle holds only the arrays' metadata and each array's
buffer goes to the socket as it is (``send_bytes`` of the buffer), and is received straight
into a fresh ``bytearray`` that the array is rebuilt on (writable, as a chunk from a data
channel is). ``benchmarks/warm.py`` measures it against ``conn.send``.

Example:
    >>> import numpy as np
    >>> from multiprocessing import Pipe
    >>> a, b = Pipe()
    >>> send_chunk(a, "header", np.arange(3))
    >>> recv_chunk(b)
    ('header', array([0, 1, 2]))
"""

from __future__ import annotations

import pickle
from multiprocessing.connection import Connection
from typing import Any


def send_chunk(conn: Connection, header: Any, chunk: Any) -> None:
    """Send ``header`` and ``chunk``: one frame of pickle and sizes, then one per buffer."""
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps((header, chunk), protocol=5, buffer_callback=buffers.append)
    views = [b.raw() for b in buffers]
    conn.send((data, [v.nbytes for v in views]))
    for view in views:
        conn.send_bytes(view)


def recv_chunk(conn: Connection) -> tuple[Any, Any]:
    """What :func:`send_chunk` sent: ``(header, chunk)``.

    Raises:
        EOFError: the other side closed the connection.
    """
    data, sizes = conn.recv()
    buffers = []
    for size in sizes:
        buffer = bytearray(size)
        if size:
            conn.recv_bytes_into(buffer)
        else:
            conn.recv_bytes()
        buffers.append(buffer)
    header, chunk = pickle.loads(data, buffers=buffers)
    return header, chunk
