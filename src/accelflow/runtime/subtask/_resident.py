"""The subtask's side of a resident operator (``map``/``map_batches`` with ``resident=True``):
a client of the device host that holds the operator's one instance on this subtask's device.

``open()`` asks the TaskExecutor for the device host of the subtask's device (started on
demand) and attaches to the instance of the operator's key: the host opens it the first time
(``Attached.opened``) and every later subtask, attempt or job with the same operator reuses it.
Each chunk goes to the host as it comes (at most ``batch_size`` records a request), while
fewer than :data:`WINDOW` requests are in flight; with the window full, a ``map_batches``
holds its records back and sends them as whole batches (a busy device gets batches of
``batch_size``, not the pieces the chunks came in). A request's arrays go through a shared-memory ring
(``_resident_ring.py``: one copy in, the socket carries where they lie), other records
pickled on the connection (protocol 5, arrays out of band); the outputs come back the same
way. The host runs the requests of every subtask on the device together, up to
``batch_size`` records a batch, and sends each request's outputs back, in order. A subtask
that must wait for room in its window (a ``map``, or a ``map_batches`` holding a batch back)
first asks the host to run what it holds (``flush``) where its requests in flight hold less
than a batch: the host may be waiting for more records to fill one. A checkpoint barrier and the end of the input
flush and wait for every request (the checkpoint holds no records in flight).

Where the host's connection closes (the host died: its resident instances are gone), the
subtask asks its TaskExecutor how the host ended and fails at once with a
:class:`~accelflow.JobError` naming the host, its pid, its device and its exit code or signal
(not a ``TransportError``, which a subtask takes for a broken data channel and waits for its
rollback on). A host that cannot serve the subtask (it cannot take the subtask's ring) says
why in place of its next reply (``HostFailed``), and the subtask fails with that.
"""

from __future__ import annotations

import os
import time
from collections import deque
from multiprocessing.connection import Client, Connection
from typing import Any

from accelflow._errors import AccelflowError, ConfigError, JobError, TransportError, decode_error
from accelflow.dataflow import (
    Columns, MapBatchesSpec, Positioned, ResidentFunction, ResidentMapBatchesSpec, ResidentMapSpec,
    RuntimeContext, Transformation,
)
from accelflow.resources import info_properties
from accelflow.runtime import (
    HOSTS_ENV_VAR, HOSTS_KEY_ENV_VAR, RESIDENT_STACK_SUFFIX, Attach, Attached, ChainPlan, HostAddress,
    HostFailed, HostRequest, ResidentOptions, ResidentReply, ResidentRequest,
)
from accelflow.runtime.subtask import _heartbeat as heartbeat
from accelflow.runtime.subtask._operators import Operator, join_chunks, runs
from accelflow.runtime.subtask._resident_ring import SharedChunks

#: requests a subtask has in flight at most
WINDOW = 4
#: how long the subtask waits at first, and at most, between two looks for outputs
_POLL_FIRST_S, _POLL_MAX_S = 0.001, 0.02


