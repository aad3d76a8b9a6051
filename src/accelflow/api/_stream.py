"""``DataStream``: a stream of records, and every transformation on it.

Example:
    >>> env = Environment({"parallelism.default": 2})
    >>> env.from_sequence(1, 10).map(lambda x: x * x).filter(lambda x: x % 2).execute_and_collect()
    [1, 9, 25, 49, 81]
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, overload

from accelflow._errors import ConfigError
from accelflow.connectors import SingleFileSink, writes_text
from accelflow.dataflow import (
    CollectSinkSpec, Edge, FileSinkSpec, FilterSpec, FlatMapSpec, MapBatchesSpec, MapSpec, OperatorSpec,
    Partitioning, PrintSinkSpec, ProcessSpec, ResidentMapBatchesSpec, ResidentMapSpec, Sink, SinkToSpec,
    TimestampsSpec, UnionSpec, UserSinkSpec, FlinkText, in_order, is_typed,
)
from accelflow.dataflow.eventtime import OutputTag
from accelflow.config import keys as k
from accelflow.api._environment import Environment, check_parallelism
from accelflow.api._names import shown, unique_name
from accelflow.api._ordered import keep_order
from accelflow.api._pyflink import CollectedRecords
from accelflow.scheduling import Amount

if TYPE_CHECKING:
    from accelflow.api._broadcast import BroadcastConnectedStream, BroadcastStream
    from accelflow.api._connected import ConnectedStreams
    from accelflow.api._joined import CoGroupedStreams, JoinedStreams
    from accelflow.api._keyed import KeyedStream, WindowedStream


class DataStream:
    """A stream of records; every transformation returns a new ``DataStream``.

    Every transformation takes ``name=``, ``parallelism=`` and ``resources=`` (e.g.
    ``{"gpu": 1}``, ``{"gpu": 0.25}``, ``{"fpga": 2}``), or PyFlink's fluent
    ``.name()``, ``.uid()``, ``.set_parallelism()`` on the stream it returns. PyFlink's
    ``output_type`` arguments are accepted and not needed.
    """

    def __init__(self, env: Environment, transformation_id: int, partitioning: Partitioning = "forward",
                 key_fn: Any = None, *, partitioner: Any = None, side: str | None = None) -> None:
        self._env = env
        self._id = transformation_id
        self._partitioning: Partitioning = partitioning
        self._key_fn = key_fn
        self._partitioner = partitioner
        self._side = side

    @property
    def parallelism(self) -> int:
        return self._env._transformations[self._id].parallelism

    def _edge(self, input_index: int = 0) -> Edge:
        return Edge(self._id, self._partitioning, self._key_fn, self._partitioner, self._side, input_index)

    def _then(self, spec: OperatorSpec, name: str | None, parallelism: int | None,
              resources: Mapping[str, Amount] | None = None) -> DataStream:
        return self._env._add(spec, spec.kind if name is None else name, parallelism, [self._edge()],
                              resources=resources)

    def _resident(self, resident: Any, name: str) -> bool:
        return _check_resident(resident, name, keyed=self._partitioning == "hash")

    def _declare(self, type_info: Any) -> DataStream:
        """Record PyFlink's declared type of this stream's records (``output_type=``): typed
        records print as PyFlink's (Java's ``toString``, see ``FlinkText``)."""
        if type_info is not None:
            self._env._types[self._id] = type_info
        return self

    def _as_text(self, sink_name: str) -> DataStream:
        """This stream, or its records as PyFlink writes them when they have a declared type."""
        type_info = self._env._types.get(self._id)
        if not is_typed(type_info):
            return self
        return self._then(MapSpec(FlinkText(type_info)), f"{sink_name} (as text)", self.parallelism)

    def _view(self, partitioning: Partitioning, key_fn: Any = None, partitioner: Any = None) -> DataStream:
        return DataStream(self._env, self._id, partitioning, key_fn, partitioner=partitioner, side=self._side)

    # -- one record at a time -------------------------------------------------------------------
    def map(self, fn: Any, output_type: Any = None, *, name: str | None = None, parallelism: int | None = None,
            resources: Mapping[str, Amount] | None = None, resident: bool = False) -> DataStream:
        """One output per record: ``fn(x)`` or a ``RichMapFunction`` (after ``key_by``, its
        ``open(ctx)`` gets keyed state: ``ctx.get_state(ValueStateDescriptor(...))``).
        ``resident=True``: one instance per device, opened once and kept (see :meth:`map_batches`)."""
        spec = (ResidentMapSpec if self._resident(resident, name or "map") else MapSpec)(fn)
        return self._then(spec, name, parallelism, resources)._declare(output_type)

    def flat_map(self, fn: Any, output_type: Any = None, *, name: str | None = None,
                 parallelism: int | None = None, resources: Mapping[str, Amount] | None = None) -> DataStream:
        """Zero or more outputs per record: ``fn(x)`` returns an iterable."""
        return self._then(FlatMapSpec(fn), name, parallelism, resources)._declare(output_type)

    def filter(self, fn: Any, *, name: str | None = None, parallelism: int | None = None,
               resources: Mapping[str, Amount] | None = None) -> DataStream:
        """Keep records for which ``fn(x)`` is true."""
        return self._then(FilterSpec(fn), name, parallelism, resources)

    def map_batches(self, fn: Any, *, batch_size: int | None = None, max_wait: float | None = None,
                    name: str | None = None, parallelism: int | None = None,
                    resources: Mapping[str, Amount] | None = None, device: str | None = None,
                    prefetch: int = 2, device_backend: str | None = None, resident: bool = False) -> DataStream:
        """Vectorized map: ``fn(batch)`` gets up to ``batch_size`` records at once (a NumPy
        array of rows, a tuple of column arrays for tuple records, or a list) and returns a
        batch of outputs (array, tuple of arrays, or list).

        ``max_wait`` (seconds) bounds latency: a batch is also closed when its first record
        has waited that long, full or not (as Ray Serve's ``batch_wait_timeout_s``). Without
        it a partial batch waits for more records, a checkpoint or the end of the input.

        ``device="cuda"``: ``fn`` gets the batch's numeric arrays on the subtask's CUDA device
        (CuPy arrays, or torch tensors; ``device_backend`` picks one), copied through pinned
        buffers on a copy stream while the batch before computes, with up to ``prefetch``
        batches in flight; its outputs come back as NumPy. ``device="auto"``: the same where
        CuPy or PyTorch sees a GPU, else plain NumPy batches (the log says why). See
        ``docs/gpu.md``, "map_batches on the device".

        ``resident=True``: ``fn`` (e.g. a model class) gets one instance per device, in the
        device's host process, opened once and kept for the job's later attempts and, on a
        session cluster, later jobs with the same operator (its pickled bytes); every subtask on
        the device (e.g. two at ``{"gpu": 0.5}``) sends its records there, and batches of
        several subtasks run together up to ``batch_size`` (such a batch needs one output per
        record). The operator must ask for (a share of) one device, and cannot follow
        ``key_by()`` (the instance has no keyed state). See ``docs/gpu.md``, "Warm devices and
        resident models".
        """
        size = batch_size if batch_size is not None else self._env.config.get(k.BATCH_SIZE)
        cls = ResidentMapBatchesSpec if self._resident(resident, name or "map_batches") else MapBatchesSpec
        spec = cls(fn, batch_size=size, max_wait=max_wait, device=device, prefetch=prefetch,
                   device_backend=device_backend)
        return self._then(spec, name, parallelism, resources)

    def process(self, fn: Any, output_type: Any = None, *, name: str | None = None,
                parallelism: int | None = None) -> DataStream:
        """A ``ProcessFunction``: ``process_element(value, ctx)`` yields or returns its outputs,
        ``ctx.timestamp()`` is the record's event time, ``ctx.output(tag, value)`` a side
        output (see :meth:`get_side_output`); timers and state need ``key_by`` first."""
        return self._then(ProcessSpec(fn), name, parallelism)._declare(output_type)

    def assign_timestamps_and_watermarks(self, watermark_strategy: Any, *, name: str | None = None) -> DataStream:
        """Each record's event time from the strategy's timestamp assigner (a Kafka record
        keeps its own when the strategy has none), and a watermark every
        ``pipeline.auto-watermark-interval`` (200 ms), e.g.
        ``WatermarkStrategy.for_bounded_out_of_orderness(timedelta(seconds=5))
        .with_timestamp_assigner(lambda event, ts: event["time"])``."""
        return self._then(TimestampsSpec(watermark_strategy), name, self.parallelism)

    def get_side_output(self, output_tag: OutputTag) -> DataStream:
        """The records the operator of this stream sent to side output ``output_tag``
        (``ctx.output(tag, value)``, a window's late data)."""
        if not isinstance(output_tag, OutputTag):
            raise ConfigError(f"get_side_output needs an OutputTag, got {shown(output_tag)}",
                              key=f"operator {self._operator.name!r}")
        return DataStream(self._env, self._id, side=output_tag.tag_id)

    # -- partitioning ---------------------------------------------------------------------------
    def key_by(self, key_fn: Callable[[Any], Any], key_type: Any = None) -> KeyedStream:
        """Partition by ``key_fn(x)``: ``reduce``, ``sum``, ``min``..., windows, keyed process
        functions and keyed state follow. Keys compare as in Flink: every NaN (``float("nan")``,
        NumPy's, also inside a tuple key) is one key, although ``nan != nan`` in Python; a
        key's records go to the subtask owning its key group (``pipeline.max-parallelism``)."""
        from accelflow.api._keyed import KeyedStream

        if not callable(key_fn):
            raise ConfigError(f"expected a function of a record, got {type(key_fn).__name__}", key="key_by()")
        return KeyedStream(self._env, self._id, "hash", key_fn, side=self._side)

    def rebalance(self) -> DataStream:
        """Spread records round-robin over the next operator's subtasks."""
        return self._view("rebalance")

    def rescale(self) -> DataStream:
        """Round-robin over a share of the next operator's subtasks (Flink's ``rescale``:
        each subtask feeds only its own share, fewer channels than ``rebalance``)."""
        return self._view("rescale")

    def shuffle(self) -> DataStream:
        """Each record to a random subtask of the next operator."""
        return self._view("shuffle")

    @overload
    def broadcast(self) -> DataStream: ...

    @overload
    def broadcast(self, *broadcast_state_descriptors: Any) -> BroadcastStream: ...

    def broadcast(self, *broadcast_state_descriptors: Any) -> DataStream | BroadcastStream:
        """Every record to every subtask of the next operator. With descriptors (PyFlink's
        broadcast state pattern), a :class:`~accelflow.api.BroadcastStream` to ``connect``:
        ``stream.connect(rules.broadcast(MapStateDescriptor(...))).process(BroadcastProcessFunction)``."""
        if broadcast_state_descriptors:
            from accelflow.api._broadcast import BroadcastStream

            return BroadcastStream(self._view("broadcast"), broadcast_state_descriptors)
        return self._view("broadcast")

    def join(self, other_stream: DataStream) -> JoinedStreams:
        """A window join with ``other_stream``: ``.where(key).equal_to(other_key)
        .window(assigner).apply(JoinFunction)`` gets each pair of a window's records with
        equal keys, one from each stream (see :class:`~accelflow.api.JoinedStreams`)."""
        from accelflow.api._joined import JoinedStreams

        self._same_job(other_stream, "join")
        return JoinedStreams(self, other_stream)

    def co_group(self, other_stream: DataStream) -> CoGroupedStreams:
        """A window co-group with ``other_stream``: ``.where(key).equal_to(other_key)
        .window(assigner).apply(CoGroupFunction)`` gets, per key and window, the window's
        records of each stream (see :class:`~accelflow.api.CoGroupedStreams`)."""
        from accelflow.api._joined import CoGroupedStreams

        self._same_job(other_stream, "co_group")
        return CoGroupedStreams(self, other_stream)

    def forward(self) -> DataStream:
        """Each subtask to the next operator's subtask of the same index (the default)."""
        return self._view("forward")

    def partition_custom(self, partitioner: Any, key_selector: Callable[[Any], Any]) -> DataStream:
        """Each record to subtask ``partitioner(key_selector(x), num_partitions)``
        (a function, or a PyFlink ``Partitioner`` with ``partition(key, num_partitions)``)."""
        fn = getattr(partitioner, "partition", partitioner)
        if not callable(fn) or not callable(key_selector):
            raise ConfigError("partition_custom needs a partitioner (a function (key, num_partitions) -> int or an "
                              f"object with partition()) and a key selector, got {shown(partitioner)} and "
                              f"{shown(key_selector)}", key="partition_custom()")
        return self._view("custom", key_selector, partitioner)

    # -- several streams ------------------------------------------------------------------------
    def union(self, *streams: DataStream) -> DataStream:
        """The records of this stream and of ``streams`` (of the same type), as they come."""
        for other in streams:
            self._same_job(other, "union")
        if not streams:
            return self
        edges = [s._edge(0) for s in (self, *streams)]
        return self._env._add(UnionSpec(), "union", self.parallelism, edges)

    @overload
    def connect(self, ds: BroadcastStream) -> BroadcastConnectedStream: ...

    @overload
    def connect(self, ds: DataStream) -> ConnectedStreams: ...

    def connect(self, ds: DataStream | BroadcastStream) -> ConnectedStreams | BroadcastConnectedStream:
        """Two streams for one operator with two inputs: ``.map(CoMapFunction)``,
        ``.flat_map(CoFlatMapFunction)``, ``.process(CoProcessFunction)``, or
        ``.key_by(k1, k2).process(KeyedCoProcessFunction)`` with shared keyed state and timers.
        With a ``BroadcastStream`` (``rules.broadcast(MapStateDescriptor(...))``), a
        ``BroadcastConnectedStream``: ``.process((Keyed)BroadcastProcessFunction)``."""
        from accelflow.api._broadcast import BroadcastConnectedStream, BroadcastStream
        from accelflow.api._connected import ConnectedStreams

        if isinstance(ds, BroadcastStream):
            self._same_job(ds.stream, "connect")
            return BroadcastConnectedStream(self, ds)
        self._same_job(ds, "connect")
        return ConnectedStreams(self, ds)

    def _same_job(self, other: Any, what: str) -> None:
        if not isinstance(other, DataStream):
            raise ConfigError(f"{what} needs a DataStream, got {shown(other)}", key=f"{what}()")
        if other._env is not self._env:
            raise ConfigError(f"{what}: the streams belong to different Environments; build both from one",
                              key=f"{what}()")

    def interval_join(self, other: Any) -> Any:
        raise ConfigError("interval_join joins keyed streams: a.key_by(key).interval_join(b.key_by(key))",
                          key=f"operator {self._operator.name!r}")

    def window_all(self, window_assigner: Any) -> WindowedStream:
        """All records in windows (no key; one subtask), e.g. ``TumblingEventTimeWindows.of(...)``."""
        from accelflow.api._keyed import KeyedStream, WindowedStream

        return WindowedStream(KeyedStream(self._env, self._id, "hash", _no_key, side=self._side), window_assigner,
                              all_window=True)

    def count_window_all(self, size: int, slide: int = 0) -> WindowedStream:
        """Windows of ``size`` records (sliding by ``slide`` when given) over all records."""
        from accelflow.api._keyed import count_assigner

        return self.window_all(count_assigner(size, slide))

    # -- operator settings ------------------------------------------------------------------------
    @property
    def _operator(self) -> Any:
        return self._env._transformations[self._id]

    def _own(self, what: str) -> Any:
        if self._partitioning != "forward" or self._side is not None:
            raise ConfigError(f"{what} sets an operator's own setting: call it on the stream the operator "
                              "returned (before key_by, rebalance, get_side_output...)",
                              key=f"operator {self._operator.name!r}")
        return self._operator

    def name(self, name: str) -> DataStream:
        """Name the operator that made this stream (REST, metrics, logs, errors; and its
        state in checkpoints unless it has a :meth:`uid`)."""
        t = self._own("name()")
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"an operator's name must be a non-empty string, got {shown(name)}",
                              key=f"operator {t.name!r}")
        t.name = unique_name(name, self._env._transformations, own=t.id)
        return self

    def uid(self, uid: str) -> DataStream:
        """A stable id for the operator's state in checkpoints and savepoints: a restore
        matches state by uid (else by name), so renaming the operator keeps its state."""
        t = self._own("uid()")
        if not isinstance(uid, str) or not uid.strip():
            raise ConfigError(f"a uid must be a non-empty string, got {shown(uid)}", key=f"operator {t.name!r}")
        if (other := next((o for o in self._env._transformations if uid in (o.uid, o.name) and o is not t), None)):
            raise ConfigError(f"uid {uid!r} is taken by operator {other.name!r}: every operator's state needs its "
                              "own name", key=f"operator {t.name!r}")
        t.uid = uid
        return self

    def set_parallelism(self, parallelism: int) -> DataStream:
        """The operator's parallelism (as ``parallelism=``)."""
        t = self._own("set_parallelism()")
        check_parallelism(parallelism, f"operator {t.name!r}")
        t.parallelism = parallelism
        return self

    def set_max_parallelism(self, max_parallelism: int) -> DataStream:
        """The number of key groups of the operator's keyed state (``pipeline.max-parallelism``)."""
        t = self._own("set_max_parallelism()")
        check_parallelism(max_parallelism, f"operator {t.name!r}")
        t.max_parallelism = max_parallelism
        return self

    # -- sinks ------------------------------------------------------------------------------
    def print(self, *, name: str = "print") -> None:
        """Print every record to stdout (prefixed ``i> `` when parallel, as Flink)."""
        self._as_text(name)._then(PrintSinkSpec(), name, None)

    def sink_to_file(self, path: str | os.PathLike[str], *, name: str = "file sink",
                     parallelism: int | None = None) -> None:
        """Write one line per record (``str(record)``) to ``path``, atomically: the file is
        complete when the job succeeds and absent (or unchanged) when it fails: a
        :class:`~accelflow.connectors.SingleFileSink` (a two-phase sink whose parts are joined
        into ``path`` once the job has succeeded)."""
        self._then(FileSinkSpec(SingleFileSink(path)), name, parallelism)

    def sink_to(self, sink: Sink[Any], *, name: str | None = None, parallelism: int | None = None) -> None:
        """An exactly-once sink (``accelflow.connectors.files.FileSink``,
        ``accelflow.connectors.kafka.KafkaSink``, or any :class:`accelflow.Sink`): what it
        writes is published when the checkpoint covering it completes (two-phase commit),
        and at the end of a bounded job."""
        stream = self._as_text(name or type(sink).__name__) if writes_text(sink) else self
        stream._then(SinkToSpec(sink), name or type(sink).__name__, parallelism)

    def add_sink(self, sink: Any, *, name: str = "sink", parallelism: int | None = None) -> None:
        """A user sink: a ``SinkFunction`` (``invoke(x)``) or a plain callable."""
        self._then(UserSinkSpec(sink), name, parallelism)

    def execute_and_collect(self, job_name: str | None = None, limit: int | None = None, *,
                            ordered: bool = False) -> CollectedRecords:
        """Run the job and return this stream's records, in subtask order: each collecting
        subtask's records as they reached it, subtask 1's first. The list is also PyFlink's
        closeable iterator (``with ds.execute_and_collect() as results:``); ``limit`` keeps the
        first ``limit`` records (after the job ran to its end: a bounded job).

        With ``ordered=True`` they come in the order of the input, as Spark's ``collect()``
        after a ``map``, whatever the parallelism and however ``rebalance`` spread them:
        the source is a collection, a sequence, a NumPy array or an ``IdxSource`` (each
        record's position in it is known), and every operator after it is a ``map``,
        ``filter`` (the records kept, in order), ``flat_map`` (each record's outputs in the
        order it gave them) or ``map_batches`` (one output per record). After ``key_by``
        there is no input order to keep, and a ``ConfigError`` says so.

        Example:
            >>> env = Environment({"parallelism.default": 4})
            >>> env.from_sequence(1, 8, parallelism=1).rebalance().map(lambda x: x * 10) \\
            ...     .execute_and_collect(ordered=True)
            [10, 20, 30, 40, 50, 60, 70, 80]
        """
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise ConfigError(f"limit must be an integer >= 0, got {shown(limit)}", key="execute_and_collect(limit=)")
        records = list(self._collect(job_name, ordered).collected)
        return CollectedRecords(records if limit is None else records[:limit])

    def execute_and_collect_batch(self, job_name: str | None = None, *, ordered: bool = False) -> Any:
        """Run the job and return this stream's records as one batch, in subtask order (or,
        with ``ordered=True``, in the input's order, see :meth:`execute_and_collect`), as a
        ``map_batches`` function over the whole stream would receive it: one NumPy array
        for array rows and numbers (batches are joined, no Python object per record), a
        tuple of column arrays for tuples, else a list."""
        return self._collect(job_name, ordered).collected_batch()

    def _collect(self, job_name: str | None, ordered: bool) -> Any:
        if not isinstance(ordered, bool):
            raise ConfigError(f"ordered must be True or False, got {shown(ordered)}",
                              key="execute_and_collect(ordered=)")
        positioned = ordered and keep_order(self._env._transformations, self._id, self._partitioning)
        self._then(CollectSinkSpec(), "collect", None)
        result = self._env.execute(job_name)
        if positioned:
            result.chunks = in_order(result.chunks)
        return result


def _no_key(record: Any) -> int:
    """The key of ``window_all``: one for every record."""
    return 0


def _check_resident(resident: Any, name: str, keyed: bool) -> bool:
    """Whether the operator is resident (``resident`` checked).

    Raises:
        ConfigError: ``resident`` is not a bool, or True after ``key_by`` (a resident instance
            is shared by the subtasks of a device, so it has no keyed state).
    """
    if not isinstance(resident, bool):
        raise ConfigError(f"resident must be True or False, got {shown(resident)}", key=f"operator {name!r}")
    if resident and keyed:
        raise ConfigError(
            "resident=True cannot follow key_by(): a resident instance is one per device, shared by "
            "the subtasks of every key there, so it has no keyed state (ctx.get_state); keep the "
            "state in a keyed operator after it, or drop resident=True", key=f"operator {name!r}")
    return resident
