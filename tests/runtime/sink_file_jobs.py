"""User code of the ``sink_to_file`` failover tests, in a light module so subtasks import it
fast (by reference: it must not import pytest or the test modules)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from accelflow.dataflow import iter_records


def completed_checkpoints(directory: str | Path) -> int:
    """How many checkpoints under ``directory`` (a checkpointing dir) are complete (their
    ``_metadata``, written last, is there)."""
    return len(list(Path(directory).glob("*/chk-*/_metadata")))


class FailOnceAfterACheckpoint:
    """A ``map_batches`` function that passes its batches on, and fails once (in any process:
    the marker file ``<dir>/failed`` is created once) at the first batch that holds a record
    ``>= at`` while a checkpoint under ``<dir>/checkpoints`` is complete: ``how`` is ``raise``
    or ``kill`` (SIGKILL its own process, whose pid the marker holds). Failing only after a checkpoint makes the restored
    attempt continue from it (not from the start)."""

    def __init__(self, directory: str | Path, at: int, how: str = "raise") -> None:
        self.dir, self.at, self.how = Path(directory), at, how

    def __call__(self, batch: Any) -> Any:
        if (max(iter_records(batch), default=-1) >= self.at and not (self.dir / "failed").exists()
                and completed_checkpoints(self.dir / "checkpoints") and _once(self.dir / "failed")):
            if self.how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError("transient failure")
        return batch


def _once(marker: Path) -> bool:
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    return True