@runs(ResidentMapSpec, ResidentMapBatchesSpec)
class ResidentOp(Operator):
    def __init__(self, node: Transformation, plan: ChainPlan) -> None:
        super().__init__(node, plan)
        fn = getattr(node.spec, "fn")
        assert isinstance(fn, ResidentFunction)
        self.fn = fn
        spec = node.spec
        if isinstance(spec, MapBatchesSpec):
            self.options = ResidentOptions("map_batches", spec.method, spec.batch_size, spec.max_wait,
                                           spec.device, spec.prefetch, spec.device_backend)
        else:
            self.options = ResidentOptions("map", spec.method)
        self.size = self.options.batch_size if self.options.kind == "map_batches" else 1 << 30
        self.conn: Connection | None = None
        self.shared = SharedChunks(WINDOW)  # the arrays of our requests, and of the host's replies
        self.seq = 0
        self.read = 0  # the replies read, up to this seq
        #: requests in flight, oldest first: (seq, positions of their records or None, records)
        self.in_flight: deque[tuple[int, Any, int]] = deque()
        #: ``map_batches``: records held back while the window is full (:meth:`_pump`)
        self.pending: list[Any] = []
        self.pending_len = 0
        self.flushed = True  # no request since the last flush
        self.outputs: list[Any] = []  # received, not handed on yet
        self.poll_s, self.next_poll = _POLL_FIRST_S, 0.0
        self.device = ""
        #: where the host of our device is, as :func:`_ask_broker` needs it
        self.host: tuple[str, dict[str, str], str] | None = None

    def open(self, ctx: RuntimeContext) -> None:
        resource, shares = self._device(ctx)
        (info, share), = shares.items()
        self.device = f"{resource} {info.address}"
        properties = info_properties(info)
        address = _host_address(resource, properties, self.node.name)
        self.host = (resource, properties, address)
        try:
            self.conn = Client(address, "AF_UNIX", authkey=_hosts_key())
        except OSError as exc:
            raise TransportError(f"operator {self.node.name!r}: cannot reach the device host of "
                                 f"{self.device}: {exc}") from exc
        index = "standby" if ctx.is_standby() else ctx.index_of_this_subtask + 1
        self.conn.send(Attach(self.fn.key, self.fn.blob, self.node.name, self.options,
                              f"{ctx.task_name} ({index}/{ctx.number_of_parallel_subtasks})",
                              resource, properties, share.numerator, share.denominator,
                              ctx.taskexecutor_id, _stack_path()))
        reply = self._recv_control()
        assert isinstance(reply, Attached), reply

    def _device(self, ctx: RuntimeContext) -> tuple[str, Any]:
        for resource in self.node.resources:
            shares = ctx.get_resource_shares(resource)
            if len(shares) == 1:
                return resource, shares
        raise ConfigError(f"resident=True needs one device, but the subtask holds "
                          f"{ {r: len(ctx.get_resource_shares(r)) for r in self.node.resources} }",
                          key=f"operator {self.node.name!r}")

    def _recv_control(self) -> Any:
        assert self.conn is not None
        try:
            reply = self.conn.recv()
        except (EOFError, OSError):
            raise self._host_gone() from None
        if isinstance(reply, HostFailed):  # its message names the operator
            raise decode_error(reply.error)
        return reply

    def _host_gone(self) -> AccelflowError:
        """The error for the host's connection closing: why the host said it cannot serve this
        subtask (a ``HostFailed`` left unread on the connection), or how the host ended, as its
        TaskExecutor (its parent) saw it."""
        context = f"operator {self.node.name!r}"
        said = self._unread_failure()
        if said is not None:
            return decode_error(said.error, context=context)
        assert self.host is not None
        resource, properties, address = self.host
        try:
            reply = _ask_broker(HostRequest(resource, properties, gone=address))
        except (OSError, EOFError) as exc:
            return JobError(f"{context}: the device host of {self.device} went away, and its TaskExecutor "
                            f"is unreachable ({exc}); its resident instances are gone")
        assert isinstance(reply, HostFailed), reply
        return decode_error(reply.error, context=context)

    def _unread_failure(self) -> HostFailed | None:
        """The ``HostFailed`` among what the host sent before it closed the connection."""
        assert self.conn is not None
        try:
            while self.conn.poll(0):
                header, _ = self.shared.recv(self.conn, copy=False)
                if isinstance(header, HostFailed):
                    return header
        except (EOFError, OSError, AccelflowError):
            pass
        return None

    # -- records -------------------------------------------------------------------------------
    def process(self, chunk: Any) -> Any:
        if self.options.kind == "map":
            self._send_chunk(chunk)
        else:
            self.pending.append(chunk)
            self.pending_len += len(chunk)
            self._pump()
        self._receive(wait=False)
        self._pump()
        return self._received()

    def _pump(self) -> None:
        """``map_batches``: send the records held back, at most a batch a request, while fewer
        than :data:`WINDOW` requests are in flight. With the window full they are held back
        (a busy device gets whole batches, not the pieces the chunks came in) until a batch is
        held, then the subtask waits for room."""
        while self.pending_len:
            if len(self.in_flight) >= WINDOW:
                if self.pending_len < self.size:
                    return
                self._make_room()
            self._send_chunk(self._take(min(self.pending_len, self.size)))

    def _take(self, n: int) -> Any:
        """The first ``n`` records held back, as one chunk."""
        taken, need = [], n
        while need:
            head = self.pending[0]
            if len(head) <= need:
                taken.append(self.pending.pop(0))
                need -= len(head)
            else:
                taken.append(_slice(head, 0, need))
                self.pending[0] = _slice(head, need, len(head))
                need = 0
        self.pending_len -= n
        return join_chunks(taken)

    def _send_chunk(self, chunk: Any) -> None:
        positions = chunk.positions if isinstance(chunk, Positioned) else None
        data = chunk.data if isinstance(chunk, Positioned) else chunk
        for start in range(0, len(data), self.size):
            stop = min(start + self.size, len(data))
            piece = data if (start, stop) == (0, len(data)) else _slice(data, start, stop)
            if len(self.in_flight) >= WINDOW:
                self._make_room()
            self._put(piece, positions if positions is None or (start, stop) == (0, len(data))
                      else positions[start:stop], False)

    def _make_room(self) -> None:
        """Wait for the oldest reply; where the requests in flight hold less than a batch, ask
        the host first to run what it holds (``flush``): it may be waiting for more records to
        fill a batch. A flush also empties the host's device pipeline, so a window of whole
        batches is never flushed."""
        if sum(n for _, _, n in self.in_flight) < self.size:
            self._flush_request()
        self._receive(wait=True, until=len(self.in_flight) - WINDOW + 1)

    def _flush_request(self) -> None:
        if not self.flushed:
            self._put([], None, True)

    def _put(self, piece: Any, positions: Any, flush: bool) -> None:
        assert self.conn is not None
        self.seq += 1
        shared = self.shared.share(piece, self.seq)
        try:
            self.shared.send(self.conn, ResidentRequest(self.seq, len(piece), flush, shared, self.read), piece)
        except OSError:
            raise self._host_gone() from None
        self.in_flight.append((self.seq, positions, len(piece)))
        self.flushed = flush
        self.poll_s, self.next_poll = _POLL_FIRST_S, time.monotonic() + _POLL_FIRST_S

    def _receive(self, *, wait: bool, until: int | None = None) -> int:
        """Take the replies that arrived (``wait``: every request's in flight, or ``until`` of
        them) into :attr:`outputs`; how many."""
        assert self.conn is not None
        want = len(self.in_flight) if until is None else until
        got = 0
        while self.in_flight and (got < want if wait else self.conn.poll(0)):
            try:
                reply, chunk = self.shared.recv(self.conn, copy=True)
            except (EOFError, OSError):
                raise self._host_gone() from None
            if isinstance(reply, HostFailed):  # it cannot serve this subtask; the message says why
                raise decode_error(reply.error, context=f"operator {self.node.name!r}")
            assert isinstance(reply, ResidentReply)
            seq, positions, _ = self.in_flight.popleft()
            if reply.seq != seq:
                raise self._out_of_order(reply.seq, seq)
            self.shared.release(seq)  # the host is done with its records
            self.read = seq
            if reply.error is not None:
                raise decode_error(reply.error, context=f"operator {self.node.name!r} (resident on {self.device})")
            got += 1
            if len(chunk):
                self.outputs.append(chunk if positions is None else Positioned(positions, chunk))
        return got

    def _out_of_order(self, got: int, due: int) -> JobError:
        """The error for a reply that is not the one due: the host lost a reply (a bug)."""
        assert self.host is not None
        return JobError(f"operator {self.node.name!r}: its device host of {self.device} ({self.host[2]}) "
                        f"answered request {got} where request {due} was due, a reply lost: an accelflow "
                        "bug, please report it")

    def _received(self) -> Any:
        """The outputs received so far, as one chunk, in order."""
        outputs, self.outputs = self.outputs, []
        return join_chunks(outputs) if outputs else []

    def finish(self) -> Any:
        while self.pending_len:
            if len(self.in_flight) >= WINDOW:
                self._make_room()
            self._send_chunk(self._take(min(self.pending_len, self.size)))
        if self.in_flight:
            self._flush_request()
            self._receive(wait=True)
        return self._received()

    flush = finish  # a barrier: the checkpoint holds no records in flight

    def reset(self) -> None:
        """Take the replies of the requests in flight and drop them (the resident instance
        stays: a rollback in place does not attach again), and the records held back."""
        self.pending, self.pending_len = [], 0
        self.finish()

    def deadline(self) -> float | None:
        return self.next_poll if self.in_flight else None

    def on_deadline(self) -> Any:
        got = self._receive(wait=False)
        self.poll_s = _POLL_FIRST_S if got else min(2 * self.poll_s, _POLL_MAX_S)
        self.next_poll = time.monotonic() + self.poll_s
        self._pump()
        return self._received()

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.shared.close()


