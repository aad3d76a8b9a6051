"""Operators as they run inside a subtask: each turns a chunk into a chunk.

An operator has ``open(ctx)``, ``process(chunk) -> chunk``, ``finish() -> chunk`` (what it
held back, e.g. a partial batch or final reduce values) and ``close()``.
"""

from __future__ import annotations

import inspect
import os
import sys
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np

from accelflow._errors import JobError
from accelflow.dataflow import RuntimeContext
from accelflow.dataflow import Columns, Positioned, from_batch, iter_records, to_batch
from accelflow.dataflow import Transformation
from accelflow.runtime import create_part
from accelflow.runtime.subtask._partition import canonical_key, stable_hash

if TYPE_CHECKING:
    from accelflow.runtime.subtask._device import DeviceStage, PlainStage

_METHODS = {"map": "map", "flat_map": "flat_map", "filter": "filter", "reduce": "reduce",
            "map_batches": "map_batch", "sink_user": "invoke"}


def _bind(fn: Any, kind: str) -> tuple[Any, Callable[..., Any]]:
    """Instantiate a class if given one; return (object, the callable to use)."""
    obj = fn() if inspect.isclass(fn) else fn
    method = _METHODS.get(kind)
    if method and hasattr(obj, method):
        return obj, getattr(obj, method)  # type: ignore[no-any-return]
    return obj, obj  # type: ignore[return-value]


class Operator:
    """Checkpointing (see ``docs/checkpoints.md``): at a barrier the runner calls
    :meth:`flush` (emit what is held back for latency only, e.g. a partial batch), then
    :meth:`snapshot_state`; when the checkpoint is complete, :meth:`notify_checkpoint_complete`.
    A restored attempt calls :meth:`restore_state` after :meth:`open`."""

    #: whether the operator publishes output only when a checkpoint completes (the runner
    #: then waits for the job's final checkpoint at the end of its input)
    needs_commit = False

    def __init__(self, node: Transformation) -> None:
        self.node = node
        self.records_in = 0
        self.records_out = 0
        self.obj: Any = None

    def open(self, ctx: RuntimeContext) -> None:
        if hasattr(self.obj, "open") and callable(self.obj.open):
            self.obj.open(ctx)

    def process(self, chunk: Any) -> Any:
        raise NotImplementedError

    def finish(self) -> Any:
        return []

    def flush(self) -> Any:
        return []

    def deadline(self) -> float | None:
        """When (``time.monotonic()``) :meth:`on_deadline` must run, if ever."""
        return None

    def on_deadline(self) -> Any:
        return []

    def snapshot_state(self, checkpoint_id: int) -> Any:
        """Picklable state, or None for none."""
        return None

    def restore_state(self, states: list[Any], index: int, parallelism: int) -> None:
        """``states``: what every subtask of this operator snapshotted (any parallelism)."""

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        pass

    def close(self) -> None:
        if hasattr(self.obj, "close") and callable(self.obj.close):
            self.obj.close()


class MapOp(Operator):
    def __init__(self, node: Transformation) -> None:
        super().__init__(node)
        self.obj, self.fn = _bind(node.fn, node.kind)

    def process(self, chunk: Any) -> Any:
        fn = self.fn
        if isinstance(chunk, Positioned):  # one output per record: at its record's position
            return Positioned(chunk.positions, [fn(r) for r in iter_records(chunk.data)])
        return [fn(r) for r in iter_records(chunk)]


class FlatMapOp(MapOp):
    def process(self, chunk: Any) -> Any:
        fn = self.fn
        if isinstance(chunk, Positioned):
            return chunk.expanded([list(fn(r)) for r in iter_records(chunk.data)])
        return [out for r in iter_records(chunk) for out in fn(r)]


class FilterOp(MapOp):
    def process(self, chunk: Any) -> Any:
        fn = self.fn
        if isinstance(chunk, Positioned):
            return chunk.kept([bool(fn(r)) for r in iter_records(chunk.data)])
        if isinstance(chunk, list):
            return [r for r in chunk if fn(r)]
        return [r for r in iter_records(chunk) if fn(r)]


