"""``accelflow run -s PATH`` / ``-n`` and Ctrl-C on ``accelflow run``, with real processes: a
bad path fails before the script runs; SIGINT cancels an unbounded checkpointed job (exit
130), keeps its latest checkpoint under ``RETAIN_ON_CANCELLATION`` and says how to resume,
and ``accelflow run -s`` resumes from it with every record published exactly once.
(The session-cluster side, ``accelflow savepoint|stop``, runs in tests/rest.)"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from accelflow.cli._run import misplaced_options

RUNTIME = Path(__file__).resolve().parents[1] / "runtime"
if str(RUNTIME) not in sys.path:
    sys.path.insert(0, str(RUNTIME))

from runtime_jobs import published  # noqa: E402

N = 3000
JOB = """\
import sys
from runtime_jobs import CommitLog, Paced
from accelflow import Environment
out, checkpoints, bounded = sys.argv[1], sys.argv[2], sys.argv[3] == "bounded"
env = Environment({"parallelism.default": 1, "execution.checkpointing.interval": "100 ms",
                   "execution.checkpointing.dir": checkpoints,
                   "execution.checkpointing.externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION"})
env.from_source(Paced(%d, chunk=20, delay=0.01, bounded=bounded), name="numbers") \\
    .map(lambda x: 2 * x, name="double").sink_to(CommitLog(out), name="log")
print("submitting", flush=True)
env.execute("numbers")
""" % N


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "ACCELFLOW_CONF"}
    env["PYTHONPATH"] = os.pathsep.join([str(RUNTIME), *[p for p in sys.path if p]])
    return env


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "accelflow", "run", *args], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=120, check=False)


def test_a_bad_savepoint_path_fails_in_one_line_before_the_script_runs(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text("open('ran', 'w').close()\n", encoding="utf-8")
    missing = _run("-s", "nope", str(script), cwd=tmp_path)
    assert missing.returncode == 1
    assert missing.stderr == (f"accelflow: error: {tmp_path / 'nope'}: no such checkpoint or "
                              "savepoint directory; check execution.state-recovery.path\n")
    (tmp_path / "empty").mkdir()
    empty = _run("--fromSavepoint", str(tmp_path / "empty"), "-n", str(script), cwd=tmp_path)
    assert empty.returncode == 1
    (line,) = empty.stderr.splitlines()
    assert line.startswith(f"accelflow: error: {tmp_path / 'empty'}: has no _metadata")
    assert not (tmp_path / "ran").exists()


def test_the_recovery_options_set_their_keys_and_are_warned_about_after_the_script(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text("from accelflow import Environment\nc = Environment().config\n"
                      "print(c.raw.get('execution.state-recovery.ignore-unclaimed-state'))\n",
                      encoding="utf-8")
    done = _run("--allow-non-restored-state", str(script), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "true"
    assert misplaced_options(["--fromSavepoint", "/sp", "--allowNonRestoredState"]) == [
        "--fromSavepoint /sp", "--allowNonRestoredState"]


def _wait_for(condition: object, what: str, proc: subprocess.Popen[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if proc.poll() is not None:
            raise AssertionError(f"accelflow run ended early ({proc.returncode}): {proc.communicate()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.mark.slow
def test_ctrl_c_cancels_keeps_the_checkpoint_and_run_s_resumes_exactly_once(tmp_path: Path) -> None:
    out, checkpoints = tmp_path / "out", tmp_path / "checkpoints"
    out.mkdir()
    script = tmp_path / "job.py"
    script.write_text(JOB, encoding="utf-8")
    proc = subprocess.Popen(
        [sys.executable, "-m", "accelflow", "run", str(script), str(out), str(checkpoints), "unbounded"],
        cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: list(checkpoints.glob("*/chk-*/_metadata")) and published(out),
                  "a checkpoint and published records", proc)
        proc.send_signal(signal.SIGINT)  # what Ctrl-C sends (TaskExecutors ignore it)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, stderr
    assert "accelflow: interrupted: cancelled job-1 (numbers)" in stderr.splitlines()
    kept = re.search(r"^accelflow: its latest checkpoint is kept at (\S+)$", stderr, re.MULTILINE)
    assert kept, stderr
    path = kept[1]
    assert Path(path).parent.parent == checkpoints and (Path(path) / "_metadata").is_file()
    resume = f"accelflow: resume with: accelflow run -s {path} {script} {out} {checkpoints} unbounded"
    assert resume in stderr.splitlines()
    first = published(out)
    assert first and len(first) == len(set(first))

    resumed = _run("-s", path, str(script), str(out), str(checkpoints), "bounded", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert sorted(published(out)) == [2 * x for x in range(N)]  # none lost, none twice
