"""Checkpoint storage (issue 13): Flink's layout on any fsspec filesystem, ``_metadata`` last,
strict loading that names the bad file and writes nothing, retention and operator matching."""

from __future__ import annotations

import hashlib
import json
import pickle
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest

from accelflow._errors import CheckpointError, decode_error, encode_error
from accelflow.runtime.jobmanager import CheckpointSigning
from accelflow.runtime.jobmanager import _checkpoint_store as store_module
from accelflow.runtime.jobmanager._checkpoint_store import (
    CHECKPOINT_FORMAT,
    CheckpointStore,
    OperatorState,
    RestoredCheckpoint,
    load_checkpoint,
    match_operators,
)

OPERATORS = (
    OperatorState("numbers", "source", 2, (b"split-0 at 7", b"split-1 at 3")),
    OperatorState("sum per key/window", "reduce", 1, (b"\x00" * 1000,)),
)


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def memory_url() -> Iterator[str]:
    url = f"memory://ckpt-test-{uuid.uuid4().hex}"
    yield url
    fs = fsspec.filesystem("memory")
    if fs.exists(url):
        fs.rm(url, recursive=True)


@pytest.fixture(params=["path", "file-url", "memory"])
def base(request: pytest.FixtureRequest, tmp_path: Path, memory_url: str) -> str:
    return {"path": str(tmp_path / "ckpt"), "file-url": f"file://{tmp_path}/ckpt", "memory": memory_url}[
        request.param
    ]


def test_a_checkpoint_round_trips_on_every_filesystem(base: str) -> None:
    store = CheckpointStore(base, "job-1")

    done = store.write(3, "word count", OPERATORS)
    back = load_checkpoint(done.path)

    assert done.checkpoint_id == 3 and not done.is_savepoint and done.path == f"{store.job_path}/chk-3"
    assert store.job_path == f"{base}/job-1"
    assert done.size > sum(len(s) for op in OPERATORS for s in op.subtask_states)
    assert (back.checkpoint_id, back.job_name, back.path, back.timestamp) == (3, "word count", done.path, done.timestamp)
    assert dict(back.operators) == {op.name: op for op in OPERATORS}
    assert load_checkpoint(store.job_path).path == done.path  # a job directory: its newest checkpoint
    assert store.retained() == [done] and store.latest() == done


