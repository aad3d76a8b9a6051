"""User function base classes. Plain callables work everywhere too.

A rich function gets ``open(ctx)`` before its first record and ``close()`` after its last,
in the subtask process, so it can pick its device there::

    class Classify(RichMapFunction):
        def open(self, ctx):
            self.gpu = min(ctx.get_external_resource_infos("gpu"))
        def map(self, image):
            ...

A class (not an instance) may be passed too; it is then built in each subtask with no
arguments, so heavy state (a model on a GPU) is never pickled.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Generic, TypeVar

from accelflow.dataflow._context import RuntimeContext

IN = TypeVar("IN")
OUT = TypeVar("OUT")


class RichFunction:
    """Lifecycle hooks shared by every rich function. On a keyed stream (after ``key_by``),
    ``ctx.get_state(ValueStateDescriptor(...))`` and its siblings give keyed state."""

    _runtime_context: RuntimeContext | None = None

    def open(self, ctx: RuntimeContext) -> None:
        """Called once in the subtask before the first record."""

    def get_runtime_context(self) -> RuntimeContext:
        """The context ``open`` got (Flink's ``getRuntimeContext()``).

        Raises:
            RuntimeError: called before the function was opened in its subtask.
        """
        if self._runtime_context is None:
            raise RuntimeError("get_runtime_context() is only available once the function runs in its subtask "
                               "(in open() and after)")
        return self._runtime_context

    def close(self) -> None:
        """Called once in the subtask after the last record (also on failure, best effort)."""


class RichMapFunction(RichFunction, ABC, Generic[IN, OUT]):
    @abstractmethod
    def map(self, value: IN) -> OUT: ...


class RichFlatMapFunction(RichFunction, ABC, Generic[IN, OUT]):
    @abstractmethod
    def flat_map(self, value: IN) -> Iterable[OUT]: ...


class RichFilterFunction(RichFunction, ABC, Generic[IN]):
    @abstractmethod
    def filter(self, value: IN) -> bool: ...


class RichMapBatchesFunction(RichFunction, ABC):
    """Vectorized: gets a batch (a NumPy array, a tuple of column arrays, or a list)."""

    @abstractmethod
    def map_batch(self, batch: Any) -> Any: ...


class RichReduceFunction(RichFunction, ABC, Generic[IN]):
    @abstractmethod
    def reduce(self, a: IN, b: IN) -> IN: ...


class SinkFunction(RichFunction, ABC, Generic[IN]):
    """A user sink: ``invoke`` is called for every record."""

    @abstractmethod
    def invoke(self, value: IN) -> None: ...


class Source(ABC, Generic[OUT]):
    """A user source that splits its input (bounded) or runs until cancelled (unbounded).

    ``create_splits`` runs in the client; ``read`` runs in each source subtask for the splits
    given to it (split *j* goes to subtask ``j % parallelism``).

    Example (bounded)::

        class Lines(Source[str]):
            def __init__(self, paths): self.paths = paths
            def create_splits(self, parallelism): return list(self.paths)
            def read(self, split, ctx):
                with open(split) as f:
                    yield from f
    """

    #: False for a source that runs until cancelled.
    bounded: bool = True

    def create_splits(self, parallelism: int) -> Sequence[Any]:
        """Split the input; the default is one split per subtask (``0..parallelism-1``)."""
        return list(range(parallelism))

    @abstractmethod
    def read(self, split: Any, ctx: RuntimeContext) -> Iterator[OUT]:
        """Yield the records of ``split``. Unbounded sources check ``ctx.is_cancelled()``."""

    def read_chunks(self, split: Any, ctx: RuntimeContext) -> Iterator[Any]:
        """Yield chunks of records (lists or arrays whose rows are records).

        Override for speed (e.g. yield NumPy slices); the default groups :meth:`read`'s
        records as ``execution.buffer-timeout`` says (see ``group_records``).
        """
        from accelflow.dataflow._chunks import CHUNK_LATENCY_S, group_records

        return group_records(self.read(split, ctx), latency_s=getattr(ctx, "buffer_timeout_s", CHUNK_LATENCY_S))

    def size_hint(self) -> int | None:
        """Total records, if known (drives the progress bar)."""
        return None

    # -- checkpointing (see docs/checkpoints.md) ------------------------------------------------
    #
    # A checkpoint is taken between two chunks of a split, so "what was read" is exactly what
    # the job has processed. An unbounded source must therefore yield an empty chunk (``[]``)
    # when it has nothing to give for a while (every 100 ms or so): that is when the subtask
    # takes checkpoints and notices cancellation.

    def snapshot_split(self, split: Any, records_read: int, checkpoint_id: int) -> Any:
        """The rest of ``split`` after its first ``records_read`` records (what a restored job
        reads): a picklable split that :meth:`read_chunks` accepts.

        The default, :class:`ResumeSplit`, rereads the split and skips ``records_read``
        records, which is right for any source that reads the same records in the same order
        every time. Override it for speed (a range moves its start) or for sources that know
        their position (a Kafka partition's next offset).
        """
        return ResumeSplit.of(split, records_read)

    def metrics(self) -> dict[str, float]:
        """Gauges of this source subtask, sent with its progress (about 4 times a second),
        e.g. ``{"kafka_lag:<topic>:<partition>": 12}``; ``/metrics`` shows the known ones."""
        return {}

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` is complete (e.g. commit offsets back to a broker for
        monitoring). Called in the subtask, best effort: it may be skipped after a failure."""


@dataclass(frozen=True, slots=True)
class ResumeSplit:
    """A split to be read from its ``skip``-th record on (see :meth:`Source.snapshot_split`)."""

    split: Any
    skip: int

    @staticmethod
    def of(split: Any, records_read: int) -> Any:
        if records_read <= 0:
            return split
        if isinstance(split, ResumeSplit):
            return ResumeSplit(split.split, split.skip + records_read)
        return ResumeSplit(split, records_read)


def is_function_class(cls: type, methods: Iterable[str | None] = ()) -> bool:
    """Whether ``cls``, given as a user function, is built once per subtask (its instance is
    the function): an accelflow function class (a :class:`RichFunction`), or one that defines
    one of ``methods`` (the operator's: ``map``, ``join``...) or ``__call__``. Any other class
    (``str``, ``complex``, a dataclass of records) is called per record, as in PyFlink.

    Example:
        >>> class Pair:
        ...     def join(self, a, b): return a, b
        >>> is_function_class(Pair, ["join"]), is_function_class(complex, ["join"]), is_function_class(str)
        (True, False, False)
    """
    if issubclass(cls, RichFunction):
        return True
    names = {m for m in methods if m} | {"__call__"}
    return any(name in vars(k) for k in cls.__mro__ if k.__module__ != "builtins" for name in names)
