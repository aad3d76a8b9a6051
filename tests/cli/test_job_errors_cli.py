"""A job's error on the command line (issue 25.3 and 25.7): ``accelflow run job.py`` prints
what failed and the user's frames (accelflow's own dropped), then one hint line; ``accelflow -v``
prints the whole traceback where the error was raised. The script's own ``except`` catches the
error as the class it raised (a subclass of both it and ``JobError``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from failing_job import HINT, RUNTIME_FRAME, assert_users_frames_then_hint, run_job, write_job


@pytest.fixture
def script(tmp_path: Path) -> Path:
    return write_job(tmp_path)


def test_an_embedded_jobs_error_shows_the_users_frames_and_a_hint(script: Path) -> None:
    done = run_job("run", "--no-progress", str(script), cwd=script.parent)
    assert_users_frames_then_hint(
        done, script, "accelflow: error: subtask sequence -> parse -> print (1/1) on taskexecutor-1 failed")
    assert RUNTIME_FRAME not in done.stderr


def test_with_v_an_embedded_jobs_error_shows_where_it_was_raised(script: Path) -> None:
    done = run_job("-v", "run", "--no-progress", str(script), cwd=script.parent)
    assert done.returncode == 1, done.stderr
    traceback = done.stderr[done.stderr.index("accelflow: traceback where it was raised:"):]
    assert RUNTIME_FRAME in traceback  # the whole traceback, accelflow's frames too
    assert f'File "{script}", line 12, in parse' in traceback
    assert traceback.splitlines()[-1] == "  BadRecord: no label in record 3"  # the error comes last
    assert HINT not in done.stderr