def _stack_path() -> str | None:
    """Where the device host writes the stack of a batch of ours that runs long: next to the
    file the watchdog reads this subtask's stacks from (``_watchdog.py``); None: unwatched."""
    dump = heartbeat.current.dump_path
    return None if dump is None else dump + RESIDENT_STACK_SUFFIX


def _slice(chunk: Any, start: int, stop: int) -> Any:
    return chunk.slice(start, stop) if isinstance(chunk, Columns) else chunk[start:stop]


def _hosts_key() -> bytes:
    return bytes.fromhex(os.environ.get(HOSTS_KEY_ENV_VAR, ""))


def _ask_broker(request: HostRequest) -> Any:
    """``request``'s answer from this subtask's TaskExecutor (``$ACCELFLOW_DEVICE_HOSTS``)."""
    with Client(os.environ.get(HOSTS_ENV_VAR, ""), "AF_UNIX", authkey=_hosts_key()) as conn:
        conn.send(request)
        return conn.recv()


def _host_address(resource: str, properties: dict[str, str], operator: str) -> str:
    """The device host of the device ``properties``, from this subtask's TaskExecutor."""
    if not os.environ.get(HOSTS_ENV_VAR):
        raise ConfigError("resident=True needs a TaskExecutor that keeps device hosts (a local, "
                          "session or Ray cluster of this accelflow version)", key=f"operator {operator!r}")
    try:
        reply = _ask_broker(HostRequest(resource, properties))
    except (OSError, EOFError) as exc:
        raise TransportError(f"operator {operator!r}: its TaskExecutor's device hosts are unreachable: {exc}") from exc
    if isinstance(reply, HostFailed):
        raise decode_error(reply.error, context=f"operator {operator!r}")
    assert isinstance(reply, HostAddress), reply
    return reply.address

