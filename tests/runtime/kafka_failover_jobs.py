"""User code of the Kafka failover tests (issue 28 with the embedded broker), in a light module
so subtasks import it fast (no pytest, no test module): a paced value deserializer, so that the
source is still reading its partitions when a subtask fails."""

from __future__ import annotations

import time
from pathlib import Path


class Paced:
    """``int(value)``, taking ``seconds`` per record (a slow topic, read for a while). With
    ``gate``, the first record from ``gate_at`` on waits until the file ``gate`` exists, up to
    5 s: a test that fails a subtask from outside and creates that file then finds the sources
    still reading on a slow machine too. Not for ever: a waiting source holds back checkpoints
    (their barriers go out between its polls), and the failure may wait for one."""

    def __init__(self, seconds: float, gate: str | Path | None = None, gate_at: int = 0) -> None:
        self.seconds, self.gate, self.gate_at = seconds, gate, gate_at

    def __call__(self, value: bytes | None) -> int:
        time.sleep(self.seconds)
        assert value is not None
        record = int(value)
        if self.gate is not None and record >= self.gate_at:
            deadline = time.monotonic() + 5
            while not Path(self.gate).exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            self.gate = None  # open for good
        return record
