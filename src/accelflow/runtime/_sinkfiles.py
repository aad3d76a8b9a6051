"""Committing a job's file sinks: the part files of every subtask become one file, atomically."""

from __future__ import annotations

import glob
import os
from collections.abc import Callable

from accelflow.dataflow import JobGraph


def commit_files(graph: JobGraph, parts_of: Callable[[int, int], list[str]]) -> None:
    """Concatenate each file sink's parts (``parts_of(chain_id, index)``) into its target."""
    for chain in graph.chains:
        for node in chain.nodes:
            if node.kind != "sink_file":
                continue
            parts = [p for i in range(chain.parallelism) for p in parts_of(chain.id, i)]
            _concatenate(parts, str(node.fn))
            for part in parts:
                os.unlink(part)
    remove_stale_parts(graph)


def _concatenate(parts: list[str], target: str) -> None:
    tmp = f"{target}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as out:
            for part in parts:
                with open(part, "rb") as f:
                    while block := f.read(1 << 20):
                        out.write(block)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def remove_stale_parts(graph: JobGraph) -> None:
    """Remove part files a failed or cancelled attempt left next to the file sinks' targets."""
    for t in graph.transformations:
        if t.kind == "sink_file":
            directory, base = os.path.split(str(t.fn))
            for part in glob.glob(os.path.join(directory, f".{glob.escape(base)}.part-*.tmp")):
                os.unlink(part)
