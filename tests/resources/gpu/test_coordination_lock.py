"""The coordination lock and state under attack: a stopped holder, another user pinning the
lock, a dead owner, and state files that used to raise raw tracebacks."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from accelflow import CoordinationError
from accelflow.resources.gpu import CoordinationFile, GPUDevice, Owner

from .test_coordination import dead_owner

NOBODY = 65534
HOLD = (
    "import sys, time; from accelflow.resources.gpu import CoordinationFile; "
    "ledger = CoordinationFile(sys.argv[1])\n"
    "with ledger.lock():\n    print('locked', flush=True); time.sleep(600)"
)


def gpus(n: int) -> list[GPUDevice]:
    return [GPUDevice(index=str(i)) for i in range(n)]


@pytest.fixture
def stopped_holder(coordination_file: Path) -> Iterator[subprocess.Popen[str]]:
    """A process that took the lock and was then stopped with SIGSTOP."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(coordination_file)], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    os.kill(holder.pid, signal.SIGSTOP)
    yield holder
    holder.kill()
    holder.wait()
    holder.stdout.close()


def test_a_stopped_holder_makes_allocation_fail_naming_the_lock_file_and_the_holder(
    coordination_file: Path, stopped_holder: subprocess.Popen[str]
) -> None:
    ledger = CoordinationFile(coordination_file, lock_timeout=0.2)
    with pytest.raises(CoordinationError, match="still locked after 0.2 s") as info:
        ledger.allocate(gpus(2), 1, Owner.of_process())
    message = str(info.value)
    assert info.value.path == str(ledger.lock_path) and str(ledger.lock_path) in message
    assert f"pid {stopped_holder.pid} (" in message and "stopped" in message
    os.kill(stopped_holder.pid, signal.SIGCONT)  # resumed: the next caller only waits


def test_the_default_lock_timeout_is_bounded_and_checked(coordination_file: Path) -> None:
    from accelflow.resources.coordination import DEFAULT_LOCK_TIMEOUT_S

    assert 0 < CoordinationFile(coordination_file).lock_timeout == DEFAULT_LOCK_TIMEOUT_S < 8
    for bad in (0, -1, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="lock_timeout"):
            CoordinationFile(coordination_file, lock_timeout=bad)


def test_lock_files_give_other_users_no_access(coordination_file: Path) -> None:
    shared = CoordinationFile(coordination_file)
    shared.allocate(gpus(1), 1, Owner.of_process())
    assert stat.S_IMODE(shared.lock_path.stat().st_mode) & 0o007 == 0
    private = CoordinationFile()
    private.allocate(gpus(1), 1, Owner.of_process())
    assert stat.S_IMODE(private.lock_path.stat().st_mode) == 0o600


def test_an_old_world_readable_lock_file_of_ours_is_tightened(coordination_file: Path) -> None:
    ledger = CoordinationFile(coordination_file)
    coordination_file.parent.mkdir(parents=True)
    ledger.lock_path.touch()
    ledger.lock_path.chmod(0o644)  # what accelflow created before
    ledger.allocate(gpus(1), 1, Owner.of_process())
    assert stat.S_IMODE(ledger.lock_path.stat().st_mode) == 0o640


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("flock") is None,
    reason="needs root (to run a process as another user) and flock(1)",
)
def test_another_user_cannot_pin_a_shared_lock_file() -> None:
    shared_dir = Path(tempfile.mkdtemp(prefix="accelflow-shared-"))  # not under pytest's 0700 dir
    try:
        shared_dir.chmod(0o755)
        ledger = CoordinationFile(shared_dir / "gpu-coordination.json")
        ledger.allocate(gpus(1), 1, Owner.of_process())
        done = subprocess.run(  # util-linux flock(1): open the file, then flock it
            ["flock", "--nonblock", "--exclusive", str(ledger.lock_path), "true"],
            user=NOBODY,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        assert done.returncode != 0, f"user {NOBODY} could lock {ledger.lock_path}"
        assert "Permission denied" in done.stderr
        assert CoordinationFile(ledger.path).allocations()[0].owner.pid == os.getpid()
    finally:
        for child in shared_dir.iterdir():
            child.unlink()
        shared_dir.rmdir()


def test_an_owner_that_has_exited_is_never_recorded(coordination_file: Path, dead_pid: int) -> None:
    ledger = CoordinationFile(coordination_file)
    with pytest.raises(CoordinationError, match="has already exited"):
        ledger.allocate(gpus(2), 1, dead_owner(dead_pid))
    assert ledger.allocations() == []


def test_deeply_nested_json_is_a_coordination_error(coordination_file: Path) -> None:
    coordination_file.parent.mkdir(parents=True)
    coordination_file.write_text("[" * 200_000 + "]" * 200_000)
    ledger = CoordinationFile(coordination_file)
    with pytest.raises(CoordinationError, match="nests too deeply") as info:
        ledger.allocate(gpus(1), 1, Owner.of_process())
    assert info.value.path == str(coordination_file)


def test_a_state_path_that_is_a_directory_is_a_coordination_error(
    coordination_file: Path,
) -> None:
    coordination_file.mkdir(parents=True)
    ledger = CoordinationFile(coordination_file)
    for operation in (ledger.allocations, lambda: ledger.allocate(gpus(1), 1, Owner.of_process())):
        with pytest.raises(CoordinationError, match="not a regular file") as info:
            operation()
        assert info.value.path == str(coordination_file)


def test_an_oversized_state_is_refused_without_reading_it_all(
    coordination_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("accelflow.resources.coordination._file.MAX_STATE_BYTES", 1024)
    coordination_file.parent.mkdir(parents=True)
    coordination_file.write_text(" " * 2048)
    with pytest.raises(CoordinationError, match="larger than"):
        CoordinationFile(coordination_file).allocations()