def test_the_layout_is_flinks_with_one_pickled_state_file_per_operator(tmp_path: Path) -> None:
    store = CheckpointStore(str(tmp_path), "job-1")

    store.write(1, "wc", OPERATORS)

    chk = tmp_path / "job-1" / "chk-1"
    assert sorted(p.name for p in chk.iterdir()) == ["_metadata", "op-0-numbers.state", "op-1-sum_per_key_window.state"]
    assert pickle.loads((chk / "op-0-numbers.state").read_bytes()) == [b"split-0 at 7", b"split-1 at 3"]
    metadata = json.loads((chk / "_metadata").read_text())
    assert metadata["format"] == CHECKPOINT_FORMAT and metadata["version"] == 1
    assert (metadata["checkpoint_id"], metadata["job_uid"], metadata["savepoint"]) == (1, "job-1", False)
    first = metadata["operators"][0]
    data = (chk / first["file"]).read_bytes()
    assert first == {"name": "numbers", "kind": "source", "parallelism": 2, "file": "op-0-numbers.state",
                     "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def test_metadata_is_written_last(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    written: list[str] = []
    real_put = store_module._put

    def recording_put(fs: Any, path: str, data: bytes) -> None:
        written.append(path.rpartition("/")[2])
        real_put(fs, path, data)

    monkeypatch.setattr(store_module, "_put", recording_put)
    CheckpointStore(str(tmp_path), "job-1").write(1, "wc", OPERATORS)
    assert written == ["op-0-numbers.state", "op-1-sum_per_key_window.state", "_metadata"]


def test_a_write_that_fails_midway_leaves_no_metadata_and_says_where(
    base: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = CheckpointStore(base, "job-1")
    first = store.write(1, "wc", OPERATORS)
    real_put = store_module._put

    def failing_put(fs: Any, path: str, data: bytes) -> None:
        if path.endswith("op-1-sum_per_key_window.state"):
            raise OSError(28, "No space left on device")
        real_put(fs, path, data)

    monkeypatch.setattr(store_module, "_put", failing_put)
    with pytest.raises(CheckpointError, match="cannot write checkpoint 2: .*No space left") as caught:
        store.write(2, "wc", OPERATORS)
    assert caught.value.path == f"{store.job_path}/chk-2"
    fs, path = fsspec.core.url_to_fs(f"{store.job_path}/chk-2")
    assert not fs.exists(f"{path}/_metadata")
    assert store.retained() == [first] and load_checkpoint(store.job_path).checkpoint_id == 1


def test_loading_a_job_directory_skips_incomplete_checkpoints(tmp_path: Path) -> None:
    store = CheckpointStore(str(tmp_path), "job-1")
    store.write(1, "wc", OPERATORS)
    store.write(2, "wc", OPERATORS)
    (tmp_path / "job-1" / "chk-2" / "_metadata").unlink()  # as if the JobManager died writing it
    (tmp_path / "job-1" / "chk-10").mkdir()
    (tmp_path / "job-1" / "chk-10" / "op-0-numbers.state").write_bytes(b"partial")

    assert load_checkpoint(store.job_path).checkpoint_id == 1
    assert [c.checkpoint_id for c in store.retained()] == [1]


def test_the_metadata_file_itself_may_be_given(tmp_path: Path) -> None:
    done = CheckpointStore(str(tmp_path), "job-1").write(4, "wc", OPERATORS)
    assert load_checkpoint(done.path + "/_metadata").path == done.path


def test_a_relative_directory_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    store = CheckpointStore("ckpt", "job-1")
    assert store.job_path == f"{tmp_path}/ckpt/job-1"
    monkeypatch.chdir("/")
    assert load_checkpoint(store.write(1, "wc", OPERATORS).path).checkpoint_id == 1


def test_without_a_directory_checkpoints_stay_in_memory() -> None:
    store = CheckpointStore(None, f"job-{uuid.uuid4().hex}")
    try:
        done = store.write(1, "wc", OPERATORS)
        assert done.path.startswith("memory://accelflow-checkpoints/")
        assert load_checkpoint(done.path).operators["numbers"] == OPERATORS[0]
    finally:
        store.discard_all()
    assert store.retained() == []


def test_a_savepoint_goes_to_its_own_directory(base: str) -> None:
    store = CheckpointStore(base, "4f2a9c1d-job")

    done = store.write(7, "wc", OPERATORS, savepoint_dir=f"{base}/savepoints")

    name = done.path.rpartition("/")[2]
    assert done.is_savepoint and done.path.startswith(f"{base}/savepoints/savepoint-4f2a9c-")
    assert len(name) == len("savepoint-4f2a9c-") + 12
    assert load_checkpoint(done.path).operators["numbers"] == OPERATORS[0]
    assert store.retained() == []  # savepoints are not the store's checkpoints


def test_prune_keeps_the_newest_and_never_touches_savepoints_or_other_jobs(tmp_path: Path) -> None:
    store = CheckpointStore(str(tmp_path), "job-1")
    other = CheckpointStore(str(tmp_path), "job-2")
    for n in range(1, 6):
        store.write(n, "wc", OPERATORS)
    savepoint = store.write(3, "wc", OPERATORS, savepoint_dir=str(tmp_path / "job-1-savepoints"))
    other.write(1, "other", OPERATORS)
    untouched = {**_files(tmp_path / "job-2"), **_files(tmp_path / "job-1-savepoints")}

    store.prune(2)

    assert [c.checkpoint_id for c in store.retained()] == [4, 5]
    assert sorted(p.name for p in (tmp_path / "job-1").iterdir()) == ["chk-4", "chk-5"]
    assert {**_files(tmp_path / "job-2"), **_files(tmp_path / "job-1-savepoints")} == untouched
    assert load_checkpoint(savepoint.path).checkpoint_id == 3


def test_prune_leaves_incomplete_checkpoints_alone(tmp_path: Path) -> None:
    store = CheckpointStore(str(tmp_path), "job-1")
    store.write(1, "wc", OPERATORS)
    store.write(2, "wc", OPERATORS)
    (tmp_path / "job-1" / "chk-3").mkdir()  # being written right now

    store.prune(1)

    assert sorted(p.name for p in (tmp_path / "job-1").iterdir()) == ["chk-2", "chk-3"]


def test_prune_survives_a_checkpoint_removed_by_hand(base: str) -> None:
    store = CheckpointStore(base, "job-1")
    for n in range(1, 4):
        store.write(n, "wc", OPERATORS)
    fs, path = fsspec.core.url_to_fs(f"{store.job_path}/chk-1")
    fs.rm(path, recursive=True)

    store.prune(1)
    store.prune(1)

    assert [c.checkpoint_id for c in store.retained()] == [3]


def test_discard_all_deletes_this_jobs_checkpoints_only(tmp_path: Path) -> None:
    store = CheckpointStore(str(tmp_path), "job-1")
    other = CheckpointStore(str(tmp_path), "job-2")
    store.write(1, "wc", OPERATORS)
    store.write(2, "wc", OPERATORS, savepoint_dir=str(tmp_path / "savepoints"))
    other.write(1, "other", OPERATORS)

    store.discard_all()
    store.discard_all()

    assert not (tmp_path / "job-1").exists() and store.latest() is None
    assert other.latest() is not None and len(list((tmp_path / "savepoints").iterdir())) == 1


def test_a_checkpoint_id_is_never_written_twice(tmp_path: Path) -> None:
    store = CheckpointStore(str(tmp_path), "job-1")
    store.write(1, "wc", OPERATORS)
    before = _files(tmp_path)
    with pytest.raises(CheckpointError, match="already exists") as caught:
        store.write(1, "wc", OPERATORS[:1])
    assert caught.value.path.endswith("/job-1/chk-1") and _files(tmp_path) == before


def test_bad_arguments_are_callers_bugs() -> None:
    with pytest.raises(ValueError, match="2 subtask states"):
        OperatorState("m", "map", 2, (b"only one",))
    with pytest.raises(ValueError, match="subtask states as bytes"):
        OperatorState("m", "map", 1, ("text",))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="job_uid"):
        CheckpointStore("memory://x", "../other-job")
    with pytest.raises(ValueError, match="unique"):
        CheckpointStore("memory://x", "j").write(1, "wc", [OPERATORS[0], OPERATORS[0]])


# -- loading bad checkpoints: a CheckpointError naming the file, and nothing written --------------

def _edit_metadata(change: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    def edit(chk: Path) -> None:
        metadata = json.loads((chk / "_metadata").read_text())
        change(metadata)
        (chk / "_metadata").write_text(json.dumps(metadata))
    return edit


def _append(file: Path, data: bytes) -> None:
    file.write_bytes(file.read_bytes() + data)


def _flip_last_byte(chk: Path) -> None:
    state = chk / "op-1-sum_per_key_window.state"
    data = bytearray(state.read_bytes())
    data[-2] ^= 0xFF
    state.write_bytes(bytes(data))


def _global_in_state(chk: Path) -> None:
    """A state file that would run code if unpickled normally, with a matching checksum and,
    re-signed with the key, a valid signature: the store still reads bytes only."""
    data = pickle.dumps(print, protocol=5)
    (chk / "op-0-numbers.state").write_bytes(data)

    def change(metadata: dict[str, Any]) -> None:
        metadata["operators"][0].update(size=len(data), sha256=hashlib.sha256(data).hexdigest())
        metadata["signature"] = CheckpointSigning().sign(metadata)

    _edit_metadata(change)(chk)


BAD: dict[str, tuple[Callable[[Path], object], str, str]] = {
    "no _metadata": (lambda chk: (chk / "_metadata").unlink(), "", "has no _metadata: it is not a checkpoint"),
    "corrupt json": (lambda chk: (chk / "_metadata").write_bytes((chk / "_metadata").read_bytes()[:40]),
                     "/_metadata", "corrupt JSON"),
    "flink binary": (lambda chk: (chk / "_metadata").write_bytes(b"\x00\x00\x00\x03\xca\xfe\x00\x01binary"),
                     "/_metadata", "not an accelflow checkpoint"),
    "other json": (lambda chk: (chk / "_metadata").write_text('{"checkpointId": 1}'),
                   "/_metadata", "not an accelflow checkpoint"),
    "newer version": (_edit_metadata(lambda m: m.update(version=2)), "/_metadata",
                      "newer accelflow .*version 2.*upgrade"),
    "bad field": (_edit_metadata(lambda m: m["operators"][0].update(parallelism=0)), "/_metadata",
                  "corrupt: operator 0: parallelism"),
    "file outside": (_edit_metadata(lambda m: m["operators"][0].update(file="../../secret.state")),
                     "/_metadata", "corrupt: operator 0: file"),
    "state missing": (lambda chk: (chk / "op-0-numbers.state").unlink(), "/op-0-numbers.state",
                      "operator 'numbers' is missing"),
    "state larger": (lambda chk: _append(chk / "op-0-numbers.state", b"x"), "/op-0-numbers.state",
                     "corrupt: .* is larger than the"),
    "state smaller": (lambda chk: (chk / "op-0-numbers.state").write_bytes(b"x"), "/op-0-numbers.state",
                      "corrupt: .* is smaller than the"),
    "checksum": (_flip_last_byte, "/op-1-sum_per_key_window.state", "fails its SHA-256 check"),
    "not bytes": (_global_in_state, "/op-0-numbers.state", "refusing to load builtins.print"),
}


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_a_bad_checkpoint_is_refused_naming_its_file_and_left_as_it_was(tmp_path: Path, case: str) -> None:
    spoil, suffix, message = BAD[case]
    done = CheckpointStore(str(tmp_path), "job-1").write(1, "wc", OPERATORS)
    spoil(tmp_path / "job-1" / "chk-1")
    before = _files(tmp_path)

    with pytest.raises(CheckpointError, match=message) as caught:
        load_checkpoint(done.path)

    assert caught.value.path == done.path + suffix and str(caught.value).startswith(caught.value.path + ": ")
    assert _files(tmp_path) == before


def test_a_missing_path_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="no such checkpoint .*execution.state-recovery.path") as caught:
        load_checkpoint(str(tmp_path / "nope"))
    assert caught.value.path == str(tmp_path / "nope") and list(tmp_path.iterdir()) == []


def test_a_job_directory_with_only_incomplete_checkpoints_is_refused(tmp_path: Path) -> None:
    (tmp_path / "job-1" / "chk-1").mkdir(parents=True)
    (tmp_path / "job-1" / "chk-2").mkdir()
    with pytest.raises(CheckpointError, match=r"only incomplete checkpoints \(chk-1, chk-2: no _metadata"):
        load_checkpoint(str(tmp_path / "job-1"))


def test_the_newest_checkpoint_of_a_job_directory_is_checked_not_skipped(tmp_path: Path) -> None:
    store = CheckpointStore(str(tmp_path), "job-1")
    store.write(1, "wc", OPERATORS)
    store.write(2, "wc", OPERATORS)
    (tmp_path / "job-1" / "chk-2" / "op-0-numbers.state").unlink()
    with pytest.raises(CheckpointError) as caught:
        load_checkpoint(store.job_path)
    assert caught.value.path.endswith("/job-1/chk-2/op-0-numbers.state")


def test_a_checkpoint_error_crosses_processes_with_its_path() -> None:
    error = CheckpointError("corrupt JSON", path="s3://b/ckpt/job/chk-3/_metadata")
    back = decode_error(pickle.loads(pickle.dumps(encode_error(error))))
    assert type(back) is CheckpointError and back.path == error.path and str(back) == str(error)


# -- matching restored state to the operators of the new job -----------------------------------

RESTORED = RestoredCheckpoint("/ckpt/job-1/chk-3", 3, "wc", {op.name: op for op in OPERATORS}, 0.0)


def test_state_goes_to_the_operators_of_the_same_name() -> None:
    matched = match_operators(RESTORED, {"numbers": "source", "sum per key/window": "reduce", "new": "map"}, False)
    assert matched == {"numbers": OPERATORS[0], "sum per key/window": OPERATORS[1]}


def test_unclaimed_state_is_refused_naming_every_operator() -> None:
    with pytest.raises(CheckpointError) as caught:
        match_operators(RESTORED, {"renamed": "source"}, False)
    message = str(caught.value)
    assert "state of operators 'numbers', 'sum per key/window' has no target in this job" in message
    assert "ignore-unclaimed-state: true" in message and caught.value.path == RESTORED.path


def test_unclaimed_state_is_dropped_when_allowed() -> None:
    assert match_operators(RESTORED, {"numbers": "source", "other": "map"}, True) == {"numbers": OPERATORS[0]}


def test_state_of_another_kind_is_refused_even_when_unclaimed_state_is_allowed() -> None:
    with pytest.raises(CheckpointError, match="'numbers' is a 'map' operator in this job .* by a 'source'"):
        match_operators(RESTORED, {"numbers": "map"}, True)