class MapBatchesOp(MapOp):
    """Batches of ``batch_size`` records; with ``max_wait`` (seconds) a partial batch is
    also called once its first record has waited that long (as Ray Serve's batching)."""

    def __init__(self, node: Transformation) -> None:
        super().__init__(node)
        self.batch_size: int = node.options["batch_size"]
        self.max_wait: float | None = node.options.get("max_wait")
        self.pending: list[Any] = []
        self.pending_len = 0
        self.first_waiting = 0.0
        self.stage: DeviceStage | PlainStage | None = None  # set with ``device`` (PlainStage: NumPy)
        #: the positions of each batch in the stage, oldest first (of :class:`Positioned` input)
        self.staged_positions: deque[np.ndarray[Any, Any]] = deque()

    def open(self, ctx: RuntimeContext) -> None:
        super().open(ctx)
        if self.node.options.get("device") is not None:
            from accelflow.runtime.subtask._device import open_stage

            self.stage = open_stage(self.fn, self.node.options, self.node.name)

    def process(self, chunk: Any) -> Any:
        if not self.pending and len(chunk) == self.batch_size:
            return self._call([chunk])
        if not self.pending:
            self.first_waiting = time.monotonic()
        self.pending.append(chunk)
        self.pending_len += len(chunk)
        outputs = []
        while self.pending_len >= self.batch_size:
            outputs.append(self._call(self._take(self.batch_size)))
        if self.pending and outputs:
            self.first_waiting = time.monotonic()  # the rest arrived with the last chunk
        if self.stage is not None:
            outputs = [o for o in outputs if len(o)]  # batches still in flight gave nothing
        return _join(outputs)

    def finish(self) -> Any:
        if self.stage is not None:  # the partial batch, then every batch still in flight
            return self._drained(self._call(self._take(self.pending_len)) if self.pending_len else [])
        if not self.pending_len:
            return []
        return self._call(self._take(self.pending_len))

    flush = finish  # a barrier closes the partial batch: the checkpoint holds no records

    def on_deadline(self) -> Any:
        if self.stage is None:
            return self.finish()
        due = self.max_wait is not None and self.pending_len and \
            self.first_waiting + self.max_wait <= time.monotonic()
        return self._drained(self._call(self._take(self.pending_len)) if due else [])

    def deadline(self) -> float | None:
        if self.max_wait is None or not self.pending_len:
            return None if self.stage is None else self.stage.deadline()
        if self.stage is not None and (drain := self.stage.deadline()) is not None:
            return min(drain, self.first_waiting + self.max_wait)
        return self.first_waiting + self.max_wait

    def _take(self, size: int) -> list[Any]:
        taken, need = [], size
        while need:
            head = self.pending[0]
            if len(head) <= need:
                taken.append(self.pending.pop(0))
                need -= len(head)
            else:
                taken.append(_slice(head, 0, need))
                self.pending[0] = _slice(head, need, len(head))
                need = 0
        self.pending_len -= size
        return taken

    def _call(self, chunks: list[Any]) -> Any:
        """The output chunk of the batch of ``chunks`` (with a stage: of the batches it has
        finished meanwhile). ``fn`` gets the records only; :class:`Positioned` input gives
        each output its record's position."""
        positions = None
        if isinstance(chunks[0], Positioned):
            positions = np.concatenate([c.positions for c in chunks])
            chunks = [c.data for c in chunks]
        if self.stage is not None:
            if positions is not None:
                self.staged_positions.append(positions)
            return self._joined(self.stage.submit(chunks))
        return self._placed(positions, from_batch(self.fn(to_batch(chunks)), self.node.name))

    def _drained(self, out: Any) -> Any:
        assert self.stage is not None
        chunks = [c for c in (out, self._joined(self.stage.drain())) if len(c)]
        return _join(chunks) if chunks else []

    def _joined(self, results: list[Any]) -> Any:
        """The chunk of the stage's ``results`` (what ``fn`` returned per batch), in order."""
        chunks = [r if isinstance(r, list | Columns) else from_batch(r, self.node.name) for r in results]
        if self.staged_positions:  # one result per batch submitted, oldest first
            chunks = [self._placed(self.staged_positions.popleft(), c) for c in chunks]
        chunks = [c for c in chunks if len(c)]
        return _join(chunks) if chunks else []

    def _placed(self, positions: np.ndarray[Any, Any] | None, chunk: Any) -> Any:
        """``chunk`` with ``positions`` (None: as it is); one output per record is needed."""
        if positions is None:
            return chunk
        if len(chunk) != len(positions):
            raise JobError(
                f"operator {self.node.name!r} (map_batches) returned {len(chunk)} outputs for a "
                f"batch of {len(positions)} records: execute_and_collect(ordered=True) puts each "
                "output at its record's position, so it needs one output per record")
        return Positioned(positions, chunk)


