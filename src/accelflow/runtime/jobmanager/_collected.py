"""What ``execute_and_collect`` has received, exactly once across failovers.

A collecting subtask sends its chunks (``Collected``) and its checkpoint acks on one
connection, in order, and flushes what its sink holds before it acks: the chunks received
from a subtask index before its ack of checkpoint ``n`` are exactly those it collected
before ``n``'s barrier. Restoring checkpoint ``n`` (a rollback in place, a full restart)
therefore keeps that many chunks of each index and drops the rest, which the restored
subtasks send again; restoring nothing (no checkpoint completed, or checkpointing off)
drops everything. This is what Flink's ``CollectSinkFunction`` does with the offset it
keeps in its checkpointed state.
"""

from __future__ import annotations

from typing import Any

from accelflow.runtime import SubtaskKey

Index = tuple[int, int]  # (chain, subtask index): a replacement or a standby keeps it


class CollectedResults:
    """The chunks received per subtask index, and how many each index had sent at each
    checkpoint it acked.

    Example:
        >>> from accelflow.runtime import SubtaskKey
        >>> results, key = CollectedResults(), SubtaskKey("job-1", 0, 0, 1)
        >>> results.add(key, [1, 2]); results.mark(key, 1); results.add(key, [3])
        >>> results.rewind(1); results.chunks()
        [[1, 2]]
        >>> results.rewind(0); results.chunks()
        []
    """

    def __init__(self) -> None:
        self._chunks: dict[Index, list[Any]] = {}
        self._marks: dict[int, dict[Index, int]] = {}  # checkpoint id -> chunks per index at its barrier

    def add(self, key: SubtaskKey, chunk: Any) -> None:
        """A ``Collected`` chunk from ``key``'s subtask."""
        self._chunks.setdefault((key.chain, key.index), []).append(chunk)

    def mark(self, key: SubtaskKey, checkpoint_id: int) -> None:
        """``key``'s subtask acked ``checkpoint_id``: the chunks received from it so far
        are part of that checkpoint."""
        index = (key.chain, key.index)
        self._marks.setdefault(checkpoint_id, {})[index] = len(self._chunks.get(index, ()))

    def rewind(self, restored_id: int) -> None:
        """Checkpoint ``restored_id`` is restored (0 or one not taken by this job, e.g. a
        savepoint it started from: the start): keep each index's chunks up to its barrier."""
        kept = self._marks.get(restored_id, {})
        for index, chunks in self._chunks.items():
            del chunks[kept.get(index, 0):]
        self._marks = {n: marks for n, marks in self._marks.items() if n == restored_id}

    def forget_before(self, completed_id: int) -> None:
        """Checkpoint ``completed_id`` completed: no earlier one is restored any more."""
        self._marks = {n: marks for n, marks in self._marks.items() if n >= completed_id}

    def chunks(self) -> list[Any]:
        """The non-empty chunks, in subtask order (chain, then index)."""
        return [chunk for index in sorted(self._chunks) for chunk in self._chunks[index] if len(chunk)]
