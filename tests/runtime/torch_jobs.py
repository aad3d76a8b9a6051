"""User code of the PyTorch memory-limit tests (subtasks import this module by reference, so it
stays light: ``torch``, the fake of ``accelflow.testing``, is imported in ``open()``, as user
code that imports it when it opens; the limit is set right after)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from accelflow import RichMapFunction, RuntimeContext

MIB = 2**20


class HeldTo(RichMapFunction[int, int]):
    """On its first record, writes ``{"fraction", "total", "more"}`` to ``folder/held``: the
    memory fraction PyTorch holds it to, the GPU's memory as CUDA sees it, and whether one byte
    more than ``request`` bytes could be allocated once ``request`` bytes were."""

    def __init__(self, folder: str, request: int) -> None:
        self.folder, self.request = Path(folder), request

    def open(self, ctx: RuntimeContext) -> None:
        import torch

        self.torch: Any = torch
        self.done = False

    def map(self, value: int) -> int:
        if not self.done:
            torch, self.done = self.torch, True
            row = {"fraction": torch.cuda.get_per_process_memory_fraction(0),
                   "total": torch.cuda.get_device_properties(0).total_memory}
            held = torch.empty(self.request, dtype=torch.uint8, device="cuda")
            try:
                torch.empty(1, dtype=torch.uint8, device="cuda")
                row["more"] = True
            except torch.cuda.OutOfMemoryError:
                row["more"] = False
            del held
            (self.folder / "held").write_text(json.dumps(row))
        return value


class Allocates(RichMapFunction[int, int]):
    """Allocates 256 MiB on the GPU per record; ``keep``: keeps every tensor (a leak)."""

    def __init__(self, keep: bool) -> None:
        self.keep = keep

    def open(self, ctx: RuntimeContext) -> None:
        import torch

        self.torch: Any = torch
        self.kept: list[Any] = []

    def map(self, value: int) -> int:
        tensor = self.torch.empty(256 * MIB, dtype=self.torch.uint8, device="cuda")
        if self.keep:
            self.kept.append(tensor)
        return value


def add_leak_job(env: Any) -> None:
    """Two maps on the GPU, 1 GiB of memory asked for each: ``steady`` frees what it allocates,
    ``leaky`` keeps it (256 MiB a record, 40 records)."""
    numbers = env.from_sequence(1, 40, parallelism=1)
    for name, keep in (("steady", False), ("leaky", True)):
        numbers.rebalance().map(Allocates(keep=keep), name=name, resources={"gpu": {"memory": "1Gi"}}).add_sink(
            lambda r: None)
