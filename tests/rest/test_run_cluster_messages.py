"""What the terminal of ``accelflow run --cluster`` says about a job it cannot see otherwise:
it waits for devices (once, with the placement's reasons, as ``GET /v1/jobs/{id}/pending``)
and then starts. Before, such a client printed only ``submitted job-N`` and then nothing."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from rest_support import Session, wait_until
from rest_jobs import Slowly, discard, identity

from accelflow import Environment, JobCancelledError

WAITING = """\
from rest_jobs import discard
from accelflow import Environment
env = Environment()
env.from_sequence(1, 50).map(lambda x: x, name="classify", resources={"gpu": 0.5}).add_sink(discard)
env.execute("half a gpu")
"""


def _lines_of(stream: Any) -> tuple[list[str], threading.Thread]:
    """The lines ``stream`` gives, read as they come by the thread returned."""
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(stream.readline, "")), daemon=True)
    reader.start()
    return lines, reader


def test_a_waiting_job_says_once_why_it_waits_and_again_when_it_starts(
        session: Session, tmp_path: Path) -> None:
    env = Environment()
    (env.from_source(Slowly(), parallelism=2)
        .map(identity, name="classify", parallelism=2, resources={"gpu": 1}).add_sink(discard))
    first = env.execute_async("both gpus")
    wait_until(lambda: all(d["holders"] for d in session.devices().values()), "both GPUs held")
    script = tmp_path / "job.py"
    script.write_text(WAITING, encoding="utf-8")
    proc = subprocess.Popen([sys.executable, "-m", "accelflow", "run", "--cluster", session.url, str(script)],
                            env=session.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines, reader = _lines_of(proc.stderr)
    try:
        wait_until(lambda: any("waits for resources" in line for line in lines), "the PENDING message", 60)
        job = lines[0].split()[2]  # accelflow: submitted job-N (half a gpu) to URL
        assert session.get(f"/v1/jobs/{job}")["state"] == "PENDING"
        status, body = session.request(f"/v1/jobs/{first.job_id}/cancel", "POST")
        assert status == 202, body
        with pytest.raises(JobCancelledError):
            first.wait(30)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        reader.join(10)
        assert proc.stderr is not None
        proc.stderr.close()
        if first.status() == "RUNNING":
            first.cancel()
    text = "".join(lines)
    assert session.get(f"/v1/jobs/{job}")["state"] == "FINISHED"
    assert text.startswith(
        f"accelflow: submitted {job} (half a gpu) to {session.url}\n"
        f"accelflow: {job} (half a gpu) waits for resources (PENDING): cannot place classify (1/1) "
        "asking for gpu: 0.5 on any of 1 TaskExecutor(s)"), text
    assert ("\n  taskexecutor-1: gpu 0 has 0 free, 0.5 needed\n  taskexecutor-1: gpu 1 has 0 free, "
            f"0.5 needed\n  it starts when they are free; see {session.url}\n") in text
    assert text.count("waits for resources") == 1  # once, not at every progress tick
    assert lines[-1].startswith(f"accelflow: {job} (half a gpu) got its resources after ")
