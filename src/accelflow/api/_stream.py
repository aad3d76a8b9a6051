"""The dataflow API: ``Environment``, ``DataStream`` and ``KeyedStream``.

Example:
    >>> env = Environment({"parallelism.default": 2})
    >>> env.from_sequence(1, 10).map(lambda x: x * x).filter(lambda x: x % 2).execute_and_collect()
    [1, 9, 25, 49, 81]
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from accelflow._errors import AccelflowError, ConfigError
from accelflow.config import Configuration, config_from
from accelflow.config import keys as k
from accelflow.connectors import ArraySource, CollectionSource, SequenceSource, SingleFileSink
from accelflow.dataflow import (
    CollectSinkSpec, FileSinkSpec, FilterSpec, FlatMapSpec, JobGraph, MapBatchesSpec, MapSpec, OperatorSpec,
    Partitioning, PrintSinkSpec, ReduceSpec, ResidentMapBatchesSpec, ResidentMapSpec, Sink, SinkToSpec, Source,
    SourceSpec, Transformation, UserSinkSpec, build_job_graph, in_order,
)
from accelflow.api._ordered import keep_order
from accelflow.runtime.client import ExecutionContext, current_context, warm_up
from accelflow.scheduling import Amount, ResourceProfile

_log = logging.getLogger("accelflow.api")


class Environment:
    """Builds and runs a job.

    Args:
        config: flat config keys (as in a YAML file), e.g. ``{"external-resources": "gpu",
            "external-resource.gpu.amount": 2, ...}``. Under ``accelflow run``, ``--conf``
            sits below this dict and ``-D`` above it.

    Raises:
        ConfigError: every problem in the config, one per key.
    """

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        #: how this environment's jobs run (``accelflow run`` installs one; see
        #: :class:`accelflow.runtime.client.ExecutionContext`)
        self._context: ExecutionContext = current_context()
        if config is not None and not isinstance(config, Mapping):
            raise ConfigError(
                f"needs a mapping of config keys to values, e.g. {{\"parallelism.default\": 2}}, "
                f"got {_shown(config)}; for a YAML file use Environment.from_yaml(path)",
                key="Environment(config)")
        self._values = dict(config or {})
        self.config: Configuration = self._merged_config()
        for warning in self.config.warnings:  # about the merged layers, once per environment
            _log.warning("%s", warning)
        warm_up(self.config, self._context)  # the zygote imports while the job is built
        self._transformations: list[Transformation] = []
        #: the result of the last job this environment ran (set by ``execute``)
        self.last_result: Any = None

    def _merged_config(self) -> Configuration:
        ctx = self._context
        return config_from(base=dict(ctx.base_config), conf_file=ctx.conf_file,
                           values=self._values, definitions=list(ctx.definitions))

    @classmethod
    def from_yaml(cls, path: str | os.PathLike[str]) -> Environment:
        """An environment configured by a YAML file of flat keys."""
        from accelflow.config import read_yaml

        return cls(read_yaml(path))

    # -- sources ----------------------------------------------------------------------------
    def from_collection(self, items: Iterable[Any] | np.ndarray[Any, Any], *, name: str = "collection",
                        parallelism: int | None = None) -> DataStream:
        """A bounded stream of ``items``. A NumPy array streams its rows (as arrays), shared
        with the subtasks rather than pickled: on this host they read it straight out of the
        client's memory, chunk by chunk, as it is when read (as Spark's ``parallelize``; do
        not change it while the job runs), or a copy in shared memory (see
        ``pipeline.array-sharing``); on the Ray target, through Ray's object store."""
        where = f"operator {name!r}"
        if isinstance(items, np.ndarray):
            if items.ndim == 0:
                raise ConfigError("from_collection needs an array of at least one dimension (its "
                                  f"rows are the records), got the 0-d array {items!r}", key=where)
            source: Source[Any] = ArraySource([items])
        else:
            try:
                records = iter(items)
            except TypeError:
                raise ConfigError(
                    "from_collection needs the records as an iterable (a list, a tuple, a generator...) "
                    f"or a NumPy array, got {_shown(items)}; for one record pass a list: [record]",
                    key=where) from None
            source = CollectionSource(list(records))
        return self._add(SourceSpec(source), name, 1 if parallelism is None else parallelism, None)

    def from_sequence(self, start: int, end: int, *, name: str = "sequence",
                      parallelism: int | None = None) -> DataStream:
        """The integers ``start..end`` inclusive, split across the source's subtasks."""
        for what, value in (("start", start), ("end", end)):
            if isinstance(value, bool) or not isinstance(value, int | np.integer):
                raise ConfigError(f"from_sequence needs integers (start and end, inclusive), got "
                                  f"{_shown(value)} for {what}", key=f"operator {name!r}")
        start, end = int(start), int(end)
        if end < start:
            raise ConfigError(f"from_sequence({start}, {end}): end must be >= start", key=name)
        return self._add(SourceSpec(SequenceSource(start, end)), name, parallelism, None)

    def from_source(self, source: Source[Any], *, name: str | None = None,
                    parallelism: int | None = None) -> DataStream:
        """A user :class:`Source` (bounded or unbounded)."""
        return self._add(SourceSpec(source), name or type(source).__name__, parallelism, None)

    def enable_checkpointing(self, interval_ms: int) -> Environment:
        """Take a checkpoint every ``interval_ms`` milliseconds (Flink's
        ``enableCheckpointing``); the same as ``execution.checkpointing.interval``."""
        if isinstance(interval_ms, bool) or not isinstance(interval_ms, int | float) or interval_ms <= 0:
            raise ConfigError(f"the interval must be a positive number of milliseconds, got {interval_ms!r}",
                              key="enable_checkpointing")
        self._values[k.CHECKPOINT_INTERVAL.name] = f"{interval_ms} ms"
        self.config = self._merged_config()  # -D still wins, as for any key
        return self

    # -- running ----------------------------------------------------------------------------
    def execute(self, name: str = "accelflow job") -> Any:
        """Run the job to completion on the embedded cluster and return its ``JobResult``.

        Raises:
            JobError: a subtask failed (after restarts, if any) or a TaskExecutor died.
            AllocationError: a resource request cannot be met; says why per device.
        """
        self.last_result = self.execute_async(name).wait()
        return self.last_result

    def execute_async(self, name: str = "accelflow job") -> Any:
        """Start the job and return a ``JobClient`` (``status()``, ``cancel()``, ``wait()``)."""
        from accelflow.runtime.client import submit

        return submit(self._job_graph(name), self.config, self._context)

    def _job_graph(self, name: str) -> JobGraph:
        """Check the job built so far and turn it into its graph (the environment is emptied)."""
        if not isinstance(name, str):
            raise ConfigError(f"a job's name must be a string, got {_shown(name)}", key="execute(name)")
        if not self._transformations:
            raise AccelflowError("the job has no operators: add a source and a sink first")
        if not any(t.is_sink for t in self._transformations):
            raise AccelflowError(
                "the job has no sink: end it with print(), sink_to_file(), add_sink() or "
                "execute_and_collect()"
            )
        graph = build_job_graph(name, list(self._transformations))
        self._transformations.clear()
        return graph

    # -- internals ----------------------------------------------------------------------------
    def _add(self, spec: OperatorSpec, name: str, parallelism: int | None,
             upstream: DataStream | None, *, resources: Mapping[str, Amount] | None = None) -> DataStream:
        """Add the operator of ``spec`` reading ``upstream`` (as that stream is partitioned);
        the spec's arguments are checked here, once (see ``Transformation``)."""
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"an operator's name must be a non-empty string, got {_shown(name)}",
                              key=f"{spec.kind}(name=)")
        if parallelism is not None and (isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism < 1):
            raise ConfigError(f"parallelism must be a positive integer, got {parallelism!r}", key=f"operator {name!r}")
        if parallelism is None:
            parallelism = upstream.parallelism if upstream is not None and spec.is_sink \
                else self.config.get(k.PARALLELISM_DEFAULT)
        profile = ResourceProfile.parse(resources, operator=name)
        taken = {t.name for t in self._transformations}
        if name in taken:  # names key the per-operator counts: keep them unique
            name = next(f"{name}-{i}" for i in range(2, len(taken) + 3) if f"{name}-{i}" not in taken)
        t = Transformation(
            id=len(self._transformations), name=name, spec=spec, parallelism=parallelism,
            resources=profile, input=None if upstream is None else upstream._id,
            partitioning="forward" if upstream is None else upstream._partitioning,
            key_fn=None if upstream is None else upstream._key_fn,
        )
        self._transformations.append(t)
        return DataStream(self, t.id)


