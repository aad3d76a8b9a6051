"""A source's chunks through a slow chain in slices sized by time, so that a checkpoint
barrier (a savepoint, a stop or a cancel) gets through between slices within about
:data:`SLICE_TARGET_S` plus one record's cost, not after a whole chunk of
:data:`~accelflow.dataflow.CHUNK_RECORDS` records (Flink injects barriers between a source's
records; its buffer debloating sizes in-flight data by time, the same idea).

The first slice is one record; each next one is what fits in the target at the rate of the
last: a fast chain gets the rest of the chunk whole (two pushes for its first chunk, one
after), a slow one a few records, down to one. With ``execution.buffer-timeout: -1``
(throughput first) chunks go whole, as before. Time spent waiting for a downstream subtask
(backpressure) does not count: smaller slices would not let a barrier through sooner there,
only send more, smaller messages. Example: a map sleeping 10 ms per record gets slices of
about 10 records (100 ms), so a barrier waits at most about 110 ms behind it instead of 10 s
behind a chunk of 1024.

A checkpoint taken between two slices keeps the chunk's records not yet pushed in the
source's state (:class:`Unpushed`, wrapping the split's own snapshot, which counts the whole
chunk as read): a restore pushes them first, then reads on.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any

from accelflow.dataflow import CHUNK_LATENCY_S, Columns, untagged

#: how long pushing one slice through the chain may take (``execution.buffer-timeout``'s default)
SLICE_TARGET_S = CHUNK_LATENCY_S


@dataclass
class Unpushed:
    """A checkpointed split whose last chunk was read but not all pushed: ``records`` (a chunk)
    go first after a restore, then ``split`` (the source's snapshot of it) is read on."""

    records: Any
    split: Any


class Slicer:
    """How many records of a source's chunk to push at once, from how long the last push took.

    Example:
        >>> s = Slicer()
        >>> s.timed(8, 0.4)  # 8 records took 400 ms: 2 fit in the target of 100 ms
        >>> s.size
        2
        >>> s.timed(2, 0.001)  # 2 records took 1 ms: 200 fit
        >>> s.size
        200
    """

    def __init__(self, enabled: bool = True) -> None:
        #: the first slice: one record (a slow chain shows at once); then what the target allows
        self.size = 1 if enabled else sys.maxsize
        self.enabled = enabled

    def slices(self, chunk: Any) -> Any:
        """``(piece, rest_start)`` for each slice of ``chunk``; ``rest_start``: the position
        of the first record not pushed after it (``len(chunk)`` after the last)."""
        n, start = len(chunk), 0
        while start < n:
            stop = min(n, start + self.size)
            yield (chunk if start == 0 and stop == n else cut(chunk, start, stop)), stop
            start = stop

    def timed(self, records: int, seconds: float) -> None:
        """Pushing ``records`` took ``seconds``: size the next slice (what fits in the target at
        that rate)."""
        if self.enabled:
            self.size = max(1, int(records * SLICE_TARGET_S / seconds)) if seconds > 0 else sys.maxsize


def cut(chunk: Any, start: int, stop: int | None = None) -> Any:
    """Records ``start:stop`` of ``chunk`` (a list, an array, :class:`Columns`, an annotated chunk)."""
    stop = len(chunk) if stop is None else stop
    return chunk.slice(start, stop) if isinstance(chunk, Columns) else chunk[start:stop]


def push_sliced(runner: Any, chunk: Any) -> None:
    """Push a source's ``chunk`` through ``runner``'s chain slice by slice, handling
    checkpoint commands and timers between slices (with the records not yet pushed kept in
    ``runner.unpushed`` for a snapshot); stops early when the subtask is cancelled. The
    records' splits (:class:`SplitTagged`) go only to a watermark generator next in the chain."""
    if not runner.reads_splits:
        chunk = untagged(chunk)
    slicer: Slicer = runner.slicer
    beat = runner.beat
    for piece, rest in slicer.slices(chunk):
        began, waited = time.monotonic(), beat.waited
        runner._push(piece, 0)
        slicer.timed(len(piece), time.monotonic() - began - (beat.waited - waited))  # not backpressure
        if rest < len(chunk):
            runner.unpushed = (chunk, rest)
            try:
                runner._control()
                runner._timers()
            finally:
                runner.unpushed = None
            if runner.cancelled.is_set():
                return


def source_state(splits: list[Any], records: int) -> dict[str, Any]:
    """A source subtask's checkpointed state: its ``splits`` not read yet (the current one's
    snapshot first) and the ``records`` it had read until then, from which a restore counts on
    (the job's progress counts records as the user sees them: a rollback or a resume from a
    savepoint goes back to the checkpoint's count, never to 0).

    Example:
        >>> source_state([(40, 100)], 40)
        {'splits': [(40, 100)], 'records': 40}
    """
    return {"splits": splits, "records": records}


def restored_source(blobs: list[Any], index: int, parallelism: int) -> tuple[list[Any], int]:
    """Subtask ``index``'s splits and records read, from every subtask's unpickled
    :func:`source_state` (a list of splits: a checkpoint taken before the count was kept;
    None: a subtask without state). The splits not yet read are spread as at the start, and
    each subtask counts those of the old subtasks it follows (``index::parallelism``), so
    the counts add up to the checkpoint's at any parallelism.

    Example:
        >>> old = [source_state([(40, 50)], 40), source_state([], 50)]
        >>> restored_source(old, 0, 1)
        ([(40, 50)], 90)
        >>> restored_source([[(7, 9)], None], 1, 2)  # an older checkpoint: no count
        ([], 0)
    """
    states: list[dict[str, Any]] = [s if isinstance(s, dict) else {"splits": s or [], "records": 0} for s in blobs]
    remaining = [split for s in states for split in s["splits"]]
    return remaining[index::parallelism], sum(s["records"] for s in states[index::parallelism])


def snapshot(split: Any, unpushed: tuple[Any, int] | None) -> Any:
    """The split's snapshot with the current chunk's records not yet pushed, if any."""
    if unpushed is None:
        return split
    chunk, rest = unpushed
    return Unpushed(cut(chunk, rest), split)
