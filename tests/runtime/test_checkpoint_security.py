"""Checkpoints under attack (issue 25, items 19, 20 and 23): a tampered or unsigned checkpoint
is refused before any state is unpickled, checkpoints are private to their owner, and another
job's checkpoint neither publishes into nor cleans up that job's output."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from checkpoint_jobs import N, failed_job, published_numbers, resume

from accelflow import CheckpointError
from accelflow.connectors.files import FileCommittable, FileSink
from accelflow.runtime.jobmanager import CheckpointSigning
from accelflow.runtime.jobmanager._checkpoint_store import CheckpointStore, OperatorState, load_checkpoint

OPERATORS = (OperatorState("numbers", "source", 1, (b"split at 7",)),)
TRUST = "if it comes from storage that nobody else can write, trust it with " \
        "-D execution.state-recovery.verify-signature=false"


def _rewrite_metadata(chk: Path, change: Callable[[dict[str, Any]], None]) -> None:
    metadata = json.loads((chk / "_metadata").read_text())
    change(metadata)
    (chk / "_metadata").write_text(json.dumps(metadata))


class _Evil:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return os.system, (f"touch {self.marker}",)


def _plant_code(chk: Path, marker: Path) -> None:
    """The attack of the issue: replace the source subtask's blob with a pickle that runs a
    command, and recompute the state file's size and SHA-256 in ``_metadata``."""
    metadata = json.loads((chk / "_metadata").read_text())
    entry = next(op for op in metadata["operators"] if op["name"] == "numbers")
    state = chk / entry["file"]
    blobs = pickle.loads(state.read_bytes())
    blobs[0] = pickle.dumps(_Evil(marker))
    data = pickle.dumps(blobs, protocol=5)
    state.write_bytes(data)
    _rewrite_metadata(chk, lambda m: next(op for op in m["operators"] if op["name"] == "numbers").update(
        size=len(data), sha256=hashlib.sha256(data).hexdigest()))


@pytest.mark.slow
@pytest.mark.parametrize("unsign", [False, True], ids=["tampered", "signature-removed"])
def test_a_checkpoint_with_planted_code_is_refused_before_it_runs(tmp_path: Path, unsign: bool) -> None:
    chk, _ = failed_job(tmp_path, tmp_path / "out")
    marker = tmp_path / "owned"
    _plant_code(chk, marker)
    if unsign:
        _rewrite_metadata(chk, lambda m: m.pop("signature"))

    resumed = resume(tmp_path, chk, tmp_path / "out")

    assert not marker.exists()
    assert resumed.returncode == 1, resumed.stderr
    why = ("it is not signed (written by an accelflow without checkpoint signing, or edited), and "
           "restoring runs any code its pickled state holds" if unsign else
           f"its signature does not verify with the key in {tmp_path / 'state' / 'checkpoint-signing.key'}: "
           "it was changed after it was written")
    assert resumed.stderr == f"accelflow: error: {chk}/_metadata: {why}; {TRUST}\n"


@pytest.mark.slow
def test_checkpoints_are_private_and_signed_with_a_private_key_made_at_the_first(tmp_path: Path) -> None:
    out = tmp_path / "out"
    chk, _ = failed_job(tmp_path, out)
    key = tmp_path / "state" / "checkpoint-signing.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and len(key.read_text().strip()) == 64
    for directory in (chk.parent, chk):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
    files = list(chk.iterdir())
    assert files and all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)

    # unsigned, as written before signing: refused, then restored when trusted explicitly
    _rewrite_metadata(chk, lambda m: m.pop("signature"))
    refused = resume(tmp_path, chk, out)
    assert refused.returncode == 1 and refused.stderr.endswith(f"; {TRUST}\n"), refused.stderr
    trusted = resume(tmp_path, chk, out, "numbers", "-D", "execution.state-recovery.verify-signature=false")
    assert trusted.returncode == 0, trusted.stderr
    assert trusted.stderr.count(f"{chk}/_metadata: restored without checking its signature") == 1
    assert published_numbers(out) == list(range(N))


@pytest.mark.slow
def test_another_jobs_file_sink_state_is_refused_and_another_name_warned_about(tmp_path: Path) -> None:
    theirs, mine = tmp_path / "theirs", tmp_path / "mine"
    chk, _ = failed_job(tmp_path, theirs, name="nightly")
    before = {p.name: p.read_bytes() for p in theirs.iterdir()}

    foreign = resume(tmp_path, chk, mine, "nightly")
    assert foreign.returncode == 1
    assert (f"{theirs}: the restored checkpoint's FileSink wrote to this directory, but this job's "
            f"FileSink writes to {mine}; restore a checkpoint of this job") in foreign.stderr
    assert {p.name: p.read_bytes() for p in theirs.iterdir()} == before

    renamed = resume(tmp_path, chk, theirs, "hourly")
    assert renamed.returncode == 0, renamed.stderr
    assert (f"(hourly) restores {chk}, a checkpoint of another job ('nightly'): check that this is "
            "the checkpoint you meant") in renamed.stderr
    assert published_numbers(theirs) == list(range(N))


# -- the pieces, in this process -----------------------------------------------------------------

