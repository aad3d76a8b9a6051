"""User code for the REST tests, in a light module that the session cluster can import.

Kept free of pytest and test imports: the session cluster's subtasks import it by name
(the tests put this directory on the cluster's ``PYTHONPATH``).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from typing import Any

from accelflow import RichMapFunction, RuntimeContext, Source


class Slowly(Source[int]):
    """Unbounded: one number every ``delay`` seconds per subtask, until cancelled."""

    bounded = False

    def __init__(self, delay: float = 0.02) -> None:
        self.delay = delay

    def read(self, split: Any, ctx: RuntimeContext) -> Iterator[int]:
        for i in itertools.count():
            if ctx.is_cancelled():
                return
            time.sleep(self.delay)
            yield i


def identity(x: int) -> int:
    return x


def discard(x: Any) -> None:
    return None


class OnTheFakeGpu(RichMapFunction[int, int]):
    """A map that registers its process with the fake ``nvidia-smi`` as computing on its GPU
    (``mib`` MiB, listed while it lives), as a real CUDA process shows up there."""

    def __init__(self, mib: int = 3072) -> None:
        self.mib = mib

    def open(self, ctx: RuntimeContext) -> None:
        import os
        import shutil
        from pathlib import Path

        from accelflow.testing import FakeComputeApp, install_fake_nvidia_smi

        [gpu] = ctx.get_external_resource_infos("gpu")
        folder = Path(shutil.which("nvidia-smi") or "").parent
        install_fake_nvidia_smi(folder, 2, compute_apps=[FakeComputeApp(
            pid=os.getpid(), gpu_uuid=str(gpu.get_property("uuid")), used_memory=self.mib, while_alive=True)])

    def map(self, value: int) -> int:
        return value
