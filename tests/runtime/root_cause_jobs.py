"""User code of the root-cause tests (``test_root_cause.py``), in a light module so subtasks
import it fast: a ``map_batches`` function that dies once, after its upstream subtasks have
filled the channel to it. Subtasks import it by reference (cloudpickle): no pytest here."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np

from accelflow import RuntimeContext

#: rows of one chunk of the tests' sources: 128 KiB of int64, so chunks go through the
#: channels' shared-memory rings and the senders wait for credits (``runtime/subtask/_shm.py``)
ROWS = 16384


class DieOnce:
    """Subtask ``index`` dies at its first batch, once per ``directory`` (a marker file there
    says it happened): ``how="kill"`` SIGKILLs its process, ``"raise"`` raises ``ValueError``.
    It first sleeps ``wait_s`` without reading, so its upstream subtasks fill the channel to it
    and block on its credits (as a slow model does): the channel closes under a sender. Every
    other batch gives its first row only."""

    def __init__(self, directory: str | Path, how: str, index: int = 1, wait_s: float = 0.3) -> None:
        self.marker = Path(directory) / "died"
        self.how, self.index, self.wait_s = how, index, wait_s

    def open(self, ctx: RuntimeContext) -> None:
        self.ctx = ctx

    def __call__(self, batch: Any) -> Any:
        if self.ctx.index_of_this_subtask == self.index and not self.marker.exists():
            self.marker.touch()
            time.sleep(self.wait_s)
            if self.how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise ValueError(f"bad batch starting at {int(batch[0])}")
        return np.asarray(batch)[:1]
