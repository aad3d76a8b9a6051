"""A source's split read again after a restore: :func:`read_split` skips what a
:class:`ResumeSplit` says was read before, and :class:`_Skipping` says how that goes."""

from __future__ import annotations

import logging
import time
from typing import Any

from accelflow.dataflow import Columns, ResumeSplit, RuntimeContext

#: how often a subtask that skips a :class:`ResumeSplit`'s records says how far it got
SKIP_PROGRESS_EVERY_S = 10.0
_log = logging.getLogger("accelflow.runtime")


def read_split(source: Any, split: Any, ctx: RuntimeContext) -> Any:
    """The chunks of ``split``; a :class:`ResumeSplit` skips the records read before, saying
    so (:class:`_Skipping`)."""
    if not isinstance(split, ResumeSplit):
        yield from source.read_chunks(split, ctx)
        return
    skipping = _Skipping(split, ctx)
    skip = split.skip
    for chunk in source.read_chunks(split.split, ctx):
        if skip >= len(chunk):
            skip -= len(chunk)
            skipping.progress(split.skip - skip)
            if not len(chunk):
                yield chunk  # an idle source's empty chunk: still a point to checkpoint at
            continue
        if skip:
            chunk = chunk.slice(skip, len(chunk)) if isinstance(chunk, Columns) else chunk[skip:]
            skip = 0
        skipping.done()
        yield chunk
    skipping.done(ended=skip > 0)


class _Skipping:
    """Logs a :class:`ResumeSplit`'s skip (the default ``snapshot_split`` of a user source
    reads the split again from its start): where it skips to at the start, how far it got
    every :data:`SKIP_PROGRESS_EVERY_S` seconds, and when it is done.

    Example of what a restored subtask logs::

        source 'events' (subtask 1/2) restores split 'topic-a' by reading it again from its start
        and skipping the 1,234,567 records read before the checkpoint (its source has no
        snapshot_split); nothing comes out of this split until then
        source 'events' (subtask 1/2): skipping to record 1,234,567 of split 'topic-a': 40% done
        source 'events' (subtask 1/2): skipped 1,234,567 records of split 'topic-a' in 61.2 s
    """

    def __init__(self, split: ResumeSplit, ctx: RuntimeContext) -> None:
        self.target = split.skip
        self.where = (f"source {ctx.operator_name!r} (subtask {ctx.index_of_this_subtask + 1}/"
                      f"{ctx.number_of_parallel_subtasks})")
        self.split = f"{split.split!r:.80}"
        self.started = self.last = time.monotonic()
        self.skipped = 0
        self.finished = False
        _log.warning("%s restores split %s by reading it again from its start and skipping the "
                     "%s records read before the checkpoint (its source has no snapshot_split); "
                     "nothing comes out of this split until then", self.where, self.split,
                     f"{self.target:,}")

    def progress(self, skipped: int) -> None:
        self.skipped = skipped
        now = time.monotonic()
        if now - self.last >= SKIP_PROGRESS_EVERY_S:
            self.last = now
            _log.warning("%s: skipping to record %s of split %s: %d%% done", self.where,
                         f"{self.target:,}", self.split, 100 * skipped // max(self.target, 1))

    def done(self, ended: bool = False) -> None:
        if self.finished:
            return
        self.finished = True
        if ended:  # the source gave fewer records than before the checkpoint
            _log.warning("%s: split %s ended after %s records, before the %s it had read at the "
                         "checkpoint: the source does not read the same records each time, so "
                         "skipping cannot resume it; implement its snapshot_split", self.where,
                         self.split, f"{self.skipped:,}", f"{self.target:,}")
            return
        _log.warning("%s: skipped %s records of split %s in %.1f s", self.where, f"{self.target:,}",
                     self.split, time.monotonic() - self.started)
