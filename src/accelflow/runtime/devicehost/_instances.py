"""One resident operator instance in its device host, and the batches it runs.

Every subtask attached to the instance puts its requests (a chunk each) on the instance's one
queue; one thread takes them in order and runs them:

- ``map``: each request's records one at a time, as a subtask's ``map`` does;
- ``map_batches``: requests of any subtasks together, up to ``batch_size`` records a batch (a
  request that would overflow it starts the next one), waiting at most ``max_wait`` after the
  first for more (without it, for a full batch or a ``flush``), through the device stage with
  ``device=`` (its in-flight batches drained when no request came for ``DRAIN_AFTER_S``). Each
  batch's outputs are split back per request. A batch of one subtask's requests may return
  any number of outputs (they go back as they are, in order); a batch of several subtasks'
  requests needs one output per record to give each its own, else they all get an error.

Each subtask gets its replies in the order of its requests. While a batch runs, the instance
knows it (:attr:`Instance.running`): a batch that takes long has its thread's stack written
where the watchdog of each waiting subtask reads it (:meth:`Instance.where`), so a hung
subtask is reported with the user's frames in this process.
"""

from __future__ import annotations

import logging
import mmap
import os
import pickle
import queue
import sys
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import cloudpickle
import numpy as np

from accelflow._errors import JobError, RemoteError, RingError, encode_error
from accelflow.dataflow import Columns, MapBatchesSpec, RuntimeContext, from_batch, iter_records, to_batch
from accelflow.runtime import Attach, ByValue, HostFailed, ResidentReply, device_memory, send_chunk
from accelflow.runtime.subtask import DRAIN_AFTER_S, WINDOW, DeviceStage, PlainStage, SharedChunks, bind, open_stage

_log = logging.getLogger("accelflow.devicehost")


class Client:
    """One attached subtask's connection and its shared-memory rings (``_resident_ring.py``):
    replies go out under a lock (the instance's thread sends them while the subtask's own
    thread reads its requests)."""

    def __init__(self, conn: Connection, subtask: str, stack_path: str | None = None) -> None:
        self.conn, self.subtask, self.stack_path = conn, subtask, stack_path
        self.lock = threading.Lock()
        self.gone = False  # its connection ended
        self.shared = SharedChunks(WINDOW)

    def reply(self, seq: int, chunk: Any, error: RemoteError | None = None) -> None:
        with self.lock:
            if self.gone:
                return  # it went away (cancelled, failed): it needs no answer
            header = ResidentReply(seq, error, self.shared.share(chunk, seq))  # None: no ring, pickled
            try:
                try:
                    self.shared.send(self.conn, header, chunk)
                except (pickle.PicklingError, AttributeError):  # e.g. records of a by-value class
                    self.shared.send(self.conn, ResidentReply(seq, error), ByValue(chunk))
            except RingError as exc:  # the connection is of no more use: the subtask fails with it
                self._fail(exc)
            except OSError:
                pass  # it went away: as above

    def fail(self, error: BaseException) -> None:
        """Tell the subtask that this host cannot serve it (``error``, as ``HostFailed`` in
        place of its next reply); no reply goes to it after."""
        with self.lock:
            self._fail(error)

    def _fail(self, error: BaseException) -> None:
        if not self.gone:
            self.gone = True
            try:
                send_chunk(self.conn, HostFailed(encode_error(error)), None)
            except OSError:
                pass  # it went away meanwhile

    def read(self, seq: int) -> None:
        """The subtask has read our replies up to ``seq``: their ring space is free again."""
        with self.lock:
            self.shared.release(seq)

    def leave(self) -> None:
        """Its connection ended: unmap its rings (its requests' views still in a batch keep
        theirs mapped until the batch is done)."""
        with self.lock:
            self.gone = True
            self.shared.close()


@dataclass
class Request:
    client: Client
    seq: int
    chunk: Any
    records: int
    flush: bool
    arrived: float = field(default_factory=time.monotonic)
    answered: bool = False

    def answer(self, chunk: Any, error: RemoteError | None = None) -> None:
        """Reply; where ``chunk`` cannot be pickled the error propagates, the request still
        unanswered (the caller answers it with the error)."""
        self.client.reply(self.seq, chunk, error)
        self.answered = True


