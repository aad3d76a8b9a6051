"""A job script whose map raises the user's own ``BadRecord(ValueError)``, and what the CLI must
print for it (shared by tests/cli/test_job_errors_cli.py and the session cluster's tests)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

#: the job script; ``raise BadRecord`` is on line 12 (asserted below)
JOB = textwrap.dedent("""\
    from accelflow import Environment, JobError


    class BadRecord(ValueError):
        def __init__(self, message, *, record):
            super().__init__(message)
            self.record = record


    def parse(x):
        if x == 3:
            raise BadRecord(f"no label in record {x}", record=x)
        return x


    env = Environment()
    env.from_sequence(1, 5).map(parse, name="parse").print()
    try:
        env.execute()
    except BadRecord as error:
        print("caught", type(error).__name__, error.record, isinstance(error, JobError),
              type(error.__cause__).__name__, flush=True)
        raise
""")
RUNTIME_FRAME = os.path.join("accelflow", "runtime", "subtask", "_runner.py")
HINT = "accelflow: run with -v for the traceback"


def write_job(directory: Path) -> Path:
    script = directory / "job.py"
    script.write_text(JOB, encoding="utf-8")
    assert script.read_text(encoding="utf-8").splitlines()[11].strip().startswith("raise BadRecord")
    return script


def run_job(*args: str, env: dict[str, str] | None = None, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(env or os.environ)
    env.pop("ACCELFLOW_CONF", None)
    return subprocess.run([sys.executable, "-m", "accelflow", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def assert_users_frames_then_hint(done: subprocess.CompletedProcess[str], script: Path, first: str) -> None:
    """The error line, the user's frame (file, line, source) and exception, the hint: nothing of
    accelflow's own code."""
    assert done.returncode == 1, done.stderr
    assert "caught JobError(BadRecord) 3 True BadRecord" in done.stdout
    lines = done.stderr.splitlines()
    assert first in lines, done.stderr
    start = lines.index(first)
    assert lines[start:] == [
        first,
        "  Traceback (most recent call last):",
        f'    File "{script}", line 12, in parse',
        '      raise BadRecord(f"no label in record {x}", record=x)',
        "  BadRecord: no label in record 3",
        HINT,
    ], done.stderr
