"""What sources share, beyond the :class:`~accelflow.dataflow.Source` contract: splitting a
range evenly, and :class:`SharedRows`, how a source of NumPy arrays reads an array that the
runtime shares with the subtasks instead of pickling it into each (the runtime's handles
implement it; this package holds no shared memory itself)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any


def even_ranges(total: int, parts: int) -> list[tuple[int, int]]:
    """Split ``range(total)`` into ``parts`` contiguous, nearly equal ranges.

    Example:
        >>> even_ranges(10, 3)
        [(0, 3), (3, 6), (6, 10)]
    """
    bounds = [total * i // parts for i in range(parts + 1)]
    return [(bounds[i], bounds[i + 1]) for i in range(parts)]


class SharedRows(ABC):
    """One array of a source, as the runtime hands it to the subtasks in place of the array
    (e.g. where they read it in the client's memory, or a shared-memory copy): small,
    picklable, and read row range by row range."""

    __slots__ = ()

    @abstractmethod
    def reader(self) -> Callable[[int, int], Any]:
        """``read(start, stop)``: rows ``start:stop`` as a NumPy array; made once per split a
        subtask reads (it may map the array then)."""
