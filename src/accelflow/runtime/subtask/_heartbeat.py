"""A subtask's heartbeat and progress, read by its TaskExecutor's watchdog
(``runtime/taskexecutor/_watchdog.py``), which finds a subtask that is hung.

Four numbers in memory shared with the TaskExecutor (a small file it made before starting
this process, which both map), so watching costs neither process a message:

- ``beat``: written every ``heartbeat.interval`` by a thread of this process. It stops when
  the whole process does (stopped, or a C extension holding the GIL);
- ``progress``: counts the runner's loop, one per chunk, control message or timer;
- ``busy_since``: when the runner entered the user or device code it is in now (reading a
  source, a record, a batch), 0 while it waits for input or commands, while ``open()`` runs,
  and while it waits for a downstream subtask to take its output (backpressure is the
  downstream's delay, not this subtask's);
- ``call_since``: when the heartbeat thread last saw the records of ``accelflow._loops.LOOP``
  move on. ``map``, ``flat_map`` and ``filter`` call user code once per record over a whole
  chunk (up to 1024 records), a Kafka source its deserializers once per message of a poll
  (up to 1024): they put that loop's iterator there, whose length hint (records left) the
  heartbeat thread reads, so a loop of many quick calls is not one long call, at no cost per
  record (no write to the shared memory, no counter).

A subtask is hung when ``beat``, or the later of ``busy_since`` and ``call_since`` while busy,
is older than ``heartbeat.timeout``. Before
killing it, the watchdog sends it ``SIGUSR1``, on which ``faulthandler`` writes every thread's
stack into a file the watchdog reads (it works even when the interpreter is stuck in C code).
"""

from __future__ import annotations

import contextlib
import faulthandler
import mmap
import operator
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any, TextIO

from accelflow._loops import LOOP

BEAT, PROGRESS, BUSY_SINCE, CALL_SINCE = 0, 1, 2, 3
#: the signal on which a subtask writes its stacks (``faulthandler.register``)
DUMP_SIGNAL = signal.SIGUSR1


class Heartbeat:
    """This subtask's side of the watch; ``cell`` None: not watched (every method is cheap)."""

    def __init__(self, cell: Any = None, dump_path: str | None = None, interval: float = 1.0) -> None:
        self.cell = cell
        self.interval = interval
        self.dump_path = dump_path if cell is not None else None  # where the watchdog reads stacks
        #: seconds spent waiting so far (for input, commands or a downstream subtask)
        self.waited = 0.0
        self._dump: TextIO | None = None
        self._stopped = threading.Event()
        if cell is None:
            return
        if dump_path is not None:
            self._dump = open(dump_path, "w", encoding="utf-8")  # kept open: faulthandler writes it
            faulthandler.register(DUMP_SIGNAL, file=self._dump, all_threads=True, chain=False)
        cell[BEAT] = time.monotonic()
        threading.Thread(target=self._beat, name="accelflow-heartbeat", daemon=True).start()

    def _beat(self) -> None:
        loop, left = None, -1  # held: its id is not reused while compared
        while not self._stopped.wait(self.interval):
            now = time.monotonic()
            self.cell[BEAT] = now
            seen = LOOP[0]
            if seen is not loop or operator.length_hint(seen) != left:  # a new call since
                loop, left = seen, operator.length_hint(seen)
                self.cell[CALL_SINCE] = now  # never earlier than the call began (no false hang)

    def tick(self) -> None:
        """A step of the runner's loop: busy from now on (the next call of user code)."""
        if self.cell is not None:
            self.cell[PROGRESS] += 1
            self.cell[BUSY_SINCE] = time.monotonic()

    def idle(self) -> None:
        """Waiting for input or commands: nothing to find hung."""
        if self.cell is not None:
            self.cell[PROGRESS] += 1
            self.cell[BUSY_SINCE] = 0.0

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        """Idle while inside (a wait for input, commands or a downstream subtask), then busy;
        the time it took adds to :attr:`waited`."""
        self.idle()
        began = time.monotonic()
        try:
            yield
        finally:
            self.waited += time.monotonic() - began
            self.tick()

    def wait(self, connections: list[Any], timeout: float | None) -> list[Any]:
        """``multiprocessing.connection.wait``, idle while it waits."""
        from multiprocessing.connection import wait

        with self.waiting():
            return wait(connections, timeout)

    def stop(self) -> None:
        self._stopped.set()


#: this process's heartbeat (one subtask per process): the channels mark their waits on it
current = Heartbeat()


def start(cell: Any, dump_path: str | None, interval: float) -> Heartbeat:
    """Start this subtask's heartbeat and make it :data:`current`. ``cell``: the path of the
    file of the shared numbers (the watchdog's), or the numbers themselves; None: unwatched."""
    global current
    if isinstance(cell, str):
        with open(cell, "r+b") as f:
            cell = memoryview(mmap.mmap(f.fileno(), 0)).cast("d")  # the view keeps the map
    current = Heartbeat(cell, dump_path, interval)
    return current
