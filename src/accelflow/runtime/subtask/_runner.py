"""One subtask: a chain of operators in its own process, forked by its TaskExecutor.

Order of start-up (no deadlock in a DAG): listen for inputs, open operators, connect to
downstream subtasks, accept upstream ones, then process until every input has ended.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import threading
from multiprocessing.connection import Connection, Listener
from typing import Any

import cloudpickle

from accelflow.dataflow import RuntimeContext
from accelflow.dataflow.eventtime import MAX_TIMESTAMP
from accelflow._errors import RingError, TransportError, encode_error
from accelflow.runtime import (
    Barrier, ChainPlan, CheckpointAck, CheckpointCommitted, NotifyCheckpointComplete,
    Rollback, SubtaskDescriptor, SubtaskFailed, SubtaskFinished, SubtaskRunning,
    TriggerCheckpoint,
)
from accelflow.runtime import die_with_parent, expected_parent
from accelflow.runtime.subtask import _heartbeat
from accelflow.runtime.subtask._chain_io import ChainIO
from accelflow.runtime.subtask._channels import listen
from accelflow.runtime.subtask._epochs import Epochs, RollingBack
from accelflow.runtime.subtask._in_flight import InFlight
from accelflow.runtime.subtask._memory_limit import before_user_code, check_opened, explain, hold_frameworks
from accelflow.runtime.subtask._inputs import InputGate
from accelflow.runtime.subtask import _async_operator, _event_operators, _resident  # noqa: F401 (register their operators)
from accelflow.runtime.subtask._operators import Operator, operator_for
from accelflow.runtime.subtask._partition import Router
from accelflow.runtime.subtask._resume import read_split
from accelflow.runtime.subtask._source_slices import (
    Slicer, Unpushed, push_sliced, restored_source, snapshot, source_state,
)

_log = logging.getLogger("accelflow.runtime")


class _Cancelled(BaseException):
    pass


def run_subtask(desc: SubtaskDescriptor, status: Connection, env: dict[str, str],
                watch: tuple[Any, str, float] | None = None) -> None:
    """Process entry point (runs in the forked child); ``watch``: the heartbeat's shared
    cell, stack dump file and interval (see ``_heartbeat``)."""
    die_with_parent(parent=expected_parent())  # forked: its forkserver, which may be gone already
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    cancelled = threading.Event()

    def on_term(signum: int, frame: Any) -> None:
        cancelled.set()
        raise _Cancelled()

    signal.signal(signal.SIGTERM, on_term)
    os.environ.update(env)
    before_user_code(desc)  # its part of the device's memory: CuPy reads it at import
    runner: _Runner | None = None
    try:
        if watch is not None:
            _heartbeat.start(*watch)
        runner = _Runner(desc, status, cancelled)
        counts = runner.run()
        desc = runner.desc  # its key is the last rollback's
        # Done: a SIGTERM from now on (the cluster stopping while this process exits) just
        # ends it, instead of raising _Cancelled inside multiprocessing's exit code, which
        # printed a traceback after a successful job.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        status.send(SubtaskFinished(desc.key, counts))
    except _Cancelled:
        os._exit(143)
    except BaseException as exc:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a cancel now just ends the process
        try:
            last = runner.desc if runner is not None else desc  # its key is the last rollback's
            exc = explain(exc, last, runner.plan if runner is not None else None)
            status.send(SubtaskFailed(last.key, encode_error(exc, with_traceback=True)))
        finally:
            os._exit(1)


class _Runner(ChainIO):
    def __init__(self, desc: SubtaskDescriptor, status: Connection, cancelled: threading.Event) -> None:
        self.desc = desc
        self.status = status  # events up to the TaskExecutor, checkpoint commands down
        self.plan: ChainPlan = cloudpickle.loads(desc.chain_blob)
        self.cancelled = cancelled
        self.last_progress = 0.0
        #: the newest checkpoint id seen (the restored one at first): the final checkpoint's
        #: id is the next one, so committables' ids grow in every subtask
        self.last_checkpoint = desc.restored_checkpoint
        self.source: Any = None
        self.splits: list[Any] = []  # the source's splits not yet read (the current first)
        self.split_read = 0  # records of the current split read so far
        self.source_out = 0  # records read by the source (from the restored checkpoint's count)
        #: how many records of a source's chunk to push at once (whole with buffer-timeout -1)
        self.slicer = Slicer(enabled=self.plan.buffer_timeout_ms >= 0)
        #: between two slices of a source's chunk: (the chunk, the first record not pushed)
        self.unpushed: tuple[Any, int] | None = None
        self.ended = False  # the input has ended (the final state is acked)
        self.commands = select.poll()
        self.commands.register(status.fileno(), select.POLLIN)
        self.in_flight = InFlight(self)  # records of ended inputs kept for a checkpoint (FLIP-147)
        self.beat = _heartbeat.current  # progress and busy time, for the TaskExecutor's watchdog
        self.epochs = Epochs(self)  # rollbacks in place
        self.listener: Listener | None = None

    def run(self) -> list[tuple[int, int]]:
        desc, plan = self.desc, self.plan
        if desc.arrays:  # a NumPy source's arrays, mapped by the TaskExecutor (Ray target)
            from accelflow.runtime import register_arrays

            register_arrays(desc.arrays)
        self.listener = listen(desc.listen_address, desc.authkey) if desc.listen_address else None
        try:
            head = plan.nodes[0]
            self.ops: list[Operator] = [operator_for(n, plan) for n in plan.nodes if n.source is None]
            #: whether a source's chunks keep their records' splits: its watermarks are made next
            self.reads_splits = bool(self.ops) and isinstance(self.ops[0], _event_operators.TimestampsOp)
            opened: list[Operator] = []
            try:
                hold_frameworks(desc)  # those a warm process imported ahead
                for op in self.ops:
                    op.open(self._context(op.node))
                    opened.append(op)
                hold_frameworks(desc)  # those the user's functions imported
                check_opened(desc, self.plan)
                self._restore()
                if desc.standby:
                    self.epochs.stand_by()
                source_ctx = self._context(head) if head.source is not None else None
                while True:  # one epoch per turn: a rollback in place starts the next
                    try:
                        self._run_epoch(source_ctx)
                        break
                    except RollingBack as rolling:
                        order = rolling.order
                    except TransportError as broken:  # another subtask failed: wait for the rollback
                        if not self.plan.in_place or isinstance(broken, RingError):  # a RingError is ours
                            raise
                        order = self.epochs.await_rollback(broken.with_traceback(None))
                    self.epochs.roll_back(order)  # out here, the old epoch's frames are gone
            finally:
                for op in reversed(opened):
                    op.close()
            return self._counts()
        finally:
            if self.listener is not None:
                self.listener.close()

    def _run_epoch(self, source_ctx: RuntimeContext | None) -> None:
        desc, head = self.desc, self.plan.nodes[0]
        self._route(self._connect_outputs(), len(self.plan.nodes) - len(self.ops))
        self.status.send(SubtaskRunning(desc.key))
        if head.source is not None:
            assert source_ctx is not None
            self._run_source(head.source, source_ctx)
        else:
            self._run_inputs(self.listener)
            self.in_flight.run()
        self._finish()
        self._final_checkpoint()

    def _connect_outputs(self) -> list[Router]:
        """Connect to the downstream subtasks, taking commands while one is not listening:
        a :class:`Rollback` meanwhile (that subtask failed, e.g. at once in ``open()``) ends
        the wait, with no channel left open, instead of the connect's timeout."""
        desc, routers = self.desc, []
        try:
            with self.beat.waiting():  # on the downstream subtasks, not busy
                for edge in self.plan.outputs:
                    routers.append(Router(edge, desc.key.index, desc.authkey, desc.key, desc.parallelism,
                                          meanwhile=self._commands))
        except BaseException:
            for conn in (conn for router in routers for conn in router.conns):
                conn.close()
            raise
        return routers

    def _accept_inputs(self, listener: Listener) -> list[Connection]:
        """Accept the upstream subtasks' channels, taking commands meanwhile: a
        :class:`Rollback` (an upstream subtask failed before it connected, e.g. in ``open()``)
        ends the wait, with no channel left open."""
        sock = listener._listener._socket  # type: ignore[attr-defined]  # readable: one to accept
        conns: list[Connection] = []
        try:
            while len(conns) < self.desc.expected_senders:
                ready = self.beat.wait([sock, self.status], None)
                if self.status in ready:
                    self._commands()
                if sock in ready:
                    conns.append(listener.accept())
        except BaseException:
            for conn in conns:
                conn.close()
            raise
        return conns

    def _context(self, node: Any) -> RuntimeContext:
        name = node.name
        desc = self.desc
        assigned = {
            resource: {d.info(): d.share for d in shares}
            for resource, shares in desc.assigned.items()
            if resource in node.resources
        }
        all_infos = {r: frozenset(d.info() for d in devices) for r, devices in desc.taskexecutor_infos.items()}
        timeout = self.plan.buffer_timeout_ms
        ctx = RuntimeContext(
            task_name=self.plan.name, operator_name=name,
            index_of_this_subtask=-1 if desc.standby else desc.key.index, standby=desc.standby,
            number_of_parallel_subtasks=desc.parallelism, attempt_number=desc.key.attempt,
            assigned=assigned, taskexecutor_infos=all_infos,
            taskexecutor_id=desc.taskexecutor_id, cancelled=self.cancelled,
            buffer_timeout_s=-1.0 if timeout < 0 else timeout / 1000,
            max_number_of_parallel_subtasks=self.plan.max_parallelism,
        )
        self.epochs.contexts.append(ctx)
        return ctx

    # -- checkpoints ---------------------------------------------------------------------------
    def _restore(self) -> None:
        restored = self.desc.restored or {}
        index, parallelism = self.desc.key.index, self.desc.parallelism
        head = self.plan.nodes[0]
        self.splits = list(self.desc.splits or [])
        self.source_out = 0
        if head.source is not None and head.state_name in restored:
            # the splits not yet read when the checkpoint was taken, spread as at the start
            self.splits, self.source_out = restored_source(
                [cloudpickle.loads(blob) for blob in restored[head.state_name]], index, parallelism)
        for op in self.ops:
            if op.node.state_name in restored:
                states = [cloudpickle.loads(b) for b in restored[op.node.state_name]]
                op.restore_state(states, index, parallelism)
        self.in_flight.restore(restored, index, parallelism)

    def _snapshot(self, checkpoint_id: int) -> dict[str, bytes]:
        states: dict[str, bytes] = {}
        if self.source is not None:
            rest = list(self.splits)
            if rest:
                rest[0] = snapshot(self.source.snapshot_split(rest[0], self.split_read, checkpoint_id),
                                   self.unpushed)
            states[self.plan.nodes[0].state_name] = cloudpickle.dumps(source_state(rest, self.source_out))
        for op in self.ops:
            state = op.snapshot_state(checkpoint_id)
            if state is not None:
                states[op.node.state_name] = cloudpickle.dumps(state)
        states.update(self.in_flight.snapshot())
        return states

    def _checkpoint(self, checkpoint_id: int) -> None:
        """At checkpoint ``checkpoint_id``'s barrier (aligned on every input): flush, snapshot,
        ack, and pass the barrier on."""
        if checkpoint_id <= self.last_checkpoint or self.ended:
            return  # an old barrier (of a checkpoint given up), or a trigger after the end
        self.last_checkpoint = checkpoint_id
        self._flush_ops(lambda op: op.flush())
        self.status.send(CheckpointAck(self.desc.key, checkpoint_id, self._snapshot(checkpoint_id)))
        barrier = Barrier(checkpoint_id)
        for router in self.all_routers:
            router.broadcast(barrier)

    def _control(self) -> None:
        """Handle the JobManager's checkpoint commands that have arrived (never blocks; a
        ``select.poll`` made once costs a microsecond, ``Connection.poll`` a selector each call)."""
        self.beat.tick()
        self._commands()

    def _commands(self) -> None:
        """:meth:`_control`, busy or not as before (e.g. while waiting for another subtask)."""
        while self.commands.poll(0):
            self._command(self.status.recv())

    def _command(self, msg: Any) -> None:
        if isinstance(msg, TriggerCheckpoint):
            self.in_flight.drain()  # a trigger here, not at a source: every input has ended
            self._checkpoint(msg.checkpoint_id)
        elif isinstance(msg, NotifyCheckpointComplete):
            for op in self.ops:
                op.notify_checkpoint_complete(msg.checkpoint_id)
            if self.source is not None:
                self.source.notify_checkpoint_complete(msg.checkpoint_id)
            if msg.reply:
                self.status.send(CheckpointCommitted(self.desc.key, msg.checkpoint_id))
        elif isinstance(msg, Rollback):
            raise RollingBack(msg)

    def _final_checkpoint(self) -> None:
        """The input has ended: this subtask's last state is part of the job's final
        checkpoint. With checkpointing on (or a chain that publishes on commit) it waits
        until that checkpoint is complete (every subtask of the job has ended its input),
        publishes then, and may still be rolled back meanwhile (as Flink's tasks wait for
        the final checkpoint, FLIP-147). So does every subtask of a job that rolls back in
        place without checkpointing (its ack then carries no state): a survivor that had
        ended is rewound to the start too, instead of forcing a full restart."""
        committing = any(op.needs_commit for op in self.ops)
        if not (committing or self.plan.checkpointing or self.plan.in_place):
            return
        final = self.last_checkpoint + 1
        self.splits = []
        self.ended = True
        states = self._snapshot(final) if committing or self.plan.checkpointing else {}
        self.status.send(CheckpointAck(self.desc.key, final, states, final=True))
        self.last_checkpoint = final
        while True:
            with self.beat.waiting():
                msg = self.status.recv()
            self._command(msg)
            # a periodic checkpoint may have the id of its final state (triggered before it
            # ended): only the job's final one means every subtask has ended
            if isinstance(msg, NotifyCheckpointComplete) and msg.final:
                return

    # -- records -------------------------------------------------------------------------------
    def _run_source(self, source: Any, ctx: RuntimeContext) -> None:
        self.source = source
        while self.splits:
            self.split_read = 0
            if isinstance(self.splits[0], Unpushed):  # restored: the records read, not yet pushed
                unpushed, self.splits[0] = self.splits[0], self.splits[0].split
                push_sliced(self, unpushed.records)
                if self.cancelled.is_set():
                    return
            for chunk in read_split(source, self.splits[0], ctx):
                n = len(chunk)
                if n:
                    self.source_out += n
                    self.split_read += n
                    push_sliced(self, chunk)
                else:
                    self._idle()
                    self._progress()  # an idle source's gauges (e.g. Kafka lag) still go out
                self._control()
                self._timers()
                if self.cancelled.is_set():
                    return
            self.splits.pop(0)
            self.split_read = 0

    def _run_inputs(self, listener: Listener | None) -> None:
        gate = InputGate(self._accept_inputs(listener) if listener else [])
        self.in_flight.gate = gate
        wakers = [w for op in self.ops if (w := op.waker()) is not None]
        try:
            while gate.live:
                waiting = gate.readable() + [self.status] + wakers
                if any(op.holds() for op in self.ops):  # sent at once when nothing else is there
                    ready = self.beat.wait(waiting, 0)
                    if not ready:
                        self._idle()
                        continue
                else:
                    ready = self.beat.wait(waiting, self._next_deadline())
                for conn in ready:
                    if conn is self.status:
                        self._control()
                    elif conn in wakers:
                        conn.drain()  # type: ignore[union-attr]
                    elif conn not in gate.live:
                        continue  # read to its end at a checkpoint (``InFlight.drain``)
                    else:
                        for event in gate.receive(conn):  # type: ignore[arg-type]
                            self._on_input(event)
                self._timers()
        finally:
            gate.close()

    def _push(self, chunk: Any, start: int, input_index: int = 0) -> None:
        self.beat.tick()  # progress, for the watchdog
        super()._push(chunk, start, input_index)

    def _on_input(self, event: tuple[Any, ...]) -> None:
        what = event[0]
        if what == "records":
            self._push(event[1], 0, event[2])
        elif what == "watermark":
            self._watermark(event[1])
        elif what == "status":
            self._status(event[1])
        else:
            self._checkpoint(event[1])

    def _finish(self) -> None:
        if not self.cancelled.is_set():
            self._watermark(MAX_TIMESTAMP)  # the end of the input: every window fires
        self._flush_ops(lambda op: op.finish())
        for router in self.all_routers:
            router.close()

    def _counts(self) -> list[tuple[int, int]]:
        counts = [(op.records_in, op.records_out) for op in self.ops]
        if self.plan.nodes[0].source is not None:
            counts.insert(0, (0, self.source_out))
        return counts