class ReduceOp(MapOp):
    def __init__(self, node: Transformation) -> None:
        super().__init__(node)
        self.key_fn = node.key_fn
        self.rolling: bool = node.options.get("rolling", False)
        self.state: dict[Any, Any] = {}

    def process(self, chunk: Any) -> Any:
        state, key_fn, fn = self.state, self.key_fn, self.fn
        out = []
        for r in iter_records(chunk):
            key = canonical_key(key_fn(r))  # NaN keys are one key, as in Flink
            value = fn(state[key], r) if key in state else r
            state[key] = value
            if self.rolling:
                out.append(value)
        return out

    def finish(self) -> Any:
        return [] if self.rolling else list(self.state.values())

    def snapshot_state(self, checkpoint_id: int) -> Any:
        return dict(self.state)

    def restore_state(self, states: list[Any], index: int, parallelism: int) -> None:
        # key groups as in Flink: each key goes back to the subtask its hash routes it to,
        # whatever the parallelism the checkpoint was taken with
        for state in states:
            for key, value in (state or {}).items():
                if stable_hash(key) % parallelism == index:
                    self.state[canonical_key(key)] = value  # an unpickled NaN is a new object


class PrintSink(Operator):
    def open(self, ctx: RuntimeContext) -> None:
        n = ctx.number_of_parallel_subtasks
        self.prefix = f"{ctx.index_of_this_subtask + 1}> " if n > 1 else ""

    def process(self, chunk: Any) -> Any:
        text = "".join(f"{self.prefix}{r}\n" for r in iter_records(chunk))
        sys.stdout.write(text)
        sys.stdout.flush()
        return []


class FileSink(Operator):
    """Writes a part file; the JobManager joins the parts atomically when the job succeeds."""

    def __init__(self, node: Transformation) -> None:
        super().__init__(node)
        self.file: TextIO | None = None
        self.part_path = ""

    def open(self, ctx: RuntimeContext) -> None:
        # a new file with a random name, 0600, never through a symlink (see _sinkfiles)
        fd, self.part_path = create_part(str(self.node.fn), ctx.index_of_this_subtask, ctx.attempt_number)
        self.file = os.fdopen(fd, "w", encoding="utf-8")

    def process(self, chunk: Any) -> Any:
        assert self.file is not None
        self.file.write("".join(f"{r}\n" for r in iter_records(chunk)))
        return []

    def close(self) -> None:
        if self.file is not None and not self.file.closed:
            self.file.flush()
            os.fsync(self.file.fileno())
            self.file.close()


