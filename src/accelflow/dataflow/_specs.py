"""Operator specs: one frozen class per kind of operator, holding what the user declared.

A :class:`~accelflow.dataflow.Transformation` holds one spec. What varies per kind is a class
attribute of its spec, read where it matters, never a string compared by hand:

- :attr:`OperatorSpec.inputs`: 0 for a source, 1 for the rest (2 for the operators with two
  inputs to come, union and connect);
- :attr:`OperatorSpec.keyed`: it reads a stream partitioned by ``key_by`` and keeps state
  per key (``reduce``; windows and process functions with timers to come);
- :attr:`OperatorSpec.is_sink`, :attr:`OperatorSpec.one_to_one` (every record gives one
  output: the progress bar's total holds), :attr:`OperatorSpec.keeps_order` (each output keeps
  its record's position: ``execute_and_collect(ordered=True)``) and :attr:`OperatorSpec.method`
  (the rich function's method, e.g. ``map_batch``);
- :attr:`OperatorSpec.kind`: a label for people (the REST API, a checkpoint's metadata,
  error messages), e.g. ``"map_batches"``.

Each spec checks its arguments once, in :meth:`OperatorSpec.check`, when its operator joins the
graph (``Transformation.__post_init__``), and raises :class:`~accelflow.ConfigError` naming the
operator. Facts of one run (a reduce emits rolling or final values) are not the user's: the
JobManager sends them in the subtasks' ``ChainPlan``, and a frozen spec cannot take them in.

Adding an operator touches its API method (which builds its spec), its spec (here) and its
runtime operator, registered for the spec class in ``runtime/subtask/_operators.py``
(``@runs(MySpec)``). The runtime finds it by the spec's type (subclasses included).

Why frozen slotted dataclasses and not ``msgspec.Struct`` as the runtime's messages: a spec
holds the user's objects (functions, sources, sinks) and travels only inside a cloudpickled
``ChainPlan``, so msgspec's typed encoding buys nothing; and unpickling a ``Struct`` calls its
``__post_init__`` again (in every subtask, possibly on a machine where a path the user gave does
not exist), while a dataclass is checked once, where it is built.

Example:
    >>> spec = MapBatchesSpec(len, batch_size=32, max_wait=0.05)
    >>> spec.kind, spec.one_to_one, spec.method
    ('map_batches', True, 'map_batch')
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from accelflow._errors import ConfigError
from accelflow.dataflow._functions import Source
from accelflow.dataflow._resident import ResidentFunction, check_one_device
from accelflow.dataflow._sinks import Sink


@dataclass(frozen=True, slots=True)
class OperatorSpec:
    """What every spec says about its kind of operator (class attributes, see the module)."""

    #: a label for people: the REST API, checkpoint metadata, error messages
    kind: ClassVar[str] = ""
    #: how many inputs the operator reads: 0 for a source
    inputs: ClassVar[int] = 1
    #: whether it reads a keyed stream and keeps state per key
    keyed: ClassVar[bool] = False
    #: whether it ends a stream (nothing flows out of it)
    is_sink: ClassVar[bool] = False
    #: whether every record of its input gives exactly one output
    one_to_one: ClassVar[bool] = False
    #: whether each output keeps the position of the record it came from
    keeps_order: ClassVar[bool] = False
    #: the method of a rich function object that takes the records (e.g. ``"map"``), if any
    method: ClassVar[str | None] = None

    def check(self, where: str) -> None:
        """Raise :class:`ConfigError` (key ``where``, e.g. ``"operator 'parse'"``) for a bad
        argument; called once, when the operator joins the graph."""

    def check_resources(self, resources: Mapping[str, Any], where: str) -> None:
        """Raise :class:`ConfigError` if the operator cannot run with ``resources`` (what it
        asked for, e.g. ``{"gpu": Fraction(1, 2)}``); called with :meth:`check`."""

    def reads(self) -> Source[Any] | None:
        """The source this operator reads its records from (a source operator's), else None."""
        return None

    def writes(self) -> Sink[Any] | None:
        """The two-phase-commit sink this operator writes to (``sink_to``'s), else None."""
        return None


# -- sources --------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SourceSpec(OperatorSpec):
    """``from_collection``, ``from_sequence``, ``from_source``: records of a :class:`Source`."""

    kind: ClassVar[str] = "source"
    inputs: ClassVar[int] = 0
    source: Source[Any]

    def check(self, where: str) -> None:
        if not isinstance(self.source, Source):
            raise ConfigError(f"from_source needs an accelflow.Source, got {type(self.source).__name__}",
                              key=where)

    def reads(self) -> Source[Any] | None:
        return self.source


# -- operators of user functions ------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class FunctionSpec(OperatorSpec):
    """An operator that calls ``fn``: a function, or an object (or class) with :attr:`method`."""

    fn: Any

    def check(self, where: str) -> None:
        method = self.method
        if callable(self.fn) or (method is not None and hasattr(self.fn, method)):
            return
        raise ConfigError(f"expected a function or an object with a {method}() method, got "
                          f"{type(self.fn).__name__}", key=where)


@dataclass(frozen=True, slots=True)
class MapSpec(FunctionSpec):
    """``map(fn)``: one output per record."""

    kind: ClassVar[str] = "map"
    method: ClassVar[str | None] = "map"
    one_to_one: ClassVar[bool] = True
    keeps_order: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class FlatMapSpec(FunctionSpec):
    """``flat_map(fn)``: zero or more outputs per record."""

    kind: ClassVar[str] = "flat_map"
    method: ClassVar[str | None] = "flat_map"
    keeps_order: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class FilterSpec(FunctionSpec):
    """``filter(fn)``: the records for which ``fn`` is true."""

    kind: ClassVar[str] = "filter"
    method: ClassVar[str | None] = "filter"
    keeps_order: ClassVar[bool] = True


#: the values ``map_batches(device=...)`` and ``device_backend=`` accept
DEVICES = (None, "auto", "cuda")
DEVICE_BACKENDS = (None, "cupy", "torch")


@dataclass(frozen=True, slots=True)
class MapBatchesSpec(FunctionSpec):
    """``map_batches(fn, ...)``: ``fn`` gets up to ``batch_size`` records at once; see
    :meth:`accelflow.DataStream.map_batches` for ``max_wait``, ``device``, ``prefetch`` and
    ``device_backend``."""

    kind: ClassVar[str] = "map_batches"
    method: ClassVar[str | None] = "map_batch"
    one_to_one: ClassVar[bool] = True
    keeps_order: ClassVar[bool] = True
    batch_size: int = 1
    max_wait: float | None = None
    device: str | None = None
    prefetch: int = 2
    device_backend: str | None = None

    def check(self, where: str) -> None:
        FunctionSpec.check(self, where)
        size, wait, prefetch = self.batch_size, self.max_wait, self.prefetch
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ConfigError(f"batch_size must be a positive integer, got {size!r}", key=where)
        if wait is not None and (isinstance(wait, bool) or not isinstance(wait, int | float)
                                 or not 0 <= wait <= 3600):
            raise ConfigError(f"max_wait must be a number of seconds from 0 to 3600, got {wait!r}", key=where)
        if self.device not in DEVICES:
            raise ConfigError(f"device must be None, 'auto' or 'cuda', got {self.device!r}", key=where)
        if self.device_backend not in DEVICE_BACKENDS:
            raise ConfigError(f"device_backend must be None, 'cupy' or 'torch', got {self.device_backend!r}",
                              key=where)
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or not 1 <= prefetch <= 64:
            raise ConfigError(f"prefetch must be an integer from 1 to 64 (batches in flight), got {prefetch!r}",
                              key=where)


class _Resident:
    """``resident=True`` (``ResidentMapSpec``, ``ResidentMapBatchesSpec``): ``fn`` is replaced
    by its :class:`ResidentFunction` once checked, so no subtask unpickles it; the instance
    lives in the device host of the one device the operator asks for."""

    __slots__ = ()

    def _resident(self, where: str, options: tuple[Any, ...]) -> None:
        fn = getattr(self, "fn")
        if not isinstance(fn, ResidentFunction):
            object.__setattr__(self, "fn", ResidentFunction.of(fn, options, where))

    def check_resources(self, resources: Mapping[str, Any], where: str) -> None:
        check_one_device(resources, where)


@dataclass(frozen=True, slots=True)
class ResidentMapSpec(_Resident, MapSpec):
    """``map(fn, resident=True)``: ``fn`` runs in the device host, shared by the subtasks on
    that device (see :class:`_Resident`)."""

    def check(self, where: str) -> None:
        MapSpec.check(self, where)
        self._resident(where, ("map", self.method))


@dataclass(frozen=True, slots=True)
class ResidentMapBatchesSpec(_Resident, MapBatchesSpec):
    """``map_batches(fn, resident=True)``: batches from every subtask on the device run on one
    instance in its device host, together up to ``batch_size`` (see :class:`_Resident`)."""

    def check(self, where: str) -> None:
        MapBatchesSpec.check(self, where)
        self._resident(where, ("map_batches", self.method, self.batch_size, self.max_wait,
                               self.device, self.prefetch, self.device_backend))


@dataclass(frozen=True, slots=True)
class ReduceSpec(FunctionSpec):
    """``key_by(...).reduce(fn)`` (and ``sum``): one value per key."""

    kind: ClassVar[str] = "reduce"
    method: ClassVar[str | None] = "reduce"
    keyed: ClassVar[bool] = True


# -- sinks ----------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PrintSinkSpec(OperatorSpec):
    """``print()``: every record to stdout."""

    kind: ClassVar[str] = "sink_print"
    is_sink: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class CollectSinkSpec(OperatorSpec):
    """``execute_and_collect()``: the records back to the client."""

    kind: ClassVar[str] = "sink_collect"
    is_sink: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class UserSinkSpec(FunctionSpec):
    """``add_sink(fn)``: ``fn(record)``, or a ``SinkFunction``'s ``invoke``."""

    kind: ClassVar[str] = "sink_user"
    method: ClassVar[str | None] = "invoke"
    is_sink: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class SinkToSpec(OperatorSpec):
    """``sink_to(sink)``: a two-phase-commit :class:`~accelflow.dataflow.Sink`."""

    kind: ClassVar[str] = "sink_to"
    is_sink: ClassVar[bool] = True
    sink: Sink[Any]

    def check(self, where: str) -> None:
        if not isinstance(self.sink, Sink):
            raise ConfigError(f"sink_to needs an accelflow.Sink (e.g. FileSink, KafkaSink), got "
                              f"{type(self.sink).__name__}; use add_sink for a plain function", key=where)

    def writes(self) -> Sink[Any] | None:
        return self.sink


@dataclass(frozen=True, slots=True)
class FileSinkSpec(SinkToSpec):
    """``sink_to_file(path)``: a ``sink_to`` of the sink that writes one file, atomically when
    the job succeeds (``accelflow.connectors.SingleFileSink``); only its label differs."""

    kind: ClassVar[str] = "sink_file"