class DataStream:
    """A stream of records; every transformation returns a new ``DataStream``.

    Every transformation takes ``name=``, ``parallelism=`` and ``resources=`` (e.g.
    ``{"gpu": 1}``, ``{"gpu": 0.25}``, ``{"fpga": 2}``).
    """

    def __init__(self, env: Environment, transformation_id: int,
                 partitioning: Partitioning = "forward", key_fn: Any = None) -> None:
        self._env = env
        self._id = transformation_id
        self._partitioning: Partitioning = partitioning
        self._key_fn = key_fn

    @property
    def parallelism(self) -> int:
        return self._env._transformations[self._id].parallelism

    def _then(self, spec: OperatorSpec, name: str | None, parallelism: int | None,
              resources: Mapping[str, Amount] | None = None) -> DataStream:
        return self._env._add(spec, spec.kind if name is None else name, parallelism, self, resources=resources)

    def map(self, fn: Any, *, name: str | None = None, parallelism: int | None = None,
            resources: Mapping[str, Amount] | None = None, resident: bool = False) -> DataStream:
        """One output per record: ``fn(x)`` or a ``RichMapFunction``. ``resident=True``: one
        instance per device, opened once and kept (see :meth:`map_batches`)."""
        spec = (ResidentMapSpec if _resident(resident, name or "map") else MapSpec)(fn)
        return self._then(spec, name, parallelism, resources)

    def flat_map(self, fn: Any, *, name: str | None = None, parallelism: int | None = None,
                 resources: Mapping[str, Amount] | None = None) -> DataStream:
        """Zero or more outputs per record: ``fn(x)`` returns an iterable."""
        return self._then(FlatMapSpec(fn), name, parallelism, resources)

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
        several subtasks run together up to ``batch_size``. The operator must ask for (a share
        of) one device. See ``docs/gpu.md``, "Warm devices and resident models".
        """
        size = batch_size if batch_size is not None else self._env.config.get(k.BATCH_SIZE)
        cls = ResidentMapBatchesSpec if _resident(resident, name or "map_batches") else MapBatchesSpec
        spec = cls(fn, batch_size=size, max_wait=max_wait, device=device, prefetch=prefetch,
                   device_backend=device_backend)
        return self._then(spec, name, parallelism, resources)

    def key_by(self, key_fn: Callable[[Any], Any]) -> KeyedStream:
        """Partition by ``key_fn(x)``; follow with ``reduce`` or ``sum``. Keys compare as
        in Flink: every NaN (``float("nan")``, NumPy's, also inside a tuple key) is one key,
        although ``nan != nan`` in Python."""
        if not callable(key_fn):
            raise ConfigError(f"expected a function of a record, got {type(key_fn).__name__}", key="key_by()")
        return KeyedStream(self._env, self._id, "hash", key_fn)

    def rebalance(self) -> DataStream:
        """Spread records round-robin over the next operator's subtasks."""
        return DataStream(self._env, self._id, "rebalance")

    # -- sinks ------------------------------------------------------------------------------
    def print(self, *, name: str = "print") -> None:
        """Print every record to stdout (prefixed ``i> `` when parallel, as Flink)."""
        self._then(PrintSinkSpec(), name, None)

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
        self._then(SinkToSpec(sink), name or type(sink).__name__, parallelism)

    def add_sink(self, sink: Any, *, name: str = "sink", parallelism: int | None = None) -> None:
        """A user sink: a ``SinkFunction`` (``invoke(x)``) or a plain callable."""
        self._then(UserSinkSpec(sink), name, parallelism)

    def execute_and_collect(self, job_name: str = "accelflow job", *, ordered: bool = False) -> list[Any]:
        """Run the job and return this stream's records, in subtask order: each collecting
        subtask's records as they reached it, subtask 1's first.

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
        return list(self._collect(job_name, ordered).collected)

    def execute_and_collect_batch(self, job_name: str = "accelflow job", *, ordered: bool = False) -> Any:
        """Run the job and return this stream's records as one batch, in subtask order (or,
        with ``ordered=True``, in the input's order, see :meth:`execute_and_collect`), as a
        ``map_batches`` function over the whole stream would receive it: one NumPy array
        for array rows and numbers (batches are joined, no Python object per record), a
        tuple of column arrays for tuples, else a list."""
        return self._collect(job_name, ordered).collected_batch()

    def _collect(self, job_name: str, ordered: bool) -> Any:
        if not isinstance(ordered, bool):
            raise ConfigError(f"ordered must be True or False, got {_shown(ordered)}",
                              key="execute_and_collect(ordered=)")
        positioned = ordered and keep_order(self._env._transformations, self._id, self._partitioning)
        self._then(CollectSinkSpec(), "collect", None)
        result = self._env.execute(job_name)
        if positioned:
            result.chunks = in_order(result.chunks)
        return result


class KeyedStream(DataStream):
    """A stream partitioned by key. ``reduce`` and ``sum`` keep one value per key.

    With only bounded sources (``execution.runtime-mode: automatic`` or ``batch``) they emit
    one final value per key at the end; in streaming mode they emit the running value for
    every record, as Flink does.
    """

    def reduce(self, fn: Any, *, name: str | None = None, parallelism: int | None = None,
               resources: Mapping[str, Amount] | None = None) -> DataStream:
        return self._then(ReduceSpec(fn), name, parallelism, resources)

    def sum(self, field: int | None = None, *, name: str | None = None,
            parallelism: int | None = None) -> DataStream:
        """Sum records (numbers), or field ``field`` of tuple records keeping the others
        from the first record of the key."""
        if field is not None and (isinstance(field, bool) or not isinstance(field, int) or field < 0):
            raise ConfigError(f"sum(field) needs the index of a tuple field (an integer >= 0) or None "
                              f"to sum whole records, got {_shown(field)}", key=f"operator {name or 'sum'!r}")
        return self._then(ReduceSpec(_Sum(field)), name or "sum", parallelism)


class _Sum:
    def __init__(self, field: int | None) -> None:
        self.field = field

    def __call__(self, a: Any, b: Any) -> Any:
        if self.field is None:
            return a + b
        out = list(a)
        out[self.field] = a[self.field] + b[self.field]
        return tuple(out)


def _resident(resident: Any, name: str) -> bool:
    if not isinstance(resident, bool):
        raise ConfigError(f"resident must be True or False, got {_shown(resident)}", key=f"operator {name!r}")
    return resident


def _shown(value: Any) -> str:
    """``value`` for an error message: its type and a short repr, e.g. ``int (42)``."""
    text = repr(value)
    return f"{type(value).__name__} ({text if len(text) <= 60 else text[:57] + '...'})"

