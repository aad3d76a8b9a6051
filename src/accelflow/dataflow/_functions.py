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
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Generic, TypeVar

from accelflow.dataflow._context import RuntimeContext

IN = TypeVar("IN")
OUT = TypeVar("OUT")


class RichFunction:
    """Lifecycle hooks shared by every rich function."""

    def open(self, ctx: RuntimeContext) -> None:
        """Called once in the subtask before the first record."""

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

        Override for speed (e.g. yield NumPy slices); the default groups :meth:`read`.
        """
        from accelflow.dataflow._chunks import group_records

        return group_records(self.read(split, ctx))

    def size_hint(self) -> int | None:
        """Total records, if known (drives the progress bar)."""
        return None
