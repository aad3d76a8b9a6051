"""The sink operators of a subtask: ``print``, ``execute_and_collect``, ``add_sink`` and
``sink_to`` (also ``sink_to_file``'s sink; see :mod:`._operators` for the operator contract)."""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np

from accelflow.dataflow import (
    Annotated, CollectSinkSpec, Columns, PrintSinkSpec, RuntimeContext, SinkToSpec, Transformation,
    UserSinkSpec, iter_records, unstamped,
)
from accelflow.runtime import ChainPlan, sink_state
from accelflow.runtime.subtask._operators import MapOp, Operator, join_chunks, runs


@runs(PrintSinkSpec)
class PrintSink(Operator):
    def open(self, ctx: RuntimeContext) -> None:
        self.ctx = ctx  # read per chunk: a standby's index is the one it takes over

    def process(self, chunk: Any) -> Any:
        ctx = self.ctx
        prefix = f"{ctx.index_of_this_subtask + 1}> " if ctx.number_of_parallel_subtasks > 1 else ""
        text = "".join(f"{prefix}{r}\n" for r in iter_records(chunk))
        sys.stdout.write(text)
        sys.stdout.flush()
        return []


@runs(CollectSinkSpec)
class CollectSink(Operator):
    """Hands chunks to the subtask runner, which ships them to the client, a few at a time:
    every message costs work in three processes (subtask, TaskExecutor, client), and one per
    chunk took a NumPy job a third of its running time on 2 cores.
    Chunks wait at most ``execution.buffer-timeout`` (0: not at all; -1: until full) and
    until :data:`COLLECT_MAX_RECORDS` records or :data:`COLLECT_MAX_BYTES` of arrays are held;
    the end of the input, a checkpoint barrier and an idle input release them at once.
    Records lose their timestamps here (the client gets the records)."""

    flushes_when_idle = True

    def __init__(self, node: Transformation, plan: ChainPlan) -> None:
        super().__init__(node, plan)
        self.held: list[Any] = []
        self.held_records = self.held_bytes = 0
        self.first_held = 0.0
        timeout = plan.buffer_timeout_ms
        self.delay = None if timeout < 0 else timeout / 1000

    def process(self, chunk: Any) -> Any:
        chunk = unstamped(chunk)
        if self.delay == 0:
            return chunk
        if not self.held:
            self.first_held = time.monotonic()
        self.held.append(chunk)
        self.held_records += len(chunk)
        self.held_bytes += _nbytes(chunk)
        if self.held_records >= COLLECT_MAX_RECORDS or self.held_bytes >= COLLECT_MAX_BYTES:
            return self.finish()
        return []

    def finish(self) -> Any:
        held, self.held = self.held, []
        self.held_records = self.held_bytes = 0
        return join_chunks(held) if held else []

    flush = on_deadline = finish

    def reset(self) -> None:
        self.finish()

    def deadline(self) -> float | None:
        return None if not self.held or self.delay is None else self.first_held + self.delay

    def holds(self) -> bool:
        return bool(self.held)


#: how many records and how many bytes of arrays a subtask holds collected chunks
COLLECT_MAX_RECORDS, COLLECT_MAX_BYTES = 65536, 8 << 20


def _nbytes(chunk: Any) -> int:
    if isinstance(chunk, Annotated):
        return chunk.rows.nbytes + _nbytes(chunk.data)
    if isinstance(chunk, Columns):
        return sum(c.nbytes for c in chunk.columns())
    return chunk.nbytes if isinstance(chunk, np.ndarray) else 0


@runs(UserSinkSpec)
class UserSink(MapOp):
    keyed_functions = False
    def process(self, chunk: Any) -> Any:
        fn = self.fn
        for r in iter_records(chunk):
            fn(r)
        return []


@runs(SinkToSpec)
class SinkToOp(Operator):
    """A two-phase-commit :class:`accelflow.dataflow.Sink` (``stream.sink_to``): committables
    prepared at each barrier are published when their checkpoint completes."""

    needs_commit = True

    def __init__(self, node: Transformation, plan: ChainPlan) -> None:
        super().__init__(node, plan)
        assert isinstance(node.spec, SinkToSpec)
        self.obj = node.spec.sink
        self.pending: dict[int, list[Any]] = {}  # checkpoint id -> committables not yet published
        self.restored: list[Any] = []

    def open(self, ctx: RuntimeContext) -> None:
        self.ctx = ctx
        self.opened = not ctx.is_standby()
        if self.opened:  # a standby's sink opens when it takes over (``reset``): it names its output by index
            self.obj.open(ctx)

    def process(self, chunk: Any) -> Any:
        self.obj.write(unstamped(chunk))
        return []

    def close(self) -> None:
        if self.opened:
            self.obj.close()

    def reset(self) -> None:
        """Close the sink (it discards what was not prepared; an exactly-once sink aborts its
        transaction) and open it again: what it prepared after the checkpoint restored from
        belongs to the aborted epoch, and ``restore_state`` publishes that checkpoint's
        committables again and cleans up the rest, as after a restart. A sink holds no model:
        it is the one object a rollback in place opens again (as Flink makes a new writer)."""
        self.pending.clear()
        self.restored = []
        if self.opened:
            self.obj.close()
        self.obj.open(self.ctx)
        self.opened = True

    def finish(self) -> Any:
        self.obj.end_of_input()
        return []

    def snapshot_state(self, checkpoint_id: int) -> Any:
        prepared = list(self.obj.prepare_commit(checkpoint_id))
        if prepared:
            self.pending[checkpoint_id] = prepared
        return sink_state(self.pending, self.obj.snapshot_state(checkpoint_id))

    def restore_state(self, states: list[Any], index: int, parallelism: int) -> None:
        # the committables of the checkpoint restored from are published again (idempotent):
        # the job may have failed before its sinks heard that the checkpoint completed
        mine = [s for s in states[index::parallelism] if s]
        for state in mine:
            for n in sorted(state["committables"]):
                self.restored.extend(state["committables"][n])
        if self.restored:
            self.obj.commit(self.restored)
            self.restored = []
        # several old subtasks restored into this one (a lower parallelism): all their states
        writers = [state["writer"] for state in mine]
        self.obj.restore_state(writers[0] if len(writers) == 1 else writers or None)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        done = sorted(n for n in self.pending if n <= checkpoint_id)
        if done:
            self.obj.commit([c for n in done for c in self.pending[n]])
            for n in done:
                del self.pending[n]
