"""``Environment``: builds a job graph and runs it.

Example:
    >>> env = Environment({"parallelism.default": 2})
    >>> sorted(env.from_elements(3, 1, 2).map(lambda x: x * 10).execute_and_collect())
    [10, 20, 30]
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from accelflow._errors import AccelflowError, ConfigError
from accelflow.config import Configuration, config_from
from accelflow.config import keys as k
from accelflow.connectors import ArraySource, CollectionSource, SequenceSource
from accelflow.dataflow import (
    Edge, JobGraph, OperatorSpec, Source, SourceSpec, Transformation, build_job_graph, is_typed, typed_value,
)
from accelflow.api._names import shown, unique_name
from accelflow.api._pyflink import CheckpointingMode, check_mode
from accelflow.api._pyflink_env import PyFlinkEnvironment
from accelflow.runtime.client import ExecutionContext, current_context, warm_up
from accelflow.scheduling import Amount, ResourceProfile

if TYPE_CHECKING:
    from accelflow.api._stream import DataStream

_log = logging.getLogger("accelflow.api")


class Environment(PyFlinkEnvironment):
    """Builds and runs a job; also PyFlink's ``StreamExecutionEnvironment`` (the same class,
    see :class:`~accelflow.api._pyflink_env.PyFlinkEnvironment` for PyFlink's methods).

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
                f"got {shown(config)}; for a YAML file use Environment.from_yaml(path)",
                key="Environment(config)")
        self._values = dict(config or {})
        self.config: Configuration = self._merged_config()
        for warning in self.config.warnings:  # about the merged layers, once per environment
            _log.warning("%s", warning)
        warm_up(self.config, self._context)  # the zygote imports while the job is built
        self._transformations: list[Transformation] = []
        #: ids of the transformations that ran in a job already (PyFlink runs again only
        #: the sinks added since, with what they read)
        self._executed: set[int] = set()
        #: transformation id -> its declared PyFlink type (``output_type=``, ``type_info=``)
        self._types: dict[int, Any] = {}
        #: the result of the last job this environment ran (set by ``execute``)
        self.last_result: Any = None

    def _merged_config(self) -> Configuration:
        ctx = self._context
        return config_from(base=dict(ctx.base_config), conf_file=ctx.conf_file,
                           values=self._values, definitions=list(ctx.definitions))

    @classmethod
    def from_yaml(cls, path: str | os.PathLike[str]) -> Environment:
        """An environment configured by a YAML file of flat keys.

        Raises:
            ConfigError: every problem of the file at once, a key set twice included.
        """
        from accelflow.config import read_yaml_layer

        data, duplicates = read_yaml_layer(path)
        try:
            env = cls(data)
        except ConfigError as exc:
            raise ConfigError([*duplicates, *exc.problems]) from None
        if duplicates:
            raise ConfigError(duplicates)
        return env

    # -- sources ----------------------------------------------------------------------------
    def from_collection(self, collection: Iterable[Any] | np.ndarray[Any, Any], type_info: Any = None, *,
                        name: str = "collection", parallelism: int | None = None) -> DataStream:
        """A bounded stream of the records of ``collection``. A NumPy array streams its rows (as arrays), shared
        with the subtasks rather than pickled: on this host they read it straight out of the
        client's memory, chunk by chunk, as it is when read (as Spark's ``parallelize``; do
        not change it while the job runs), or a copy in shared memory (see
        ``pipeline.array-sharing``); on the Ray target, through Ray's object store.

        With a PyFlink ``type_info`` the records become what PyFlink makes of them (a tuple
        given for ``Types.ROW_NAMED`` a named ``Row``, for ``Types.ROW`` one named ``f0, f1...``,
        a ``FLOAT`` field 32 bits wide), and
        ``print()`` writes them as PyFlink does (see ``accelflow.dataflow.typed_value``)."""
        where = f"operator {name!r}"
        if isinstance(collection, np.ndarray):
            if collection.ndim == 0:
                raise ConfigError("from_collection needs an array of at least one dimension (its "
                                  f"rows are the records), got the 0-d array {collection!r}", key=where)
            source: Source[Any] = ArraySource([collection])
        else:
            try:
                records = iter(collection)
            except TypeError:
                raise ConfigError(
                    "from_collection needs the records as an iterable (a list, a tuple, a generator...) "
                    f"or a NumPy array, got {shown(collection)}; for one record pass a list: [record]",
                    key=where) from None
            source = CollectionSource([typed_value(r, type_info) for r in records] if is_typed(type_info)
                                      else list(records))
        return self._add(SourceSpec(source), name, 1 if parallelism is None else parallelism, [])._declare(type_info)

    def from_sequence(self, start: int, end: int, *, name: str = "sequence",
                      parallelism: int | None = None) -> DataStream:
        """The integers ``start..end`` inclusive, split across the source's subtasks."""
        for what, value in (("start", start), ("end", end)):
            if isinstance(value, bool) or not isinstance(value, int | np.integer):
                raise ConfigError(f"from_sequence needs integers (start and end, inclusive), got "
                                  f"{shown(value)} for {what}", key=f"operator {name!r}")
        start, end = int(start), int(end)
        if end < start:
            raise ConfigError(f"from_sequence({start}, {end}): end must be >= start", key=name)
        return self._add(SourceSpec(SequenceSource(start, end)), name, parallelism, [])

    def from_elements(self, *elements: Any, type_info: Any = None, name: str = "elements") -> DataStream:
        """A bounded stream of ``elements`` (PyFlink's ``from_elements``), in one subtask."""
        return self.from_collection(list(elements), type_info, name=name)

    def from_source(self, source: Source[Any], watermark_strategy: Any = None, source_name: str | None = None,
                    type_info: Any = None, *, name: str | None = None,
                    parallelism: int | None = None) -> DataStream:
        """A user :class:`Source` (bounded or unbounded). With ``watermark_strategy`` (as
        PyFlink's ``from_source(source, strategy, name)``) its records get timestamps and
        watermarks at once (a Kafka record's own timestamp when the strategy has no
        assigner): ``assign_timestamps_and_watermarks`` chained to the source."""
        stream = self._add(SourceSpec(source), name or source_name or type(source).__name__, parallelism,
                           [])._declare(type_info)
        if watermark_strategy is not None:
            stream = stream.assign_timestamps_and_watermarks(watermark_strategy)
        return stream

    def set_parallelism(self, parallelism: int) -> Environment:
        """The default parallelism of the operators added after this (``parallelism.default``)."""
        return self._set(k.PARALLELISM_DEFAULT.name, parallelism)

    def get_parallelism(self) -> int:
        return int(self.config.get(k.PARALLELISM_DEFAULT))

    def set_max_parallelism(self, max_parallelism: int) -> Environment:
        """The number of key groups of keyed state (``pipeline.max-parallelism``)."""
        return self._set(k.PIPELINE_MAX_PARALLELISM.name, max_parallelism)

    def set_buffer_timeout(self, timeout_millis: int) -> Environment:
        """``execution.buffer-timeout`` in milliseconds (Flink's ``setBufferTimeout``): 0
        sends every record at once, -1 only full chunks."""
        if isinstance(timeout_millis, bool) or not isinstance(timeout_millis, int) or timeout_millis < -1:
            raise ConfigError(f"expected milliseconds >= 0, or -1, got {shown(timeout_millis)}",
                              key="set_buffer_timeout")
        return self._set(k.BUFFER_TIMEOUT.name, -1 if timeout_millis < 0 else f"{timeout_millis} ms")

    def _set(self, key: str, value: Any) -> Environment:
        self._values[key] = value
        self.config = self._merged_config()  # checks the value; -D still wins, as for any key
        return self

    def enable_checkpointing(self, interval: int, mode: CheckpointingMode | None = None) -> Environment:
        """Take a checkpoint every ``interval`` milliseconds (Flink's ``enableCheckpointing``);
        the same as ``execution.checkpointing.interval``. ``mode``: a ``CheckpointingMode``
        (both modes get aligned, exactly-once checkpoints)."""
        check_mode(mode, "enable_checkpointing(mode)")
        if isinstance(interval, bool) or not isinstance(interval, int | float) or interval <= 0:
            raise ConfigError(f"the interval must be a positive number of milliseconds, got {interval!r}",
                              key="enable_checkpointing")
        return self._set(k.CHECKPOINT_INTERVAL.name, f"{interval} ms")

    # -- running ----------------------------------------------------------------------------
    def execute(self, name: str | None = None) -> Any:
        """Run the job to completion on the embedded cluster and return its ``JobResult``.
        As PyFlink, each call runs the sinks added since the last one, with what they read
        (a source read by an earlier job too is read again).

        Raises:
            JobError: a subtask failed (after restarts, if any) or a TaskExecutor died.
            AllocationError: a resource request cannot be met; says why per device.
        """
        self.last_result = self.execute_async(name).wait()
        return self.last_result

    def execute_async(self, name: str | None = None) -> Any:
        """Start the job and return a ``JobClient`` (``status()``, ``cancel()``, ``wait()``)."""
        from accelflow.runtime.client import submit

        return submit(self._job_graph("accelflow job" if name is None else name), self.config, self._context)

    def _job_graph(self, name: str) -> JobGraph:
        """Check the job built so far and turn it into its graph (the environment is emptied)."""
        if not isinstance(name, str):
            raise ConfigError(f"a job's name must be a string, got {shown(name)}", key="execute(name)")
        pending = [t for t in self._transformations if t.id not in self._executed]
        if not pending:
            raise AccelflowError("the job has no operators: add a source and a sink first")
        sinks = [t.id for t in pending if t.is_sink]
        if not sinks:
            raise AccelflowError(
                "the job has no sink: end it with print(), sink_to_file(), add_sink() or "
                "execute_and_collect()"
            )
        job = upstream_of(self._transformations, sinks)
        self._executed.update(t.id for t in pending)
        return build_job_graph(name, job)

    # -- internals ----------------------------------------------------------------------------
    def _add(self, spec: OperatorSpec, name: str, parallelism: int | None, inputs: Sequence[Edge], *,
             resources: Mapping[str, Amount] | None = None) -> DataStream:
        """Add the operator of ``spec`` reading ``inputs``; the spec's arguments are checked
        here, once (see ``Transformation``). A sink takes its input's parallelism."""
        from accelflow.api._stream import DataStream

        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"an operator's name must be a non-empty string, got {shown(name)}",
                              key=f"{spec.kind}(name=)")
        check_parallelism(parallelism, f"operator {name!r}")
        if parallelism is None:
            parallelism = self._transformations[inputs[0].source].parallelism if inputs and spec.is_sink \
                else self.config.get(k.PARALLELISM_DEFAULT)
        profile = ResourceProfile.parse(resources, operator=name)
        t = Transformation(id=len(self._transformations), name=unique_name(name, self._transformations),
                           spec=spec, parallelism=parallelism, resources=profile, inputs=list(inputs))
        self._transformations.append(t)
        if inputs and spec.kind in _SAME_TYPE:
            self._types[t.id] = self._types.get(inputs[0].source)
        return DataStream(self, t.id)


