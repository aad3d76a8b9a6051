"""A user source restored with the default ``ResumeSplit`` re-reads and skips its history
(issue 25, item 4): the job warns at its start when an unbounded source has no
``snapshot_split``, and a restored subtask says where it skips to, how far it got and when it
is done."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import cloudpickle
import pytest
from checkpoint_jobs import N, failed_job, published_numbers, resume

from accelflow import RuntimeContext, Source
from accelflow.dataflow import ResumeSplit
from accelflow.runtime.jobmanager import load_checkpoint
from accelflow.runtime.subtask import _resume

WARNING = ("job-1: source 'numbers' (FailsAtCheckpoint) is unbounded and has no snapshot_split, so a "
           "restore reads its input again from the start and skips every record read before the "
           "checkpoint")


class Hundreds(Source[int]):
    """``0..total-1`` in chunks of 100."""

    def __init__(self, total: int) -> None:
        self.total = total

    def create_splits(self, parallelism: int) -> Sequence[Any]:
        return ["only"]

    def read(self, split: Any, ctx: RuntimeContext) -> Iterator[int]:
        raise NotImplementedError

    def read_chunks(self, split: Any, ctx: RuntimeContext) -> Iterator[Any]:
        for start in range(0, self.total, 100):
            yield list(range(start, min(start + 100, self.total)))


def _context() -> RuntimeContext:
    return RuntimeContext(task_name="events -> map", operator_name="events", index_of_this_subtask=1,
                          number_of_parallel_subtasks=2, attempt_number=0, assigned={},
                          taskexecutor_infos={}, taskexecutor_id="taskexecutor-1")


def _skip(total: int, skip: int, caplog: pytest.LogCaptureFixture) -> tuple[list[int], list[str]]:
    with caplog.at_level(logging.WARNING, logger="accelflow.runtime"):
        chunks = list(_resume.read_split(Hundreds(total), ResumeSplit("only", skip), _context()))
    return [r for chunk in chunks for r in chunk], [r.getMessage() for r in caplog.records]


def test_a_skip_says_where_to_how_far_and_when_done(caplog: pytest.LogCaptureFixture,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_resume, "SKIP_PROGRESS_EVERY_S", 0.0)  # every chunk, not every 10 s

    records, lines = _skip(1_500_000, 1_234_567, caplog)

    assert records == list(range(1_234_567, 1_500_000))
    assert lines[0] == ("source 'events' (subtask 2/2) restores split 'only' by reading it again from "
                        "its start and skipping the 1,234,567 records read before the checkpoint (its "
                        "source has no snapshot_split); nothing comes out of this split until then")
    progress = lines[1:-1]
    assert progress[0] == "source 'events' (subtask 2/2): skipping to record 1,234,567 of split 'only': 0% done"
    assert "source 'events' (subtask 2/2): skipping to record 1,234,567 of split 'only': 40% done" in progress
    percents = [int(m[1]) for line in progress if (m := re.search(r": (\d+)% done$", line))]
    assert len(percents) == len(progress) == 12345 and percents == sorted(percents) and percents[-1] == 99
    assert re.fullmatch(r"source 'events' \(subtask 2/2\): skipped 1,234,567 records of split 'only' "
                        r"in \d+\.\d s", lines[-1])


def test_progress_is_rate_limited(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_resume, "SKIP_PROGRESS_EVERY_S", 1e9)
    records, lines = _skip(100_000, 50_050, caplog)
    assert records == list(range(50_050, 100_000))
    assert len(lines) == 2 and "skipping the 50,050 records" in lines[0] and "skipped 50,050" in lines[1]


def test_a_source_that_gives_fewer_records_than_before_is_named(caplog: pytest.LogCaptureFixture) -> None:
    records, lines = _skip(1_000, 5_000, caplog)
    assert records == []
    assert lines[-1] == ("source 'events' (subtask 2/2): split 'only' ended after 1,000 records, before "
                         "the 5,000 it had read at the checkpoint: the source does not read the same "
                         "records each time, so skipping cannot resume it; implement its snapshot_split")


@pytest.mark.slow
def test_an_unbounded_source_without_snapshot_split_is_warned_about_and_its_skip_shown(tmp_path: Path,
                                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    chk, first = failed_job(tmp_path, out)
    assert first.stderr.count(WARNING) == 1, first.stderr
    assert "implement FailsAtCheckpoint.snapshot_split(split, records_read, checkpoint_id)" in first.stderr
    monkeypatch.setenv("ACCELFLOW_STATE_DIR", str(tmp_path / "state"))  # the key it was signed with
    (split,) = cloudpickle.loads(load_checkpoint(str(chk)).operators["numbers"].subtask_states[0])["splits"]
    assert isinstance(split, ResumeSplit) and split.skip > 0

    resumed = resume(tmp_path, chk, out)

    assert resumed.returncode == 0, resumed.stderr
    where = "source 'numbers' (subtask 1/1)"
    assert (f"{where} restores split (0, {N}) by reading it again from its start and skipping the "
            f"{split.skip:,} records read before the checkpoint") in resumed.stderr
    assert f"{where}: skipped {split.skip:,} records of split (0, {N}) in " in resumed.stderr
    assert published_numbers(out) == list(range(N))
