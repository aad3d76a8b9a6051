"""Operators as they run inside a subtask: each turns a chunk into a chunk.

An operator has ``open(ctx)``, ``process(chunk) -> chunk``, ``finish() -> chunk`` (what it
held back, e.g. a partial batch or final reduce values) and ``close()``. Each runs the
operators of one spec class (and its subclasses), registered with ``@runs(SpecClass)``; the
runner finds it with :func:`operator_for`.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from accelflow._errors import AccelflowInternalError, JobError
from accelflow._loops import watched
from accelflow.dataflow import (
    Annotated, Columns, FilterSpec, FlatMapSpec, FunctionSpec, MapBatchesSpec, MapSpec, OperatorSpec,
    ReduceSpec, RichFunction, RuntimeContext, Timestamped, Transformation, from_batch, iter_records, stamped, to_batch,
)
from accelflow.dataflow.eventtime import MIN_TIMESTAMP
from accelflow.runtime import ChainPlan
from accelflow.runtime.subtask._calls import bind, not_iterable, unhashable_key
from accelflow.runtime.subtask._keygroups import subtask_for_key
from accelflow.runtime.subtask._keyed_functions import KeyedFunctionState
from accelflow.runtime.subtask._keys import canonical_key

if TYPE_CHECKING:
    from accelflow.runtime.subtask._device import DeviceStage, PlainStage

_Op = TypeVar("_Op", bound="type[Operator]")
#: spec class -> the operator class that runs it (see :func:`runs`)
_RUNS: dict[type[OperatorSpec], type[Operator]] = {}


def runs(*specs: type[OperatorSpec]) -> Callable[[_Op], _Op]:
    """Register the decorated operator class as the one that runs ``specs`` (and their
    subclasses)."""
    def register(cls: _Op) -> _Op:
        for spec in specs:
            _RUNS[spec] = cls
        return cls
    return register


def operator_for(node: Transformation, plan: ChainPlan) -> Operator:
    """The runtime operator of ``node`` (not a source), for this subtask's ``plan``.

    Raises:
        AccelflowInternalError: no operator is registered for the node's spec class.
    """
    for cls in type(node.spec).__mro__:
        if cls in _RUNS:
            return _RUNS[cls](node, plan)
    raise AccelflowInternalError(f"no runtime operator runs {type(node.spec).__name__} "
                                 f"(operator {node.name!r}): register one with @runs")


class Operator:
    """Checkpointing (see ``docs/checkpoints.md``): at a barrier the runner calls
    :meth:`flush` (emit what is held back for latency only, e.g. a partial batch), then
    :meth:`snapshot_state`; when the checkpoint is complete, :meth:`notify_checkpoint_complete`.
    A restored attempt calls :meth:`restore_state` after :meth:`open`. A subtask rolled back
    in place (``docs/failover.md``) calls :meth:`reset`, then :meth:`restore_state`, on the
    operator it has: never :meth:`open` again.

    Event time: :meth:`process_watermark` gets each watermark of the operator's input (in
    order with the chunks) and returns what advancing to it released (e.g. windows that
    fire); the runner then passes the watermark on, unless :attr:`generates_watermarks`
    (the operator makes its own, put in :attr:`events` with its idleness status changes).
    Side outputs go into :attr:`side` as ``(tag name, chunk)``; the runner routes them after
    each call.
    """

    #: whether the operator publishes output only when a checkpoint completes (the runner
    #: then waits for the job's final checkpoint at the end of its input)
    needs_commit = False
    #: whether it makes the watermarks after it (``assign_timestamps_and_watermarks``):
    #: upstream watermarks (but the final one) and statuses stop here
    generates_watermarks = False
    #: whether it passes watermarks on itself, once the outputs before them are out (async
    #: I/O: :meth:`process_watermark` queues it, :attr:`events` has it when due)
    holds_watermarks = False
    #: whether it sends what it holds at once when its subtask's input is idle (the collect sink)
    flushes_when_idle = False

    def __init__(self, node: Transformation, plan: ChainPlan) -> None:
        self.node = node
        self.max_parallelism = plan.max_parallelism
        self.records_in = 0
        self.records_out = 0
        self.obj: Any = None
        #: side outputs of the last call: (tag name, chunk)
        self.side: list[tuple[str, Any]] = []
        #: watermarks (``Watermark``) and statuses (``StreamStatus``) it made in the last call
        self.events: list[Any] = []

    def process_input(self, chunk: Any, input_index: int) -> Any:
        """A chunk of input ``input_index`` (1: the second input of a two-input operator)."""
        return self.process(chunk)

    def process_watermark(self, timestamp: int) -> Any:
        """The input watermark advanced to ``timestamp``: the outputs that releases."""
        return []

    def holds(self) -> bool:
        """Whether it holds records back for latency only (sent when the input is idle, see
        :attr:`flushes_when_idle`)."""
        return False

    def waker(self) -> Any:
        """A connection the runner waits on beside its inputs (readable when
        :meth:`deadline` may have moved: async results), or None."""
        return None

    def open(self, ctx: RuntimeContext) -> None:
        if isinstance(self.obj, RichFunction):
            self.obj._runtime_context = ctx  # its get_runtime_context()
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

    def reset(self) -> None:
        """Drop every record held and all state (a rollback in place; :meth:`restore_state`
        follows), keeping what :meth:`open` made. An operator with state must override it.

        Raises:
            AccelflowInternalError: the operator keeps state and has no ``reset`` (the
                subtask then fails, and the job restarts every subtask instead).
        """
        if type(self).snapshot_state is not Operator.snapshot_state:
            raise AccelflowInternalError(f"operator {self.node.name!r} ({type(self).__name__}) keeps state "
                                         "but cannot reset it for a rollback in place")

    def close(self) -> None:
        if hasattr(self.obj, "close") and callable(self.obj.close):
            self.obj.close()


@runs(MapSpec)
class MapOp(Operator):
    """``map``; on a keyed stream a rich function (one with ``open``) gets keyed state."""

    #: whether its rich function gets keyed state on a keyed stream
    keyed_functions = True

    def __init__(self, node: Transformation, plan: ChainPlan) -> None:
        super().__init__(node, plan)
        assert isinstance(node.spec, FunctionSpec)
        self.obj, self.fn = bind(node.spec.fn, node.spec.method)  # see ._calls: which classes are built
        self.keyed: KeyedFunctionState | None = None

    def open(self, ctx: RuntimeContext) -> None:
        key_fn = self.node.key_fn_of(0)
        if self.keyed_functions and key_fn is not None and callable(getattr(self.obj, "open", None)):
            self.keyed = KeyedFunctionState(self.node, self.max_parallelism, ctx)
            self.fn = self.keyed.wrap(self.fn, key_fn)
        super().open(ctx)

    def snapshot_state(self, checkpoint_id: int) -> Any:
        return None if self.keyed is None else self.keyed.snapshot()

    def reset(self) -> None:
        if self.keyed is not None:
            self.keyed.engine.reset()

    def restore_state(self, states: list[Any], index: int, parallelism: int) -> None:
        if self.keyed is not None:
            self.keyed.restore(states, index, parallelism)

    def process(self, chunk: Any) -> Any:
        fn = self.fn
        if isinstance(chunk, Annotated):  # one output per record: its record's position, timestamp
            return chunk.with_data([fn(r) for r in _calls(chunk)])
        return [fn(r) for r in _calls(chunk)]


@runs(FlatMapSpec)
class FlatMapOp(MapOp):
    def process(self, chunk: Any) -> Any:
        fn = self.fn
        try:
            if isinstance(chunk, Annotated):  # each record's outputs apart: they take its position
                return chunk.expanded([[*fn(r)] for r in _calls(chunk)])
            return [out for r in _calls(chunk) for out in fn(r)]
        except TypeError as exc:  # a result that is not iterable? (else fn's own error)
            if (error := not_iterable(self.node.name, exc, __name__)) is None:
                raise
        raise error  # out of the except: not chained to the loop's error


@runs(FilterSpec)
class FilterOp(MapOp):
    def process(self, chunk: Any) -> Any:
        fn = self.fn
        if isinstance(chunk, Annotated):
            return chunk.kept([bool(fn(r)) for r in _calls(chunk)])
        return [r for r in _calls(chunk) if fn(r)]


@runs(MapBatchesSpec)
class MapBatchesOp(MapOp):
    """Batches of ``batch_size`` records; with ``max_wait`` (seconds) a partial batch is
    also called once its first record has waited that long (as Ray Serve's batching)."""

    keyed_functions = False

    def __init__(self, node: Transformation, plan: ChainPlan) -> None:
        super().__init__(node, plan)
        assert isinstance(node.spec, MapBatchesSpec)
        self.spec = node.spec
        self.batch_size = node.spec.batch_size
        self.max_wait = None if node.spec.max_wait is None else float(node.spec.max_wait)
        self.pending: list[Any] = []
        self.pending_len = 0
        self.first_waiting = 0.0
        self.stage: DeviceStage | PlainStage | None = None  # set with ``device`` (PlainStage: NumPy)
        #: the annotations (positions, timestamps) of each batch in the stage, oldest first
        self.staged_positions: deque[Any] = deque()

    def open(self, ctx: RuntimeContext) -> None:
        super().open(ctx)
        if self.spec.device is not None:
            from accelflow.runtime.subtask._device import open_stage

            self.stage = open_stage(self.fn, self.spec, self.node.name)

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
        return join_chunks(outputs)

    def finish(self) -> Any:
        if self.stage is not None:  # the partial batch, then every batch still in flight
            return self._drained(self._call(self._take(self.pending_len)) if self.pending_len else [])
        if not self.pending_len:
            return []
        return self._call(self._take(self.pending_len))

    flush = finish  # a barrier closes the partial batch: the checkpoint holds no records

    def reset(self) -> None:
        """Drop the partial batch and the batches still on the device (their outputs too)."""
        self.pending, self.pending_len = [], 0
        if self.stage is not None:
            self.stage.drain()
        self.staged_positions.clear()

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
        finished meanwhile). ``fn`` gets the records only; :class:`Annotated` input gives
        each output its record's position and timestamp."""
        positions = None
        if any(isinstance(c, Annotated) for c in chunks):
            positions = join_chunks(chunks)  # the annotations of the batch (around its records)
            chunks = [positions.stripped()]
        if self.stage is not None:
            if positions is not None:
                self.staged_positions.append(positions)
            return self._joined(self.stage.submit(chunks))
        return self._placed(positions, from_batch(self.fn(to_batch(chunks)), self.node.name))

    def _drained(self, out: Any) -> Any:
        assert self.stage is not None
        chunks = [c for c in (out, self._joined(self.stage.drain())) if len(c)]
        return join_chunks(chunks) if chunks else []

    def _joined(self, results: list[Any]) -> Any:
        """The chunk of the stage's ``results`` (what ``fn`` returned per batch), in order."""
        chunks = [r if isinstance(r, list | Columns) else from_batch(r, self.node.name) for r in results]
        if self.staged_positions:  # one result per batch submitted, oldest first
            chunks = [self._placed(self.staged_positions.popleft(), c) for c in chunks]
        chunks = [c for c in chunks if len(c)]
        return join_chunks(chunks) if chunks else []

    def _placed(self, positions: Any, chunk: Any) -> Any:
        """``chunk`` with the annotations of the batch ``positions`` (None: as it is): each
        output takes its record's; a batch whose outputs are not one per record gives them the
        batch's latest timestamp (with positions, one output per record is needed)."""
        if positions is None:
            return chunk
        if len(chunk) == len(positions):
            return positions.with_data(chunk)
        if isinstance(positions, Timestamped) and not isinstance(positions.data, Annotated):
            return stamped(chunk, np.full(len(chunk), positions.timestamps.max(initial=MIN_TIMESTAMP)))
        raise JobError(
            f"operator {self.node.name!r} (map_batches) returned {len(chunk)} outputs for a "
            f"batch of {len(positions)} records: execute_and_collect(ordered=True) puts each "
            "output at its record's position, so it needs one output per record")


