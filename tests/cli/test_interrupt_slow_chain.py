"""Ctrl-C on ``accelflow run`` of a job whose source is chained to a slow map (review finding
3): checkpoints complete between slices of a source chunk, so the interrupt a few records in
keeps a checkpoint and prints its resume hint (before, the first checkpoint waited for a whole
chunk of 1024 records: 10 s here, and an earlier Ctrl-C had nothing to resume from)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ACCELFLOW = str(Path(sys.executable).with_name("accelflow"))

JOB = """\
import time
from accelflow import Environment

def slow(x):
    time.sleep(0.01)
    with open(%r, "a") as f:
        f.write(f"{x}\\n")
    return x

env = Environment({"parallelism.default": 1, "execution.checkpointing.interval": "200 ms",
                   "execution.checkpointing.dir": %r,
                   "execution.checkpointing.externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION"})
env.from_sequence(1, 1000).map(slow).add_sink(lambda x: None)
env.execute("slow")
"""


def test_ctrl_c_a_few_records_into_a_slow_chain_keeps_a_checkpoint_and_says_how_to_resume(tmp_path: Path) -> None:
    calls, checkpoints = tmp_path / "calls.txt", tmp_path / "checkpoints"
    script = tmp_path / "job.py"
    script.write_text(JOB % (str(calls), str(checkpoints)), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "ACCELFLOW_CONF"}
    proc = subprocess.Popen([ACCELFLOW, "run", "--no-progress", str(script)], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while not list(checkpoints.glob("*/chk-*/_metadata")):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no checkpoint"
            time.sleep(0.01)
        processed = len(calls.read_text().splitlines())
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in the terminal
        _, stderr = proc.communicate(timeout=90)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    assert processed < 500  # the first checkpoint came a few records in, not after the chunk
    assert proc.returncode == 130, stderr
    assert "accelflow: resume with: accelflow run -s " in stderr, stderr
