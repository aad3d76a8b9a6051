"""The event-time operators of a subtask: each runs one of the pure engines of phase 1
(``_window_engine``, ``_process_engine``, ``_interval_join``, ``_watermarks``) on chunks.

Records come in with their timestamps (:class:`~accelflow.dataflow.Timestamped` chunks) and
keys (the key selector of their input's ``key_by``); outputs leave stamped (a window result
at its window's ``max_timestamp()``, an element's output at its timestamp); side outputs go
to :attr:`Operator.side`; watermarks advance the engine (:meth:`process_watermark`);
processing-time timers are the runner's deadlines. Snapshots hold keyed state and timers per
key group, so a restore at another parallelism takes back exactly the groups each subtask
owns.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from accelflow._errors import JobError
from accelflow.dataflow import (
    CoProcessSpec, IntervalJoinSpec, ProcessSpec, RuntimeContext, TimestampsSpec, Transformation, UnionSpec,
    SplitTagged, Timestamped, WindowSpec,
    iter_records, stamped, timestamps_of, unstamped, untagged,
)
from accelflow.dataflow.eventtime import MAX_TIMESTAMP, MIN_TIMESTAMP, EventTimeTrigger
from accelflow.runtime import ChainPlan, StreamStatus, Watermark
from accelflow.runtime.subtask._calls import unhashable_key
from accelflow.runtime.subtask._engine_base import Outputs
from accelflow.runtime.subtask._interval_join import IntervalJoinEngine
from accelflow.runtime.subtask._keyed_functions import KeyedState
from accelflow.runtime.subtask._operators import Operator, runs
from accelflow.runtime.subtask._process_engine import CoProcessEngine, KeyedProcessEngine
from accelflow.runtime.subtask._watermarks import SplitWatermarks, WatermarkStatus
from accelflow.runtime.subtask._window_engine import WindowEngine


def now_ms() -> int:
    """Processing time: the wall clock in epoch milliseconds."""
    return time.time_ns() // 1_000_000


def outputs_chunk(op: Operator, out: Outputs) -> Any:
    """The main outputs of an engine call as a stamped chunk; its side outputs into ``op.side``."""
    if out.side:
        tags: dict[str, tuple[list[Any], list[int | None]]] = {}
        for tag, value, timestamp in out.side:
            values, stamps = tags.setdefault(tag, ([], []))
            values.append(value)
            stamps.append(timestamp)
        op.side.extend((tag, stamped(values, stamps)) for tag, (values, stamps) in tags.items())
    if not out.records:
        return []
    return stamped([v for v, _ in out.records], [t for _, t in out.records])


class EngineOp(Operator):
    """An operator that runs an engine (built in :meth:`open`, with the subtask's context)."""

    engine: Any

    def __init__(self, node: Transformation, plan: ChainPlan) -> None:
        super().__init__(node, plan)
        self.max_parallelism = plan.max_parallelism
        self.keys = (node.key_fn_of(0), node.key_fn_of(1))
        self.state = KeyedState(node, plan.max_parallelism)

    def make_engine(self, ctx: RuntimeContext) -> Any:
        raise NotImplementedError

    def open(self, ctx: RuntimeContext) -> None:
        self.engine = self.make_engine(ctx)
        self.engine.open()

    def close(self) -> None:
        engine = getattr(self, "engine", None)
        if engine is not None:
            engine.close()

    def element(self, value: Any, timestamp: int | None, key: Any, input_index: int) -> Outputs:
        return self.engine.process_element(value, timestamp, key=key)  # type: ignore[no-any-return]

    def process(self, chunk: Any) -> Any:
        return self.process_input(chunk, 0)

    def process_input(self, chunk: Any, input_index: int) -> Any:
        out = Outputs()
        key_fn = self.keys[input_index]
        stamps = timestamps_of(chunk) or [None] * len(chunk)
        element = self.element
        try:
            for value, timestamp in zip(iter_records(chunk), stamps):
                out.extend(element(value, timestamp, key_fn(value) if key_fn is not None else None, input_index))
            return outputs_chunk(self, out)
        except TypeError:  # a key that is no key (a list)? else the function's own error
            if (error := self.key_error(input_index, iter_records(chunk))) is None:
                raise
        raise error  # out of the except: not chained to the loop's error

    def key_error(self, input_index: int, records: Any) -> TypeError | None:
        """The error for the first of ``records`` (of input ``input_index``) whose key cannot be
        a key (see :func:`~._calls.unhashable_key`), or None: called once a TypeError was raised,
        so that the per-record loops check nothing."""
        key_fn = self.keys[input_index]
        return None if key_fn is None else unhashable_key(self.node.name, key_fn, records)

    def process_watermark(self, timestamp: int) -> Any:
        return outputs_chunk(self, self.engine.advance_watermark(timestamp))

    def deadline(self) -> float | None:
        due = self.engine.timers.next_processing_time()
        return None if due is None else time.monotonic() + (due - now_ms()) / 1000

    def on_deadline(self) -> Any:
        return outputs_chunk(self, self.engine.advance_processing_time(now_ms()))

    def snapshot_state(self, checkpoint_id: int) -> Any:
        return self.state.snapshot(self.engine)

    def reset(self) -> None:
        self.engine.reset()  # keyed state (window contents, join buffers) and timers

    def restore_state(self, states: list[Any], index: int, parallelism: int) -> None:
        self.state.restore(self.engine, states, index, parallelism)


@runs(UnionSpec)
class UnionOp(Operator):
    """``union``: the records of every input, as they come."""

    def process(self, chunk: Any) -> Any:
        return chunk


#: records an event-time window operator gathers before adding them at once (fewer, larger
#: groups per (key, window)); it adds them sooner at a watermark, a checkpoint, the end, and
#: whenever its input has nothing more for now
WINDOW_BATCH_RECORDS = 16_384


@runs(WindowSpec)
class WindowOp(EngineOp):
    """``window(...).reduce/aggregate/process/apply`` and ``window_all``.

    Chunks go into the engine whole (``WindowEngine.process_chunk``). With event-time
    windows fired by the watermark (``EventTimeTrigger``, the default), an element on time
    emits nothing until a watermark, so chunks are gathered (up to
    :data:`WINDOW_BATCH_RECORDS` records, or until the input is idle) and added together
    before the next watermark, checkpoint or end: the same outputs in the same order.
    """

    flushes_when_idle = True

    def make_engine(self, ctx: RuntimeContext) -> Any:
        spec = self.node.spec
        assert isinstance(spec, WindowSpec)
        self.event_time = spec.assigner.is_event_time()
        self.pending: list[tuple[list[Any], Any, list[Any]]] = []
        self.pending_records = 0
        engine = WindowEngine(
            self.node.name, spec.assigner, trigger=spec.trigger, reduce_function=spec.reduce_function,
            aggregate_function=spec.aggregate_function, window_function=spec.window_function,
            allowed_lateness=spec.allowed_lateness, late_data_output_tag=spec.late_tag,
            all_window=spec.all_window, max_parallelism=self.max_parallelism, runtime_context=ctx)
        self.gathers = self.event_time and type(engine.trigger) is EventTimeTrigger
        return engine

    def process_input(self, chunk: Any, input_index: int) -> Any:
        n = len(chunk)
        stamps = chunk.timestamps if isinstance(chunk, Timestamped) else np.full(n, MIN_TIMESTAMP, np.int64)
        if self.event_time and n and stamps.min() <= MIN_TIMESTAMP:
            return super().process_input(chunk, input_index)  # one at a time: the error names the record
        values = chunk.stripped() if isinstance(chunk, Timestamped) else chunk
        values = values if isinstance(values, list) else list(iter_records(values))
        key_fn = self.keys[input_index]
        keys = [key_fn(v) for v in values] if key_fn is not None else [None] * n
        if not self.gathers:
            return outputs_chunk(self, self._add([(values, stamps, keys)]))
        self.pending.append((values, stamps, keys))
        self.pending_records += n
        return self.flush() if self.pending_records >= WINDOW_BATCH_RECORDS else []

    def _added(self) -> Outputs:
        """What adding the gathered chunks emits (late elements only)."""
        if not self.pending:
            return Outputs()
        pending, self.pending, self.pending_records = self.pending, [], 0
        return self._add(pending)

    def _add(self, chunks: list[tuple[list[Any], Any, list[Any]]]) -> Outputs:
        """Adds chunks of (values, timestamps, keys) to the engine, which hashes their keys
        first: an unhashable one is explained here (a window's only input is input 0)."""
        try:
            if len(chunks) == 1:
                return self.engine.process_chunk(*chunks[0])  # type: ignore[no-any-return]
            return self.engine.process_chunk(  # type: ignore[no-any-return]
                [v for values, _, _ in chunks for v in values], np.concatenate([s for _, s, _ in chunks]),
                [k for _, _, keys in chunks for k in keys])
        except TypeError:
            if (error := self.key_error(0, (v for values, _, _ in chunks for v in values))) is None:
                raise
        raise error

    def holds(self) -> bool:
        return bool(self.pending)

    def reset(self) -> None:
        self.pending, self.pending_records = [], 0  # gathered after the checkpoint: replayed
        super().reset()

    def flush(self) -> Any:
        return outputs_chunk(self, self._added())

    def finish(self) -> Any:
        return self.flush()

    def process_watermark(self, timestamp: int) -> Any:
        out = self._added()
        out.extend(self.engine.advance_watermark(timestamp))
        return outputs_chunk(self, out)

    def on_deadline(self) -> Any:
        out = self._added()
        out.extend(self.engine.advance_processing_time(now_ms()))
        return outputs_chunk(self, out)

    def snapshot_state(self, checkpoint_id: int) -> Any:
        assert not self.pending, "the runner flushes before a snapshot"
        return super().snapshot_state(checkpoint_id)

    def element(self, value: Any, timestamp: int | None, key: Any, input_index: int) -> Outputs:
        if timestamp is None and self.event_time:
            raise JobError(
                f"operator {self.node.name!r}: a record has no timestamp ({value!r:.80}); event-time windows need "
                "them: call assign_timestamps_and_watermarks(WatermarkStrategy...) before the window, or use a "
                "processing-time window")
        return self.engine.process_element(value, timestamp, key=key)  # type: ignore[no-any-return]


@runs(ProcessSpec)
class ProcessOp(EngineOp):
    """``process(ProcessFunction)`` and ``key_by(...).process(KeyedProcessFunction)``."""

    def make_engine(self, ctx: RuntimeContext) -> Any:
        return KeyedProcessEngine(self.node.spec.fn, self.node.name, keyed=self.node.spec.keyed,  # type: ignore[attr-defined]
                                  max_parallelism=self.max_parallelism, runtime_context=ctx)


@runs(CoProcessSpec)
class CoProcessOp(EngineOp):
    """``connect(other).map/flat_map/process`` (keyed with ``key_by(k1, k2)``)."""

    def make_engine(self, ctx: RuntimeContext) -> Any:
        return CoProcessEngine(self.node.spec.fn, self.node.name, keyed=self.node.spec.keyed,  # type: ignore[attr-defined]
                               max_parallelism=self.max_parallelism, runtime_context=ctx)

    def element(self, value: Any, timestamp: int | None, key: Any, input_index: int) -> Outputs:
        return self.engine.process_element(value, timestamp, key, input_index)  # type: ignore[no-any-return]


@runs(IntervalJoinSpec)
class IntervalJoinOp(CoProcessOp):
    """``interval_join(...).between(lower, upper).process(ProcessJoinFunction)``."""

    def make_engine(self, ctx: RuntimeContext) -> Any:
        spec = self.node.spec
        assert isinstance(spec, IntervalJoinSpec)
        return IntervalJoinEngine(
            spec.fn, self.node.name, spec.lower, spec.upper, lower_bound_inclusive=spec.lower_inclusive,
            upper_bound_inclusive=spec.upper_inclusive, left_late_data_output_tag=spec.left_late_tag,
            right_late_data_output_tag=spec.right_late_tag, max_parallelism=self.max_parallelism,
            runtime_context=ctx)


@runs(TimestampsSpec)
class TimestampsOp(Operator):
    """``assign_timestamps_and_watermarks(strategy)``: stamps each record, makes a watermark
    every ``pipeline.auto-watermark-interval`` (and the idleness statuses); the input's own
    watermarks stop here, but the final one of a bounded input. Chained to a source that says
    which split each record comes from (a :class:`SplitTagged` chunk, e.g. Kafka's
    partitions), it makes the watermark per split (:class:`SplitWatermarks`)."""

    generates_watermarks = True

    def __init__(self, node: Transformation, plan: ChainPlan) -> None:
        super().__init__(node, plan)
        spec = node.spec
        assert isinstance(spec, TimestampsSpec)
        periodic = spec.strategy.kind != "none" and plan.watermark_interval_ms > 0
        self.interval = plan.watermark_interval_ms / 1000 if periodic else None
        self.reset()

    def reset(self) -> None:
        """A new generator (no watermark yet), as at the start."""
        spec = self.node.spec
        assert isinstance(spec, TimestampsSpec)
        self.generator = SplitWatermarks(spec.strategy, self.node.name)
        self.next_emit = time.monotonic() + (self.interval or 0)

    def process(self, chunk: Any) -> Any:
        splits = (chunk.rows, chunk.splits) if isinstance(chunk, SplitTagged) else None
        chunk = untagged(chunk)
        values = unstamped(chunk)
        records = values if isinstance(values, list) else list(iter_records(values))
        stamps, events = self.generator.process_chunk(
            records, chunk.timestamps if isinstance(chunk, Timestamped) else None, splits)
        self.events += [_event(e) for e in events]
        return stamped(values, stamps)

    def deadline(self) -> float | None:
        return None if self.interval is None else self.next_emit

    def on_deadline(self) -> Any:
        assert self.interval is not None
        now = time.monotonic()
        self.next_emit = max(self.next_emit + self.interval, now)
        self.events += [_event(e) for e in self.generator.on_periodic_emit(now_ms())]
        return []

    def process_watermark(self, timestamp: int) -> Any:
        if timestamp == MAX_TIMESTAMP:  # the end of a bounded input
            self.generator.end_of_input()
        return []

    def snapshot_state(self, checkpoint_id: int) -> Any:
        return self.generator.snapshot()

    def restore_state(self, states: list[Any], index: int, parallelism: int) -> None:
        self.generator.restore([s for s in states if s])


def _event(event: Any) -> Watermark | StreamStatus:
    if isinstance(event, WatermarkStatus):
        return StreamStatus(event is WatermarkStatus.IDLE)
    return Watermark(event.timestamp)


from accelflow.runtime.subtask import _broadcast  # noqa: E402,F401 (registers the broadcast state operator)