def test_a_checkpoint_signed_with_another_key_is_refused_naming_both_keys(tmp_path: Path) -> None:
    ours, theirs = CheckpointSigning(tmp_path / "ours.key"), CheckpointSigning(tmp_path / "theirs.key")
    done = CheckpointStore(str(tmp_path / "ckpt"), "job-1", signing=theirs).write(1, "wc", OPERATORS)

    with pytest.raises(CheckpointError) as caught:
        load_checkpoint(done.path, ours)

    message = str(caught.value)
    assert caught.value.path == f"{done.path}/_metadata"
    assert "it was signed with another key (id " in message and f"there is no key at {tmp_path / 'ours.key'}" in message
    assert "set execution.checkpointing.signing-key-file to the key file it was written with" in message
    assert load_checkpoint(done.path, CheckpointSigning(tmp_path / "theirs.key")).operators["numbers"] == OPERATORS[0]


def test_the_default_key_lives_in_the_state_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCELFLOW_STATE_DIR", str(tmp_path / "state"))
    done = CheckpointStore(str(tmp_path / "ckpt"), "job-1").write(1, "wc", OPERATORS)
    assert CheckpointSigning().path == tmp_path / "state" / "checkpoint-signing.key"
    assert stat.S_IMODE(os.stat(tmp_path / "state").st_mode) == 0o700
    monkeypatch.setenv("ACCELFLOW_STATE_DIR", str(tmp_path / "another-user"))
    with pytest.raises(CheckpointError, match="signed with another key"):
        load_checkpoint(done.path)


@pytest.mark.parametrize(("mode", "content", "problem"), [
    (0o644, "a" * 64, "has mode -rw-r--r--: whoever can read it can forge checkpoints"),
    (0o620, "a" * 64, "has mode -rw--w----"),
    (0o600, "short", "holds 5 bytes, fewer than 32"),
])
def test_a_key_file_others_can_read_or_too_short_is_refused(tmp_path: Path, mode: int, content: str,
                                                            problem: str) -> None:
    key = tmp_path / "key"
    key.write_text(content)
    key.chmod(mode)
    with pytest.raises(CheckpointError, match=problem) as caught:
        CheckpointStore(str(tmp_path / "ckpt"), "job-1", signing=CheckpointSigning(key)).write(1, "wc", OPERATORS)
    assert caught.value.path == str(key)


def test_a_group_key_file_is_accepted(tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_text("b" * 64 + "\n")
    key.chmod(0o640)
    done = CheckpointStore(str(tmp_path / "ckpt"), "job-1", signing=CheckpointSigning(key)).write(1, "wc", OPERATORS)
    assert load_checkpoint(done.path, CheckpointSigning(key)).checkpoint_id == 1


@pytest.mark.parametrize(("permissions", "dir_mode", "file_mode"),
                         [("private", 0o700, 0o600), ("group", 0o750, 0o640), ("world", 0o755, 0o644)])
def test_checkpoint_modes_follow_the_permissions_key_not_the_umask(tmp_path: Path, permissions: str,
                                                                   dir_mode: int, file_mode: int) -> None:
    base = tmp_path / "made-by-accelflow"
    old = os.umask(0)
    try:
        store = CheckpointStore(str(base), "job-1", permissions=permissions)
        done = store.write(1, "wc", OPERATORS)
        savepoint = store.write(2, "wc", OPERATORS, savepoint_dir=str(tmp_path / "savepoints"))
    finally:
        os.umask(old)
    for checkpoint in (Path(done.path), Path(savepoint.path)):
        for directory in (checkpoint.parent, checkpoint):
            assert stat.S_IMODE(directory.stat().st_mode) == dir_mode, directory
        assert {stat.S_IMODE(f.stat().st_mode) for f in checkpoint.iterdir()} == {file_mode}
    assert stat.S_IMODE(base.stat().st_mode) == dir_mode


def test_an_existing_checkpoint_directory_keeps_its_mode(tmp_path: Path) -> None:
    base = tmp_path / "shared"
    base.mkdir()
    base.chmod(0o1777)
    CheckpointStore(str(base), "job-1").write(1, "wc", OPERATORS)
    assert stat.S_IMODE(base.stat().st_mode) == 0o1777
    assert stat.S_IMODE((base / "job-1").stat().st_mode) == 0o700


def test_a_file_sink_refuses_committables_of_another_directory(tmp_path: Path) -> None:
    theirs, mine = tmp_path / "theirs", tmp_path / "mine"
    theirs.mkdir()
    (theirs / ".part-0123456789abcdef-0-0.inprogress").write_text("1\n")
    committable = FileCommittable(str(theirs / ".part-0123456789abcdef-0-0.inprogress"),
                                  str(theirs / "part-0123456789abcdef-0-0"))
    sink: FileSink[Any] = FileSink(mine)

    with pytest.raises(CheckpointError) as caught:
        sink.commit([committable])
    with pytest.raises(CheckpointError):
        sink.restore_state({"directory": str(theirs), "prefix": "part", "uid": "0123456789abcdef", "keep": []})

    assert caught.value.path == str(theirs) and f"this job's FileSink writes to {mine};" in str(caught.value)
    assert sorted(p.name for p in theirs.iterdir()) == [".part-0123456789abcdef-0-0.inprogress"]
    FileSink(theirs).commit([committable])  # the sink of that directory publishes it
    assert (theirs / "part-0123456789abcdef-0-0").read_text() == "1\n"
