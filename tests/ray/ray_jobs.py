"""User code for the Ray tests, in a light module so subtasks import it fast (by reference)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from accelflow import RuntimeContext, Source

RAY_GPUS = 4  # logical GPUs of the tests' Ray instance
RAY_FPGAS = 4  # units of its custom resource "fpga"
GPU_CONF = {  # two GPUs per TaskExecutor actor, from the GPU plugin
    "external-resources": "gpu",
    "external-resource.gpu.amount": 2,
    "external-resource.gpu.driver-factory.class": "gpu",
}


class GatedNumbers(Source[int]):
    """``0..n-1`` split round-robin; each split yields its first half, touches
    ``<marks>/started-<subtask>``, then waits (up to 30 s) for the file ``gate``."""

    def __init__(self, n: int, marks: str) -> None:
        self.n, self.marks = n, marks

    def create_splits(self, parallelism: int) -> Sequence[Any]:
        return [list(range(i, self.n, parallelism)) for i in range(parallelism)]

    def read(self, split: Any, ctx: RuntimeContext) -> Iterator[int]:
        half = len(split) // 2
        yield from split[:half]
        Path(self.marks, f"started-{ctx.index_of_this_subtask}-a{ctx.attempt_number}").touch()
        deadline = time.monotonic() + 30
        while not os.path.exists(os.path.join(self.marks, "gate")) and time.monotonic() < deadline:
            time.sleep(0.01)
        yield from split[half:]

    def read_chunks(self, split: Any, ctx: RuntimeContext) -> Iterator[Any]:
        for x in self.read(split, ctx):
            yield [x]

    def size_hint(self) -> int:
        return self.n


def keyed_job_records() -> list[tuple[int, int]]:
    return [(i % 7, i) for i in range(5000)]


def double(r: tuple[int, int]) -> tuple[int, int]:
    return (r[0], r[1] * 2)


def first(r: tuple[int, int]) -> int:
    return r[0]


def row_sums(batch: Any) -> Any:
    """Sum of each row of a NumPy batch."""
    return batch.sum(axis=1)


def wait_until(check: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    """``check()``'s first true value, polled every 50 ms; fails naming ``what`` after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
    return value
