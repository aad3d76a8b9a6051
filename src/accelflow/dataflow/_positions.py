"""Record positions for ``execute_and_collect(ordered=True)``: the built-in sources know each
record's position in their input (:class:`Positions`), their chunks then travel as
:class:`~accelflow.dataflow.Positioned` chunks through the operators, which keep each
output's position, and :func:`in_order` sorts what was collected."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from accelflow.dataflow._chunks import Columns, Positioned, iter_records


class Positions:
    """What the built-in sources share: each record's position in their input is known, its
    split's :meth:`first_position` plus the records before it in the split. A copy made by
    :meth:`keeping_positions` reads :class:`~accelflow.dataflow.Positioned` chunks (what
    ``execute_and_collect(ordered=True)`` runs when records change subtasks on the way)."""

    #: whether :meth:`read_chunks` gives :class:`Positioned` chunks
    positions = False

    def first_position(self, split: Any) -> int:
        """The position in the input of the first record of ``split``."""
        raise NotImplementedError

    def keeping_positions(self) -> Any:
        """A copy of this source whose chunks carry their records' positions."""
        twin = copy.copy(self)
        twin.positions = True
        return twin

    def _positioned(self, split: Any, chunks: Iterator[Any]) -> Iterator[Any]:
        return with_positions(chunks, self.first_position(split)) if self.positions else chunks


def with_positions(chunks: Iterable[Any], first: int) -> Iterator[Positioned]:
    """A source's ``chunks`` as :class:`Positioned` chunks, the first record at position
    ``first`` of the input."""
    for chunk in chunks:
        n = len(chunk)
        yield Positioned(np.arange(first, first + n, dtype=np.int64).reshape(n, 1), chunk)
        first += n


def in_order(chunks: Sequence[Positioned]) -> list[Any]:
    """Collected :class:`Positioned` chunks as one chunk of their records in input order
    (``[]`` when there are none): an array when every chunk holds an array,
    :class:`Columns` when every chunk holds columns alike, else a list."""
    if not chunks:
        return []
    positions = np.concatenate([c.positions for c in chunks])
    order = np.lexsort(positions.T[::-1])  # the first column first
    parts = [c.data for c in chunks]
    if all(isinstance(p, np.ndarray) for p in parts) and len({p.shape[1:] for p in parts}) == 1:
        return [np.concatenate(parts)[order]]
    if all(isinstance(p, Columns) for p in parts) and len({len(p.columns()) for p in parts}) == 1:
        return [Columns(np.concatenate(cs)[order] for cs in zip(*(p.columns() for p in parts)))]
    records = [r for p in parts for r in iter_records(p)]
    return [[records[i] for i in order]]
