"""One sink protocol (issue 26.5): ``sink_to_file`` is a two-phase ``Sink`` whose parts are
joined by a job-level commit (Flink's global committer) in the JobManager's process; every
``sink_to`` sink gets ``open_job``, ``commit_job`` with each subtask's final committables, and
``close_job``. On a machine whose files the JobManager cannot see, the part travels in the
committable."""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from accelflow import Environment, JobError, RuntimeContext
from accelflow.connectors import SingleFileSink
from accelflow.connectors._file_parts import TargetPart, create_part
from accelflow.dataflow import FileSinkSpec, Sink, SinkToSpec, iter_records

EVENTS = "ACCELFLOW_TEST_SINK_EVENTS"


class Recording(Sink[Any]):
    """Prepares, at the end of its input, one committable per subtask naming it and its
    records; the job-level hooks append what they see to the file ``path``."""

    def __init__(self, path: str) -> None:
        self.path = path

    def open(self, ctx: RuntimeContext) -> None:
        self.index, self.records = ctx.index_of_this_subtask, []

    def write(self, chunk: Any) -> None:
        self.records.extend(iter_records(chunk))

    def end_of_input(self) -> None:
        self.ended = True

    def prepare_commit(self, checkpoint_id: int) -> list[Any]:
        return [(self.index, sorted(self.records))] if getattr(self, "ended", False) else []

    def _log(self, *event: Any) -> None:
        with open(self.path, "ab") as f:
            pickle.dump((os.getpid(), *event), f)

    def open_job(self) -> None:
        self._log("open_job")

    def commit_job(self, committables: Sequence[Sequence[Any]]) -> None:
        self._log("commit_job", [list(c) for c in committables])

    def unresumable(self) -> None:
        self._log("unresumable")

    def close_job(self, committed: bool) -> None:
        self._log("close_job", committed)


def _events(path: Path) -> list[tuple[Any, ...]]:
    out = []
    with open(path, "rb") as f:
        while True:
            try:
                out.append(pickle.load(f))
            except EOFError:
                return out


def test_a_sink_commits_for_the_job_in_the_jobmanagers_process_with_every_subtasks_committables(tmp_path: Path) -> None:
    log = tmp_path / "events"
    env = Environment({"taskmanager.numberOfTaskSlots": 3})
    env.from_sequence(1, 30, parallelism=3).rebalance().sink_to(Recording(str(log)), parallelism=3)
    env.execute("job-level commit")
    events = _events(log)
    assert [e[1] for e in events] == ["open_job", "commit_job", "close_job"]
    assert {e[0] for e in events} == {os.getpid()}  # the embedded JobManager's process
    per_subtask = events[1][2]
    assert [[index for index, _ in c] for c in per_subtask] == [[0], [1], [2]]  # subtask order
    assert sorted(r for c in per_subtask for _, records in c for r in records) == list(range(1, 31))
    assert events[2][2] is True


def test_a_failed_job_closes_its_sinks_uncommitted(tmp_path: Path) -> None:
    log = tmp_path / "events"
    env = Environment()
    env.from_sequence(1, 5).map(_fail_on_three).sink_to(Recording(str(log)))
    with pytest.raises(JobError, match="three"):
        env.execute()
    # the job's run (no checkpoint can resume it: the sink may drop what it keeps for one),
    # then the cleanup after its failure (what runs that are over left goes)
    assert [e[1:] for e in _events(log)] == [("open_job",), ("unresumable",), ("close_job", False),
                                             ("open_job",), ("close_job", False)]


def _fail_on_three(x: int) -> int:
    if x == 3:
        raise ValueError("three")
    return x


def test_sink_to_file_is_a_sink_on_the_same_protocol(tmp_path: Path) -> None:
    env = Environment()
    env.from_sequence(1, 3).sink_to_file(tmp_path / "out.txt")
    node = env._transformations[-1]
    assert isinstance(node.spec, FileSinkSpec) and isinstance(node.spec, SinkToSpec)
    assert isinstance(node.sink, SingleFileSink) and node.kind == "sink_file"
    env.execute()
    assert (tmp_path / "out.txt").read_text().split() == ["1", "2", "3"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def _subtask(sink: SingleFileSink, index: int) -> SingleFileSink:
    """``sink`` as subtask ``index`` of 2 gets it, opened."""
    twin: SingleFileSink = pickle.loads(pickle.dumps(sink))
    twin.open(RuntimeContext(task_name="t", operator_name="file sink", index_of_this_subtask=index,
                             number_of_parallel_subtasks=2, attempt_number=0, assigned={},
                             taskexecutor_infos={}, taskexecutor_id="te"))
    return twin


def test_a_part_the_jobmanager_sees_is_committed_by_its_path(tmp_path: Path) -> None:
    target = tmp_path / "result.txt"
    sink = SingleFileSink(target)
    sink.open_job()
    parts = []
    for index, records in enumerate((["a1"], ["b1", "b2"])):
        subtask = _subtask(sink, index)
        subtask.write(records)
        assert subtask.prepare_commit(1) == []  # nothing is published before the end
        subtask.end_of_input()
        parts.append(subtask.prepare_commit(2))
        subtask.close()
    assert [p.data for (p,) in parts] == [None, None]  # the same machine: no bytes travel
    sink.commit_job(parts)
    sink.close_job(True)
    assert target.read_text() == "a1\nb1\nb2\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.txt"]


_ON_ANOTHER_MACHINE = """
    import os, pickle, sys
    from accelflow import RuntimeContext
    sink = pickle.loads(sys.stdin.buffer.read())
    ctx = RuntimeContext(task_name="t", operator_name="file sink", index_of_this_subtask=1,
                         number_of_parallel_subtasks=2, attempt_number=0, assigned={},
                         taskexecutor_infos={}, taskexecutor_id="te")
    sink.open(ctx)
    sink.write(["b1", "b2"])
    sink.end_of_input()
    (part,) = sink.prepare_commit(1)
    sink.close()
    sys.stdout.buffer.write(pickle.dumps((part, os.path.exists(os.path.dirname(sink.target)))))
"""


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="needs root and unshare for a mount namespace (another machine's /tmp)")
def test_a_part_written_on_another_machine_travels_in_its_committable(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    target = out / "result.txt"
    sink = SingleFileSink(target)
    sink.open_job()  # the JobManager holds the target's lock before any subtask starts
    # the subtask's machine: the target's directory is not there (a private, empty tmpfs)
    command = f'mount -t tmpfs tmpfs {tmp_path} && exec "$0" -c "$1"'
    done = subprocess.run(["unshare", "--mount", "sh", "-c", command, sys.executable,
                           textwrap.dedent(_ON_ANOTHER_MACHINE)],
                          input=pickle.dumps(sink), capture_output=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    part, directory_left_there = pickle.loads(done.stdout)
    assert part.data == b"b1\nb2\n" and part.size == 6  # its bytes, read on that machine
    assert not directory_left_there  # it made the directory, and removed it with its part
    assert not os.path.exists(part.path)  # it never existed here

    fd, local = create_part(str(target), 0, 0)  # subtask 0's part, on this machine
    os.write(fd, b"a1\n")
    os.close(fd)
    sink.commit_job([[TargetPart(local, 3)], [part]])
    sink.close_job(True)
    assert target.read_text() == "a1\nb1\nb2\n"
    assert sorted(p.name for p in out.iterdir()) == ["result.txt"]