class CollectSink(Operator):
    """Hands chunks to the subtask runner, which ships them to the client, a few at a time:
    every message costs work in three processes (subtask, TaskExecutor, client), and one per
    chunk took a NumPy job a third of its running time on 2 cores.
    Chunks wait at most :data:`COLLECT_MAX_DELAY_S` and until :data:`COLLECT_MAX_RECORDS`
    records or :data:`COLLECT_MAX_BYTES` of arrays are held; the end of the input and a
    checkpoint barrier release them at once."""

    def __init__(self, node: Transformation) -> None:
        super().__init__(node)
        self.held: list[Any] = []
        self.held_records = self.held_bytes = 0
        self.first_held = 0.0

    def process(self, chunk: Any) -> Any:
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
        return _join(held) if held else []

    flush = on_deadline = finish

    def deadline(self) -> float | None:
        return self.first_held + COLLECT_MAX_DELAY_S if self.held else None


#: how long, how many records and how many bytes of arrays a subtask holds collected chunks
COLLECT_MAX_DELAY_S, COLLECT_MAX_RECORDS, COLLECT_MAX_BYTES = 0.05, 65536, 8 << 20


def _nbytes(chunk: Any) -> int:
    if isinstance(chunk, Positioned):
        return chunk.positions.nbytes + _nbytes(chunk.data)
    if isinstance(chunk, Columns):
        return sum(c.nbytes for c in chunk.columns())
    return chunk.nbytes if isinstance(chunk, np.ndarray) else 0


class UserSink(MapOp):
    def process(self, chunk: Any) -> Any:
        fn = self.fn
        for r in iter_records(chunk):
            fn(r)
        return []


class SinkToOp(Operator):
    """A two-phase-commit :class:`accelflow.dataflow.Sink` (``stream.sink_to``): committables
    prepared at each barrier are published when their checkpoint completes."""

    needs_commit = True

    def __init__(self, node: Transformation) -> None:
        super().__init__(node)
        self.obj = node.fn
        self.pending: dict[int, list[Any]] = {}  # checkpoint id -> committables not yet published
        self.restored: list[Any] = []

    def open(self, ctx: RuntimeContext) -> None:
        self.obj.open(ctx)

    def process(self, chunk: Any) -> Any:
        self.obj.write(chunk)
        return []

    def snapshot_state(self, checkpoint_id: int) -> Any:
        prepared = list(self.obj.prepare_commit(checkpoint_id))
        if prepared:
            self.pending[checkpoint_id] = prepared
        return {"committables": {n: list(c) for n, c in self.pending.items()},
                "writer": self.obj.snapshot_state(checkpoint_id)}

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
        self.obj.restore_state(mine[0]["writer"] if mine else None)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        done = sorted(n for n in self.pending if n <= checkpoint_id)
        if done:
            self.obj.commit([c for n in done for c in self.pending[n]])
            for n in done:
                del self.pending[n]


OPERATORS: dict[str, type[Operator]] = {
    "map": MapOp, "flat_map": FlatMapOp, "filter": FilterOp, "map_batches": MapBatchesOp,
    "reduce": ReduceOp, "sink_print": PrintSink, "sink_file": FileSink,
    "sink_collect": CollectSink, "sink_user": UserSink, "sink_to": SinkToOp,
}


def _slice(chunk: Any, start: int, stop: int) -> Any:
    from accelflow.dataflow import Columns

    if isinstance(chunk, Columns):
        return chunk.slice(start, stop)
    return chunk[start:stop]


def _join(outputs: list[Any]) -> Any:
    if len(outputs) == 1:
        return outputs[0]
    if outputs and all(isinstance(o, Positioned) for o in outputs):
        return Positioned(np.concatenate([o.positions for o in outputs]), _join([o.data for o in outputs]))
    if outputs and all(isinstance(o, np.ndarray) for o in outputs):
        return np.concatenate(outputs)
    if outputs and all(isinstance(o, Columns) for o in outputs) and len({len(o.columns()) for o in outputs}) == 1:
        return Columns(to_batch(outputs))  # the columns, each joined
    records: list[Any] = []
    for out in outputs:
        records.extend(iter_records(out))
    return records
