"""The two-phase-commit sink contract used by ``stream.sink_to(sink)`` (Flink's Sink API).

A sink writes records as they come, and makes them visible only when the checkpoint that
covers them completes, so a failure never shows a record twice nor loses one:

1. :meth:`Sink.write` for every chunk, between checkpoints;
2. at a checkpoint's barrier, :meth:`Sink.prepare_commit` makes everything written so far
   durable but still invisible (closes a hidden file, flushes a transaction's records) and
   returns *committables*: small picklable descriptions of what to publish. They are part of
   the checkpoint;
3. when that checkpoint is complete, :meth:`Sink.commit` publishes them. After a failure, the
   committables of the checkpoint the job restores from are committed again, so ``commit``
   must be idempotent (publishing something already published does nothing).

At the end of a bounded input, :meth:`Sink.end_of_input` is called (Flink's
``flush(endOfInput)``), then the last records are prepared the same way and committed once
every subtask of the job has finished (the job's final checkpoint). Without checkpointing,
that end is the only commit: the output appears when the job succeeds.

A sink may also act for the whole job (Flink's global committer), in the process that runs
the JobManager (the client, or the session cluster), on the sink object the job script built:
:meth:`Sink.open_job` before the job's first attempt, :meth:`Sink.commit_job` with every
subtask's final committables once the job has succeeded (``sink_to_file`` joins its parts into
one file there), and :meth:`Sink.close_job` at the end, however the job ended.

Example (a sink that publishes files by renaming them)::

    class Renaming(Sink):
        def open(self, ctx): self.part = open_hidden_file(ctx)
        def write(self, chunk): self.part.write_records(chunk)
        def prepare_commit(self, checkpoint_id):
            path = self.part.close()
            self.part = open_hidden_file()
            return [path]
        def commit(self, committables):
            for hidden in committables:
                publish(hidden)  # a rename that is a no-op when already done
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from accelflow.dataflow._context import RuntimeContext

IN = TypeVar("IN")


class Sink(ABC, Generic[IN]):
    """An exactly-once sink (see the module documentation). The object is pickled to each
    sink subtask, where :meth:`open` is called before anything else."""

    def open(self, ctx: RuntimeContext) -> None:
        """Called once in the subtask, before :meth:`restore_state` and the first write."""

    @abstractmethod
    def write(self, chunk: Any) -> None:
        """Write one chunk of records (a list, a NumPy array of rows or ``Columns``; iterate
        it with :func:`accelflow.dataflow.iter_records`). Not visible until committed."""

    def prepare_commit(self, checkpoint_id: int) -> list[Any]:
        """Make every record written since the last call durable and return the picklable
        committables that publish them (empty when there is nothing to publish).

        ``checkpoint_id`` is the checkpoint whose barrier arrived, or the job's final one at
        the end of a bounded input.
        """
        return []

    def commit(self, committables: Sequence[Any]) -> None:
        """Publish ``committables`` (from this sink's :meth:`prepare_commit`, possibly in an
        earlier process of the same job, possibly already published). Must be idempotent."""

    def snapshot_state(self, checkpoint_id: int) -> Any:
        """Writer state besides the committables (picklable), restored by
        :meth:`restore_state`; None by default."""
        return None

    def restore_state(self, state: Any) -> None:
        """The state :meth:`snapshot_state` returned in the checkpoint this job restores from
        (None when there is none). When the job is restored with a lower parallelism, a
        subtask may take the states of several old ones: ``state`` is then their list, in
        subtask order (``[None, None]`` for two that returned None)."""

    def end_of_input(self) -> None:
        """The subtask's input has ended: the next :meth:`prepare_commit` is its last (for
        the job's final checkpoint)."""

    def close(self) -> None:
        """Called once at the end, also after a failure (discard what was not prepared)."""

    # -- the job's side, in the JobManager's process ----------------------------------------------

    def open_job(self) -> None:
        """Before the job's first attempt is deployed (e.g. take a lock on the output)."""

    def commit_job(self, committables: Sequence[Sequence[Any]]) -> None:
        """The job succeeded: publish what concerns the whole job. ``committables``: per
        subtask, in subtask order, what its last :meth:`prepare_commit` returned (already
        passed to :meth:`commit` in that subtask). Not called for a job stopped with a
        savepoint. The default does nothing."""

    def unresumable(self) -> None:
        """The job ended unpublished and no checkpoint or savepoint of it can be resumed (none
        completed and it was not restored from one, e.g. checkpointing off): what the sink
        keeps for a resume may go at :meth:`close_job`. Called just before it. The default
        does nothing."""

    def close_job(self, committed: bool) -> None:
        """The job has ended (``committed``: :meth:`commit_job` ran): give back what
        :meth:`open_job` took, remove what an unpublished job left. Must not raise."""
