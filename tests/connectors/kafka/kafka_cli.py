"""Helpers for tests that run the real CLI: ``accelflow kafka-broker`` in the background and
``accelflow run`` of job scripts."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ACCELFLOW = str(Path(sys.executable).parent / "accelflow")
ROOT = Path(__file__).resolve().parents[3]


@contextlib.contextmanager
def kafka_broker(*args: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``accelflow kafka-broker ARGS`` running: (the process, its bootstrap address)."""
    proc = subprocess.Popen([ACCELFLOW, "kafka-broker", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        bootstrap = proc.stdout.readline().strip()
        assert bootstrap, proc.communicate(timeout=30)
        yield proc, bootstrap
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
