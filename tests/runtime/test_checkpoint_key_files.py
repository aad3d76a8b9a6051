"""The checkpoint signing key's file and directory (review finding 9): a symbolic link is not
followed, a key or state directory of another user is refused, a state directory others can
write is tightened to 0700 before the key is made there."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from accelflow import CheckpointError
from accelflow.runtime.jobmanager import CheckpointSigning
from accelflow.runtime.jobmanager._checkpoint_store import CheckpointStore, OperatorState

OPERATORS = (OperatorState("numbers", "source", 1, (b"split at 7",)),)
NOBODY = 65534
as_root = pytest.mark.skipif(os.getuid() != 0, reason="only root can make a file of another user")

JOB = """\
import sys
from accelflow import Environment
env = Environment({"execution.checkpointing.interval": "50 ms",
                   "execution.checkpointing.dir": sys.argv[1], "parallelism.default": 1})
def slow(x):
    import time; time.sleep(0.002); return x
print(len(env.from_sequence(1, 1000).map(slow).key_by(lambda x: x % 7).sum().execute_and_collect()))
"""


def _write(tmp_path: Path, signing: CheckpointSigning) -> None:
    CheckpointStore(str(tmp_path / "ckpt"), "job-1", signing=signing).write(1, "wc", OPERATORS)


def _victim_key(tmp_path: Path) -> Path:
    """A key another user knows (here: the test's own file, 0600)."""
    victim = tmp_path / "victim.key"
    victim.write_text("v" * 64 + "\n")
    victim.chmod(0o600)
    return victim


def test_the_cli_refuses_a_planted_symlink_and_tightens_the_state_directory(tmp_path: Path) -> None:
    """The review's attack: a state directory others can write (0777) holding a link to a key
    someone else knows. Before: checkpoints were signed with that key, the directory stayed 0777."""
    state = tmp_path / "evilstate"
    state.mkdir()
    state.chmod(0o777)
    key = state / "checkpoint-signing.key"
    key.symlink_to(_victim_key(tmp_path))
    (tmp_path / "job.py").write_text(JOB, encoding="utf-8")
    env = dict(os.environ, ACCELFLOW_STATE_DIR=str(state))
    env.pop("ACCELFLOW_CONF", None)
    accelflow = Path(sys.executable).with_name("accelflow")
    out = subprocess.run([str(accelflow), "run", str(tmp_path / "job.py"), str(tmp_path / "ckpt")],
                         env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    assert (f"failed: CheckpointError: {key}: the checkpoint signing key is a symbolic link (to "
            f"{tmp_path / 'victim.key'}), refused: whoever can change the link chooses your key; put "
            "the key file itself there, or set execution.checkpointing.signing-key-file to the file"
            ) in out.stderr
    assert not list((tmp_path / "ckpt").glob("*/chk-*/_metadata"))  # nothing signed with it
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert key.is_symlink()  # left as it was: the user decides


def test_a_configured_key_file_that_is_a_symlink_is_refused(tmp_path: Path) -> None:
    link = tmp_path / "key"
    link.symlink_to(_victim_key(tmp_path))
    with pytest.raises(CheckpointError, match="is a symbolic link") as caught:
        _write(tmp_path, CheckpointSigning(link))
    assert caught.value.path == str(link)


def test_a_fifo_as_key_file_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "key"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(CheckpointError, match=r"is no regular file \(prw-------\)"):
        _write(tmp_path, CheckpointSigning(fifo))


@as_root
def test_a_key_file_of_another_user_is_refused(tmp_path: Path) -> None:
    key = _victim_key(tmp_path)
    os.chown(key, NOBODY, NOBODY)
    with pytest.raises(CheckpointError) as caught:
        _write(tmp_path, CheckpointSigning(key))
    assert str(caught.value) == (
        f"{key}: the checkpoint signing key is owned by uid {NOBODY}, not by you (uid 0) or root: its "
        "owner can forge your checkpoints; delete it for a new one (or make your own: python -c 'import "
        "secrets; print(secrets.token_hex(32))' > FILE)")


@as_root
def test_a_state_directory_of_another_user_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "theirs"
    state.mkdir(mode=0o700)
    os.chown(state, NOBODY, NOBODY)
    monkeypatch.setenv("ACCELFLOW_STATE_DIR", str(state))
    with pytest.raises(CheckpointError) as caught:
        _write(tmp_path, CheckpointSigning())
    assert str(caught.value) == (
        f"{state / 'checkpoint-signing.key'}: $ACCELFLOW_STATE_DIR: the state directory {state} is owned "
        f"by uid {NOBODY}, not by you (uid 0): its owner could read your session tokens and plant a "
        "checkpoint signing key; set $ACCELFLOW_STATE_DIR to a directory of your own")
    assert not (state / "checkpoint-signing.key").exists()
