"""The job-level side of the two-phase sinks of a job (Flink's global committer), in the
JobManager's process: each ``sink_to`` operator's :class:`~accelflow.dataflow.Sink` is opened
for the job before its first attempt, given every subtask's final committables once the job
has succeeded, and closed when it ends (see ``Sink.open_job``, ``commit_job``, ``close_job``).

The final committables come from the acknowledgements of the job's final checkpoint
(``CheckpointAck(final=True)``): the state a ``sink_to`` subtask acks holds what it prepared
at that checkpoint (:func:`accelflow.runtime.committables_at`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from types import TracebackType
from typing import Any

import cloudpickle

from accelflow.dataflow import Chain, JobGraph, Sink, Transformation
from accelflow.runtime import SubtaskKey, committables_at

_log = logging.getLogger("accelflow.runtime")

#: per subtask of the last attempt, the id of its final checkpoint and its acked states
FinalAcks = dict[SubtaskKey, tuple[int, dict[str, bytes]]]


class JobSinks:
    """The sinks of ``graph`` for one job run: ``with JobSinks(graph) as sinks: ...
    sinks.commit(...)``; leaving the block closes them (committed or not). ``resumable``
    says, when the job ended unpublished, whether a checkpoint or savepoint may still name
    what its sinks left (one completed, or the job was restored from one): where none can,
    each sink is told so (``Sink.unresumable``) before it closes.

    Raises:
        JobError: from a sink's ``open_job`` (e.g. another running job writes its file).
    """

    def __init__(self, graph: JobGraph, resumable: Callable[[], bool] = lambda: True) -> None:
        self.graph, self.resumable = graph, resumable
        self.opened: list[Sink[Any]] = []
        self.committed = False

    def __enter__(self) -> JobSinks:
        try:
            for _, _, sink in _sinks_of(self.graph):
                sink.open_job()
                self.opened.append(sink)
        except BaseException:
            self._close(committed=False)
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        committed = self.committed and error is None
        if not committed and not self.resumable():
            for sink in self.opened:
                try:
                    sink.unresumable()
                except Exception as exc:  # the job's outcome stands
                    _log.warning("sink %r: unresumable() raised %s: %s", sink, type(exc).__name__, exc)
        self._close(committed)

    def commit(self, job_id: str, attempt: int, finals: FinalAcks) -> None:
        """Give each sink that commits for the job its subtasks' final committables, in
        subtask order (subtasks of attempt ``attempt`` of ``job_id``)."""
        for chain, node, sink in _sinks_of(self.graph):
            if type(sink).commit_job is Sink.commit_job:
                continue  # no job-level commit: its state stays unread here
            per_subtask = []
            for index in range(chain.parallelism):
                checkpoint_id, states = finals[SubtaskKey(job_id, attempt, chain.id, index)]
                state = cloudpickle.loads(states[node.name])
                per_subtask.append(committables_at(state, checkpoint_id))
            sink.commit_job(per_subtask)
        self.committed = True

    def _close(self, committed: bool) -> None:
        while self.opened:
            sink = self.opened.pop()
            try:
                sink.close_job(committed)
            except Exception as exc:  # the job's outcome stands; say what was left
                _log.warning("sink %r could not close after the job: %s: %s", sink, type(exc).__name__, exc)


def discard_sinks(graph: JobGraph) -> None:
    """After a job (or its cluster's start) failed: each sink removes what runs that are over
    left (opened and closed unpublished). Never raises: a sink busy with another job, or
    one that cannot open, is left alone."""
    for _, _, sink in _sinks_of(graph):
        try:
            sink.open_job()
        except Exception:
            continue
        try:
            sink.close_job(False)
        except Exception:
            continue


def _sinks_of(graph: JobGraph) -> list[tuple[Chain, Transformation, Sink[Any]]]:
    """(chain, node, its sink) of every ``sink_to`` operator of ``graph``, in graph order."""
    return [(chain, node, sink) for chain in graph.chains for node in chain.nodes
            if (sink := node.sink) is not None]
