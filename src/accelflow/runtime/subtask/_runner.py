"""One subtask: a chain of operators in its own process, forked by its TaskExecutor.

Order of start-up (no deadlock in a DAG): listen for inputs, open operators, connect to
downstream subtasks, accept upstream ones, then process until every input has ended.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from fractions import Fraction
from multiprocessing.connection import Connection, Listener, wait
from typing import Any

import cloudpickle

from accelflow.dataflow import RuntimeContext
from accelflow.resources import ExternalResourceInfo
from accelflow._errors import TransportError, encode_error
from accelflow.runtime import (
    ChainPlan, Collected, SubtaskDescriptor, SubtaskFailed, SubtaskFinished, SubtaskProgress,
    SubtaskRunning,
)
from accelflow.runtime import die_with_parent
from accelflow.runtime.subtask._channels import listen
from accelflow.runtime.subtask._operators import OPERATORS, CollectSink, FileSink, Operator
from accelflow.runtime.subtask._partition import Router
from accelflow.runtime.subtask._shm import ShmReceiver

PROGRESS_EVERY_S = 0.25


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
        status.send(SubtaskFinished(desc.key, counts, parts))
    except _Cancelled:
        os._exit(143)
    except BaseException as exc:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a cancel now just ends the process
        try:
            status.send(SubtaskFailed(desc.key, encode_error(exc, with_traceback=True)))
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
        listener = listen(desc.listen_address, desc.authkey) if desc.listen_address else None
        try:
            head = plan.nodes[0]
            self.ops: list[Operator] = [OPERATORS[n.kind](n) for n in plan.nodes if n.kind != "source"]
            opened: list[Operator] = []
            try:
                for op in self.ops:
                    op.open(self._context(op.node))
                    opened.append(op)
                self.routers = [Router(edge, desc.key.index, desc.authkey, desc.key) for edge in plan.outputs]
                self.status.send(SubtaskRunning(desc.key))
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
        receiver = ShmReceiver()
        try:
            while conns:
                for conn in wait(conns):
                    assert isinstance(conn, Connection)
                    try:
                        chunk = receiver.recv(conn)
                    except (EOFError, OSError):
                        raise TransportError(
                            "an upstream subtask disconnected before ending its stream") from None
                    if chunk is None:
                        conns.remove(conn)
                        conn.close()
                    else:
                        self._push(chunk, 0)
        finally:
            receiver.close_all()

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
            self.status.send(SubtaskProgress(self.desc.key, self._counts()))

    def _emit(self, chunk: Any) -> None:
        if self.ops and isinstance(self.ops[-1], CollectSink):
            self.status.send(Collected(self.desc.key, chunk))
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