#: operators whose records have the type of their (first) input's, as in PyFlink
_SAME_TYPE = frozenset({"filter", "reduce", "timestamps_watermarks", "union"})


def upstream_of(transformations: list[Transformation], sinks: list[int]) -> list[Transformation]:
    """Copies of ``sinks`` and every transformation they read, renumbered ``0..n-1`` in their
    order (the graph of one job of an environment that ran jobs before)."""
    needed: set[int] = set()
    todo = list(sinks)
    while todo:
        if (i := todo.pop()) not in needed:
            needed.add(i)
            todo += [e.source for e in transformations[i].inputs]
    if len(needed) == len(transformations):
        return list(transformations)
    new_id = {old: new for new, old in enumerate(sorted(needed))}
    return [dataclasses.replace(t, id=new_id[t.id], inputs=[dataclasses.replace(e, source=new_id[e.source])
                                                             for e in t.inputs])
            for t in transformations if t.id in needed]


def check_parallelism(parallelism: Any, where: str) -> None:
    """Raise :class:`ConfigError` unless ``parallelism`` is None or a positive integer."""
    if parallelism is not None and (isinstance(parallelism, bool) or not isinstance(parallelism, int)
                                    or parallelism < 1):
        raise ConfigError(f"parallelism must be a positive integer, got {parallelism!r}", key=where)