@runs(ReduceSpec)
class ReduceOp(MapOp):
    """One value per key: emitted for every record (``rolling``: streaming mode, a fact of
    the run in the :class:`ChainPlan`), or once per key at the end."""

    keyed_functions = False

    def __init__(self, node: Transformation, plan: ChainPlan) -> None:
        super().__init__(node, plan)
        self.key_fn = node.key_fn
        self.rolling = plan.rolling
        self.max_parallelism = plan.max_parallelism
        self.state: dict[Any, Any] = {}

    def process(self, chunk: Any) -> Any:
        state, key_fn, fn = self.state, self.key_fn, self.fn
        out = []
        try:
            for r in iter_records(chunk):
                key = canonical_key(key_fn(r))  # NaN keys are one key, as in Flink
                value = fn(state[key], r) if key in state else r
                state[key] = value
                if self.rolling:
                    out.append(value)
            return out
        except TypeError:  # a key that is no key (a list)? else fn's own error
            if (error := unhashable_key(self.node.name, key_fn, iter_records(chunk))) is None:
                raise
        raise error  # out of the except: not chained to the loop's error

    def finish(self) -> Any:
        return [] if self.rolling else list(self.state.values())

    def reset(self) -> None:
        self.state.clear()

    def snapshot_state(self, checkpoint_id: int) -> Any:
        return dict(self.state)

    def restore_state(self, states: list[Any], index: int, parallelism: int) -> None:
        # key groups as in Flink: each key goes back to the subtask that owns its key group
        # (where its records are routed), whatever the parallelism the checkpoint was taken
        # with; a checkpoint from before key groups ({key: value} too) restores alike
        maxp = self.max_parallelism
        for state in states:
            for key, value in (state or {}).items():
                if subtask_for_key(key, parallelism, maxp) == index:
                    self.state[canonical_key(key)] = value  # an unpickled NaN is a new object


