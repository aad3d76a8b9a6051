"""One subtask: a chain of operators in its own process, forked by its TaskExecutor.

Order of start-up (no deadlock in a DAG): listen for inputs, open operators, connect to
downstream subtasks, accept upstream ones, then process until every input has ended.
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
import time
import traceback
import zlib
from fractions import Fraction
from multiprocessing.connection import Client, Connection, Listener, wait
from typing import Any

import cloudpickle

from accelflow.api._context import RuntimeContext
from accelflow.resources._api import ExternalResourceInfo
from accelflow.runtime._chunks import iter_records
from accelflow.runtime._operators import OPERATORS, CollectSink, FileSink, Operator
from accelflow.runtime._protocol import ChainPlan, OutputEdge, SubtaskDescriptor

CONNECT_TIMEOUT_S = 60.0
#: channel addresses with this prefix go through the TaskExecutor's relay (the Ray target):
#: ``relay:<name>`` listens on ``<relay dir>/<name>.sock`` and sends to ``<relay dir>/relay.sock``
RELAY_PREFIX = "relay:"
#: the relay's directory on this machine, set by a relaying TaskExecutor in the subtask's env
RELAY_DIR_ENV_VAR = "ACCELFLOW_RELAY_DIR"
RELAY_SOCKET = "relay.sock"
PROGRESS_EVERY_S = 0.25
_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask Linux to send ``sig`` to this process when its parent dies (no-op elsewhere)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, sig)
    except (OSError, AttributeError):
        pass


class _Cancelled(BaseException):
    pass


def run_subtask(desc: SubtaskDescriptor, status: Connection, env: dict[str, str]) -> None:
    """Process entry point (runs in the forked child)."""
    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    cancelled = threading.Event()

    def on_term(signum: int, frame: Any) -> None:
        cancelled.set()
        raise _Cancelled()

    signal.signal(signal.SIGTERM, on_term)
    os.environ.update(env)
    try:
        runner = _Runner(desc, status, cancelled)
        counts, parts = runner.run()
        # Done: a SIGTERM from now on (the cluster stopping while this process exits) just
        # ends it, instead of raising _Cancelled inside multiprocessing's exit code, which
        # printed a traceback after a successful job.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        status.send(("finished", desc.key, counts, parts))
    except _Cancelled:
        os._exit(143)
    except BaseException:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a cancel now just ends the process
        try:
            status.send(("failed", desc.key, traceback.format_exc()))
        finally:
            os._exit(1)


class _Runner:
    def __init__(self, desc: SubtaskDescriptor, status: Connection, cancelled: threading.Event) -> None:
        self.desc = desc
        self.status = status
        self.plan: ChainPlan = cloudpickle.loads(desc.chain_blob)
        self.cancelled = cancelled
        self.last_progress = 0.0

    def run(self) -> tuple[list[tuple[int, int]], list[str]]:
        desc, plan = self.desc, self.plan
        listener = _listen(desc.listen_address, desc.authkey) if desc.listen_address else None
        try:
            head = plan.nodes[0]
            self.ops: list[Operator] = [OPERATORS[n.kind](n) for n in plan.nodes if n.kind != "source"]
            opened: list[Operator] = []
            try:
                for op in self.ops:
                    op.open(self._context(op.node))
                    opened.append(op)
                self.routers = [_Router(edge, desc.key.index, desc.authkey, desc.key) for edge in plan.outputs]
                self.status.send(("running", desc.key))
                if head.kind == "source":
                    self.source_out = 0
                    self._run_source(head.fn, self._context(head))
                else:
                    self._run_inputs(listener)
                self._finish()
            finally:
                for op in reversed(opened):
                    op.close()
            return self._counts(), [op.part_path for op in self.ops if isinstance(op, FileSink)]
        finally:
            if listener is not None:
                listener.close()

    def _context(self, node: Any) -> RuntimeContext:
        name = node.name
        desc = self.desc
        assigned = {
            resource: {ExternalResourceInfo(props): Fraction(share) for props, share in items}
            for resource, items in desc.assigned.items()
            if resource in node.resources
        }
        all_infos = {
            r: frozenset(ExternalResourceInfo(p) for p in props)
            for r, props in desc.taskexecutor_infos.items()
        }
        return RuntimeContext(
            task_name=self.plan.name, operator_name=name, index_of_this_subtask=desc.key.index,
            number_of_parallel_subtasks=desc.parallelism, attempt_number=desc.key.attempt,
            assigned=assigned, taskexecutor_infos=all_infos,
            taskexecutor_id=desc.taskexecutor_id, cancelled=self.cancelled,
        )

    def _run_source(self, source: Any, ctx: RuntimeContext) -> None:
        for split in self.desc.splits or []:
            for chunk in source.read_chunks(split, ctx):
                n = len(chunk)
                if n:
                    self.source_out += n
                    self._push(chunk, 0)
                if self.cancelled.is_set():
                    return

    def _run_inputs(self, listener: Listener | None) -> None:
        conns = [listener.accept() for _ in range(self.desc.expected_senders)] if listener else []
        while conns:
            for conn in wait(conns):
                assert isinstance(conn, Connection)
                try:
                    chunk = conn.recv()
                except EOFError:
                    raise RuntimeError("an upstream subtask disconnected before ending its stream") from None
                if chunk is None:
                    conns.remove(conn)
                    conn.close()
                else:
                    self._push(chunk, 0)

    def _push(self, chunk: Any, start: int) -> None:
        for op in self.ops[start:]:
            op.records_in += len(chunk)
            chunk = op.process(chunk)
            n = len(chunk)
            op.records_out += n
            if not n:
                break
        else:
            self._emit(chunk)
        now = time.monotonic()
        if now - self.last_progress >= PROGRESS_EVERY_S:
            self.last_progress = now
            self.status.send(("progress", self.desc.key, self._counts()))

    def _emit(self, chunk: Any) -> None:
        if self.ops and isinstance(self.ops[-1], CollectSink):
            self.status.send(("collect", self.desc.key, chunk))
        for router in self.routers:
            router.send(chunk)

    def _finish(self) -> None:
        for i, op in enumerate(self.ops):
            out = op.finish()
            if len(out):
                op.records_out += len(out)
                if i + 1 < len(self.ops):
                    self._push(out, i + 1)
                else:
                    self._emit(out)
        for router in self.routers:
            router.close()

    def _counts(self) -> list[tuple[int, int]]:
        counts = [(op.records_in, op.records_out) for op in self.ops]
        if self.plan.nodes[0].kind == "source":
            counts.insert(0, (0, getattr(self, "source_out", 0)))
        return counts


def stable_hash(key: Any) -> int:
    """A hash that is the same in every process (``hash(str)`` is salted per process, and
    ``hash(None)`` is an address, different in each TaskExecutor process)."""
    if key is None:
        return 0
    if isinstance(key, bool | int):
        return int(key)
    if isinstance(key, str):
        return zlib.crc32(key.encode("utf-8", "surrogatepass"))
    if isinstance(key, bytes):
        return zlib.crc32(key)
    if isinstance(key, tuple):
        h = 0x345678
        for item in key:
            h = (h * 1000003) ^ stable_hash(item)
        return h & 0xFFFFFFFFFFFF
    if isinstance(key, frozenset):
        h = 0
        for item in key:
            h ^= stable_hash(item)
        return h
    return hash(key)


class _Router:
    """Sends chunks to the downstream subtasks of one output edge."""

    def __init__(self, edge: OutputEdge, index: int, authkey: bytes, sender: Any = None) -> None:
        self.edge = edge
        targets = [edge.addresses[index]] if edge.partitioning == "forward" else list(edge.addresses)
        self.conns: list[Connection | _RelayedChannel] = [_connect(a, authkey, sender) for a in targets]
        self.next = index % len(self.conns)

    def send(self, chunk: Any) -> None:
        if self.edge.partitioning == "hash" and len(self.conns) > 1:
            n, key_fn = len(self.conns), self.edge.key_fn
            buckets: list[list[Any]] = [[] for _ in range(n)]
            for r in iter_records(chunk):
                buckets[stable_hash(key_fn(r)) % n].append(r)
            for conn, bucket in zip(self.conns, buckets):
                if bucket:
                    conn.send(bucket)
            return
        self.conns[self.next].send(chunk)
        self.next = (self.next + 1) % len(self.conns)

    def close(self) -> None:
        for conn in self.conns:
            conn.send(None)
            conn.close()


def channel_path(address: str) -> str:
    """The Unix socket a subtask listens on for ``address`` (a relay address maps into the
    relay directory of this machine)."""
    if address.startswith(RELAY_PREFIX):
        return os.path.join(os.environ[RELAY_DIR_ENV_VAR], address[len(RELAY_PREFIX):] + ".sock")
    return address


def _listen(address: str, authkey: bytes) -> Listener:
    return Listener(channel_path(address), "AF_UNIX", authkey=authkey)


def _connect(address: str, authkey: bytes, sender: Any = None) -> Connection | _RelayedChannel:
    """A connection to the subtask listening at ``address``; for a relay address, to the
    TaskExecutor's relay, told first which channel the chunks are for and who sends them
    (the sender's ``SubtaskKey``, which a relay failure is reported against)."""
    if not address.startswith(RELAY_PREFIX):
        return connect_unix(address, authkey)
    name = address[len(RELAY_PREFIX):]
    conn = connect_unix(os.path.join(os.environ[RELAY_DIR_ENV_VAR], RELAY_SOCKET), authkey)
    conn.send(("open", name, sender))
    return _RelayedChannel(conn, name)


class _RelayedChannel:
    """A channel through the TaskExecutor's relay. Chunks go as on a direct connection;
    ending the stream (``None``) waits for the relay's ``("ok",)``, so a chunk the relay could
    not deliver fails this sending subtask (naming the channel and why) instead of leaving the
    receiver waiting for an end that never comes."""

    def __init__(self, conn: Connection, name: str) -> None:
        self.conn = conn
        self.name = name

    def send(self, chunk: Any) -> None:
        try:
            self.conn.send(chunk)
        except OSError:
            raise RuntimeError(self._relay_error()) from None
        if chunk is None:
            try:
                reply = self.conn.recv()
            except (EOFError, OSError):
                reply = ("error", "the relay closed the channel")
            if reply[0] != "ok":
                raise RuntimeError(f"data channel {self.name}: {reply[1]}")

    def _relay_error(self) -> str:
        try:
            if self.conn.poll(1.0):
                return f"data channel {self.name}: {self.conn.recv()[1]}"
        except (EOFError, OSError):
            pass
        return f"data channel {self.name}: the relay closed the channel"

    def close(self) -> None:
        self.conn.close()


def connect_unix(address: str, authkey: bytes) -> Connection:
    """Connect to a Unix-socket listener, waiting up to :data:`CONNECT_TIMEOUT_S` for it."""
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    delay = 0.001
    while True:
        try:
            return Client(address, "AF_UNIX", authkey=authkey)
        except (FileNotFoundError, ConnectionRefusedError):
            if time.monotonic() > deadline:
                raise RuntimeError(f"downstream subtask at {address} never came up") from None
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
