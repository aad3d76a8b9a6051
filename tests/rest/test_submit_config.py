"""A job script run with ``accelflow run --cluster`` builds its Environment on top of the
session cluster's config, so it sees the cluster's external resources without repeating them."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from rest_support import start_session, stop_and_check

JOB = """
from accelflow import Environment
env = Environment()
print("resources:", ",".join(env.config.external_resources))
print("amount:", env.config.external_resources["gpu"].amount)
"""


def test_script_sees_the_cluster_resources(tmp_path: Path) -> None:
    session = start_session(tmp_path, gpus=2)
    try:
        script = tmp_path / "job.py"
        script.write_text(textwrap.dedent(JOB), encoding="utf-8")
        proc = subprocess.run(
            [sys.executable, "-m", "accelflow", "run", "--cluster", session.url, str(script)],
            env=session.env, capture_output=True, text=True, timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        assert "resources: gpu" in proc.stdout
        assert "amount: 2" in proc.stdout
    finally:
        stop_and_check(session)