def _calls(chunk: Any) -> Any:
    """The records of ``chunk``, one call of user code each for the watchdog (not one long
    call per chunk: see ``accelflow._loops.LOOP``)."""
    return watched(iter_records(chunk))


def _slice(chunk: Any, start: int, stop: int) -> Any:
    if isinstance(chunk, Columns):
        return chunk.slice(start, stop)
    return chunk[start:stop]


def join_chunks(outputs: list[Any]) -> Any:
    """One chunk of ``outputs`` (chunks of one operator, in order)."""
    if len(outputs) == 1:
        return outputs[0]
    if outputs and all(isinstance(o, Annotated) for o in outputs) and len({type(o) for o in outputs}) == 1:
        return type(outputs[0])(np.concatenate([o.rows for o in outputs]), join_chunks([o.data for o in outputs]))
    if any(isinstance(o, Timestamped) for o in outputs):  # records with and without timestamps
        return join_chunks([o if isinstance(o, Timestamped) else stamped(o, [None] * len(o)) for o in outputs])
    if outputs and all(isinstance(o, np.ndarray) for o in outputs):
        return np.concatenate(outputs)
    if outputs and all(isinstance(o, Columns) for o in outputs) and len({len(o.columns()) for o in outputs}) == 1:
        return Columns(to_batch(outputs))  # the columns, each joined
    records: list[Any] = []
    for out in outputs:
        records.extend(iter_records(out))
    return records
