"""User code of the Kafka failover tests (issue 28 with the embedded broker), in a light module
so subtasks import it fast (no pytest, no test module): a paced value deserializer, so that the
source is still reading its partitions when a subtask fails."""

from __future__ import annotations

import time


class Paced:
    """``int(value)``, taking ``seconds`` per record (a slow topic, read for a while)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __call__(self, value: bytes | None) -> int:
        time.sleep(self.seconds)
        assert value is not None
        return int(value)