class Instance:
    """The opened operator of one key: ``users`` (attached clients), ``memory`` (bytes it took
    on the device when opened, None where not measurable) and its batch thread."""

    def __init__(self, attach: Attach) -> None:
        self.key, self.operator, self.options = attach.key, attach.operator, attach.options
        self.since = time.time()
        self.users: set[int] = set()
        self.memory: int | None = None
        self.batches = 0  # run so far
        #: the requests of the batch running now, and since when (time.monotonic())
        self.running: tuple[list[Request], float] | None = None
        self.hung = False  # dropped: a call of its operator never returned
        self.obj, self.fn = bind(cloudpickle.loads(attach.blob), self.options.method)
        self.stage: DeviceStage | PlainStage | None = None
        self.requests: queue.SimpleQueue[Request | None] = queue.SimpleQueue()
        self.in_flight: deque[list[Request]] = deque()  # the requests of each batch in the stage
        self.thread = threading.Thread(target=self._serve, daemon=True, name=f"accelflow-resident-{self.key}")

    def open(self, ctx: RuntimeContext) -> None:
        """``open(ctx)`` of the user's object, measuring the device memory it took."""
        before = device_memory()
        if hasattr(self.obj, "open") and callable(self.obj.open):
            self.obj.open(ctx)
        self.stage = self._stage()
        after = device_memory()
        self.memory = None if after is None else after - (before or 0)
        self.thread.start()

    @property
    def copies_on_receipt(self) -> bool:
        """Whether its requests' arrays are copied out of the subtask's ring as they arrive,
        the ring's space being reused once their outputs are sent: for a ``map``, whose records
        the user's code may keep (as in Flink with object reuse off), and for ``map_batches``
        on ``device="auto"``'s NumPy fallback, whose batch of one request would be a view. Not
        needed for a device stage (it copies each batch to pinned memory, then the device) nor
        for ``map_batches`` without ``device=``, whose batch of several requests is joined, a
        copy, and of one request is copied then (:func:`_own`)."""
        return self.options.kind == "map" or isinstance(self.stage, PlainStage)

    def _stage(self) -> DeviceStage | PlainStage | None:
        o = self.options
        if o.kind != "map_batches" or o.device is None:
            return None
        spec = MapBatchesSpec(self.fn, batch_size=o.batch_size, max_wait=o.max_wait, device=o.device,
                              prefetch=o.prefetch, device_backend=o.device_backend)
        return open_stage(self.fn, spec, self.operator)

    def submit(self, request: Request) -> None:
        self.requests.put(request)

    def drop(self) -> None:
        """Let go of the user's object of an instance whose ``open()`` failed (its thread never
        started, and holds the instance: without this, what ``open()`` took on the device would
        stay until the garbage collector ran)."""
        self.obj = self.stage = None
        del self.fn  # a bound method of the object

    def close(self) -> None:
        """Stop the batch thread (after the requests queued) and call the object's ``close()``."""
        self.requests.put(None)
        if self.thread.is_alive() and self.thread is not threading.current_thread():
            self.thread.join(30)
        if hasattr(self.obj, "close") and callable(self.obj.close):
            try:
                self.obj.close()
            except Exception:
                _log.exception("resident operator %r: close() failed", self.operator)

    # -- the batch thread ----------------------------------------------------------------------
    def _serve(self) -> None:
        carried: Request | None = None
        while True:
            first = carried or self._next(None)
            carried = None
            if first is None:
                self._drain()
                return
            batch, carried = [first], None
            if self.options.kind == "map_batches":
                batch, carried = self._gather(first)
            self._run(batch)
            del first, batch  # views of subtasks' rings: one that left is unmapped once they go

    def _next(self, timeout: float | None) -> Request | None:
        """The next request; with the stage holding batches, drained when none comes soon."""
        while True:
            busy = self.in_flight and (timeout is None or timeout > DRAIN_AFTER_S)
            try:
                return self.requests.get(timeout=DRAIN_AFTER_S if busy else timeout)
            except queue.Empty:
                if not busy:
                    raise
                self._drain()
                if timeout is not None:
                    timeout -= DRAIN_AFTER_S

    def _gather(self, first: Request) -> tuple[list[Request], Request | None]:
        """Requests after ``first`` while they fit ``batch_size`` (until ``max_wait`` or a
        flush); the one that did not fit, to start the next batch."""
        batch, n = [first], first.records
        size, wait = self.options.batch_size, self.options.max_wait
        deadline = None if wait is None else first.arrived + wait
        while n < size and not batch[-1].flush:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            try:
                nxt = self._next(left)
            except queue.Empty:
                break
            if nxt is None:
                self.requests.put(None)  # closing: run what is here first
                break
            if n + nxt.records > size:
                return batch, nxt
            batch.append(nxt)
            n += nxt.records
        return batch, None

    def where(self) -> str:
        """The stack of the thread running this instance's batches, innermost first, as
        ``faulthandler`` writes one (what the watchdog parses), under a line naming the operator."""
        frame = sys._current_frames().get(self.thread.ident or 0)
        frames = traceback.extract_stack(frame)[::-1] if frame is not None else []
        lines = "".join(f'\n  File "{f.filename}", line {f.lineno} in {f.name}' for f in frames)
        return (f"Resident operator {self.operator!r} in its device host (pid {os.getpid()}), the thread "
                f"running its call:{lines}\n")

    def _run(self, batch: list[Request]) -> None:
        members = [r for r in batch if r.records]
        self.batches += bool(members)
        self.running = ([*(r for b in self.in_flight for r in b), *members], time.monotonic())
        try:
            if self.options.kind == "map":
                for r in members:
                    r.answer([self.fn(x) for x in iter_records(r.chunk)])
            elif self.stage is not None:
                results = self.stage.submit([r.chunk for r in members]) if members else []
                if members:
                    self.in_flight.append(members)
                for result in results:
                    self._split(self.in_flight.popleft(), result)
                if batch[-1].flush:
                    self._drain()
            elif members:
                self._split(members, self.fn(_own(to_batch([r.chunk for r in members]))))
        except BaseException as exc:  # the user's error goes to every request not answered
            error = encode_error(exc, with_traceback=True)
            for r in [*(r for b in self.in_flight for r in b), *members]:
                if not r.answered:
                    r.answer([], error)
            self.in_flight.clear()
            if self.stage is not None:
                self.stage = self._stage()  # nothing of the failed batches left in flight
        self.running = None
        for r in batch:
            if not r.records:  # a flush: answered after everything before it
                r.answer([])

    def _drain(self) -> None:
        if self.stage is None or not self.in_flight:
            return
        self.running = ([r for b in self.in_flight for r in b], time.monotonic())
        try:
            for result in self.stage.drain():
                self._split(self.in_flight.popleft(), result)
        finally:
            self.running = None

    def _split(self, members: list[Request], result: Any) -> None:
        """Send each request its part of ``result`` (what ``fn`` returned for their batch)."""
        out = result if isinstance(result, list | Columns) else from_batch(result, self.operator)
        n = sum(r.records for r in members)
        if len(out) != n and len({id(r.client) for r in members}) == 1:
            for r in members[:-1]:  # one subtask's requests: it joins their outputs in order anyway
                r.answer([])
            members[-1].answer(out)
            return
        if len(out) != n:  # the subtask names the operator
            error = encode_error(JobError(
                f"resident map_batches returned {len(out)} outputs for a batch of {n} records of "
                f"{len({id(r.client) for r in members})} subtasks sharing its instance: a "
                "batch of several subtasks' records needs one output per record (in order) to give "
                "each its own; filter before or after the resident operator (see docs/gpu.md)"))
            for r in members:
                r.answer([], error)
            return
        start = 0
        for r in members:
            r.answer(out.slice(start, start + r.records) if isinstance(out, Columns) else out[start:start + r.records])
            start += r.records


def _own(batch: Any) -> Any:
    """``batch``, copied where it is a view of a subtask's ring (a batch of one request's
    array, which ``to_batch`` hands on as it is): the user's code may keep it.

    Example:
        >>> view = np.ndarray((8,), np.uint8, buffer=mmap.mmap(-1, 4096))
        >>> joined = np.concatenate([view, view])
        >>> _own(view) is view, _own(joined) is joined
        (False, True)
    """
    return batch.copy() if isinstance(batch, np.ndarray) and isinstance(batch.base, mmap.mmap) else batch
