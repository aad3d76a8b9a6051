"""Records of a class that the job script itself defines (``__main__``): plain pickle cannot find
such a class by name in a subtask, where cloudpickle rebuilt it inside the job's functions. They
travel by value and come back to the client as the script's own class (a session cluster is
started and stopped with the real CLI: here, where no test makes itself a subreaper)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

JOB_SCRIPT_RECORDS = """
    from dataclasses import dataclass
    from accelflow import Environment

    @dataclass
    class Reading:
        value: int

    def doubled(env):
        readings = env.from_sequence(1, 6).map(Reading, name="read").rebalance()
        return readings.map(lambda r: Reading(r.value * 2), name="double")

    out = doubled(Environment({"parallelism.default": 2})).execute_and_collect()
    assert all(type(r) is Reading for r in out), [type(r) for r in out]  # the script's own class
    print("collected", sorted(r.value for r in out))
    env = Environment({"parallelism.default": 2, "execution.runtime-mode": "batch"})
    totals = doubled(env).key_by(lambda r: r.value % 3).reduce(lambda a, b: Reading(a.value + b.value))
    print("keyed", sorted(r.value for r in totals.execute_and_collect()))
"""


@pytest.mark.parametrize("where", ["embedded", "session"])
def test_records_of_a_class_of_the_job_script_travel_and_come_back_as_that_class(
        tmp_path: Path, where: str) -> None:
    """Plain pickle cannot find a job script's class by name in a subtask (cloudpickle rebuilt
    it there, inside the job's functions): such records cross rebalance and key_by edges by value
    and reach ``execute_and_collect`` as the script's own class, embedded and on a session
    cluster (whose JobManager is another process), as PyFlink's pickled records do."""
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(JOB_SCRIPT_RECORDS), encoding="utf-8")
    accelflow = str(Path(sys.executable).parent / "accelflow")
    env = {**os.environ, "ACCELFLOW_STATE_DIR": str(tmp_path / "state")}
    if where == "embedded":
        done = subprocess.run([accelflow, "run", str(script)], capture_output=True, text=True, timeout=180, env=env)
    else:
        start = subprocess.run([accelflow, "cluster", "start", "-D", "rest.port=0", "-D", "taskmanager.numberOfTaskSlots=8"],
                               capture_output=True, text=True, timeout=120, env=env)
        assert start.returncode == 0, start.stderr
        url = re.search(r"http://[0-9.:]+", start.stdout + start.stderr)
        assert url is not None, start.stdout + start.stderr
        try:
            done = subprocess.run([accelflow, "run", "--cluster", url.group(0), str(script)],
                                  capture_output=True, text=True, timeout=180, env=env)
        finally:
            subprocess.run([accelflow, "cluster", "stop", "--cluster", url.group(0)], capture_output=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert "collected [2, 4, 6, 8, 10, 12]" in done.stdout
    assert "keyed [10, 14, 18]" in done.stdout  # 2 + 8, 4 + 10, 6 + 12 by value % 3
