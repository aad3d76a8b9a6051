"""Typed errors cross the session cluster's submission channel (issue 12.4): a job submitted
with ``accelflow run --cluster`` raises the class its subtask raised, with its attributes; a
user's own exception as ``JobError(ValueError)`` (issue 25.3), with its traceback for
``accelflow -v`` (issue 25.7), also when the session's JobManager raised it."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from accelflow import AllocationError, DataFormatError, Environment, JobError
from rest_support import Session

sys.path[:0] = [str(Path(__file__).parent.parent / "runtime"), str(Path(__file__).parent.parent / "cli")]
from failing_job import HINT, RUNTIME_FRAME, assert_users_frames_then_hint, run_job, write_job  # noqa: E402
from runtime_jobs import BadRecord, RaiseTyped, fail_with_bad_record  # noqa: E402  (after the path is set)


def test_a_subtasks_typed_error_keeps_its_class_through_the_session(session: Session) -> None:
    env = Environment()
    env.from_sequence(1, 5).map(RaiseTyped(4), name="decode").print()
    with pytest.raises(DataFormatError) as caught:
        env.execute()
    assert caught.value.path == "/data/part-4.idx"


def test_a_refused_job_keeps_its_reasons_through_the_session(session: Session) -> None:
    env = Environment()
    env.from_sequence(1, 2).map(lambda x: x, resources={"gpu": 3}).print()  # 2 GPUs there
    with pytest.raises(AllocationError) as caught:
        env.execute()
    assert caught.value.reasons


def test_a_users_own_exception_keeps_its_class_through_the_session(session: Session) -> None:
    env = Environment()
    env.from_sequence(1, 5).map(fail_with_bad_record(2), name="label").print()
    with pytest.raises(BadRecord) as caught:
        env.execute()
    assert isinstance(caught.value, JobError) and caught.value.record == 2
    assert isinstance(caught.value.__cause__, BadRecord) and caught.value.__cause__.record == 2
    assert str(caught.value).splitlines()[0] == "subtask sequence -> label -> print (1/1) on taskexecutor-1 failed"


def test_the_cli_shows_a_session_jobs_error_with_the_users_frames(session: Session, tmp_path: Path) -> None:
    script = write_job(tmp_path)
    done = run_job("run", "--no-progress", "--cluster", session.url, str(script), env=session.env, cwd=tmp_path)
    assert_users_frames_then_hint(
        done, script, "accelflow: error: subtask sequence -> parse -> print (1/1) on taskexecutor-1 failed")
    verbose = run_job("-v", "run", "--no-progress", "--cluster", session.url, str(script), env=session.env,
                      cwd=tmp_path)
    assert verbose.returncode == 1, verbose.stderr
    assert RUNTIME_FRAME in verbose.stderr and HINT not in verbose.stderr


def test_with_v_an_error_the_session_raised_says_where(session: Session, tmp_path: Path) -> None:
    """A user's ``create_splits`` runs in the session cluster's JobManager, not in a subtask."""
    script = tmp_path / "shards.py"
    script.write_text(textwrap.dedent("""\
        from accelflow import Environment, Source


        class Shards(Source):
            def create_splits(self, parallelism):
                raise FileNotFoundError("/data/shards: no such directory")

            def read(self, split, ctx):
                yield from ()


        env = Environment()
        env.from_source(Shards(), name="shards").print()
        env.execute()
    """), encoding="utf-8")
    error = ("accelflow: error: source 'shards': create_splits(1) raised FileNotFoundError: "
             "/data/shards: no such directory")
    done = run_job("run", "--no-progress", "--cluster", session.url, str(script), env=session.env, cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines()[-2:] == [error, HINT]
    verbose = run_job("-v", "run", "--no-progress", "--cluster", session.url, str(script), env=session.env,
                      cwd=tmp_path)
    assert verbose.returncode == 1, verbose.stderr
    traceback = verbose.stderr[verbose.stderr.index("accelflow: traceback where it was raised:"):]
    assert f'File "{script}", line 6, in create_splits' in traceback
    assert "jobmanager" in traceback and traceback.splitlines()[-1] == error
