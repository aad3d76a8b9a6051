"""docs/kafka.md's job (issue 25, item 14): it runs, and no Kafka client outlives the embedded
broker (each would print librdkafka's ``Connection refused`` lines at exit)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from kafka_cli import ROOT

pytestmark = pytest.mark.slow


def test_the_docs_job_prints_nothing_from_librdkafka(tmp_path: Path) -> None:
    text = (ROOT / "docs" / "kafka.md").read_text(encoding="utf-8")
    job = re.search(r"^```python\n(.*?)^```", text, re.M | re.S)
    assert job, "docs/kafka.md has no python block"
    (tmp_path / "job.py").write_text(job.group(1), encoding="utf-8")
    proc = subprocess.run([sys.executable, "job.py"], cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "rdkafka" not in proc.stderr and "Connection refused" not in proc.stderr, proc.stderr[-3000:]
