"""The object-store form of a NumPy source (the Ray target, see tests/ray/test_ray_arrays.py
for the real thing): the subtasks get ``ObjectArray`` placeholders and read them where their
TaskExecutor mapped them; without that mapping they fail naming the array and the target."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import cloudpickle
import numpy as np
import pytest

from accelflow import JobError
from accelflow.connectors import ArraySource
from accelflow.runtime import ObjectArray, copy_to_memfd, object_handles, register_arrays, release_arrays, share_arrays


class _Store:
    """An object store in a dict: ``put`` as the Ray launcher's ``put_array``."""

    def __init__(self) -> None:
        self.objects: dict[str, np.ndarray[Any, Any]] = {}

    def put(self, array: np.ndarray[Any, Any]) -> tuple[str, Any]:
        array_id = f"obj{len(self.objects)}"
        self.objects[array_id] = array
        return array_id, f"ref-{array_id}"


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="memfd is Linux")
def test_shared_through_a_store_the_subtasks_get_placeholders_and_read_the_mapped_array(tmp_path: Path) -> None:
    matrix = np.arange(12_000, dtype=np.int16).reshape(4000, 3)
    strided = np.arange(8000, dtype=np.float32)[::2]  # not contiguous: stored contiguous
    objects = np.array([{"a": 1}, None], dtype=object)
    store = _Store()
    source = ArraySource([matrix, strided])
    view = share_arrays(source, tmp_path, store.put)
    placeholders = view.arrays
    assert placeholders == [ObjectArray("obj0", matrix.dtype, (4000, 3)), ObjectArray("obj1", strided.dtype, (4000,))]
    assert object_handles(source) == {"obj0": "ref-obj0", "obj1": "ref-obj1"}
    assert list(tmp_path.iterdir()) == []  # neither a file nor the client's memory
    blob = cloudpickle.dumps(view)  # what a subtask gets
    assert b"ref-obj" not in blob  # the refs travel in the descriptor, not in the plan
    remote = cloudpickle.loads(blob)
    held = [copy_to_memfd(store.objects[f"obj{i}"], f"test-{i}") for i in range(2)]  # its TaskExecutor
    try:
        register_arrays({f"obj{i}": shared for i, (shared, _) in enumerate(held)})
        chunks = [c for split in remote.create_splits(3) for c in remote.read_chunks(split, None)]
        assert np.array_equal(np.concatenate([c.columns()[0] for c in chunks]), matrix)
        assert np.array_equal(np.concatenate([c.columns()[1] for c in chunks]), strided)
    finally:
        for _, fd in held:
            os.close(fd)
    release_arrays(source)
    assert object_handles(source) == {} and source.arrays[0] is matrix
    pickled = ArraySource([objects])
    assert share_arrays(pickled, tmp_path, store.put).arrays[0] is objects  # Python objects travel pickled
    assert object_handles(pickled) == {}
    release_arrays(pickled)


def test_a_placeholder_nobody_mapped_names_the_array_and_the_ray_target() -> None:
    source = ArraySource([np.zeros(4)]).with_arrays([ObjectArray("never-mapped", np.dtype("float64"), (4,))])
    remote = cloudpickle.loads(cloudpickle.dumps(source))
    with pytest.raises(JobError, match=r"array never-mapped .*object store.*execution.target: ray"):
        list(remote.read_chunks((0, 4), None))


def test_only_mapped_locations_can_be_registered() -> None:
    with pytest.raises(JobError, match="array a1 .*unresolved \\(str\\)"):
        register_arrays({"a1": "ObjectRef(…)"})  # type: ignore[dict-item]
