"""The coordination file: exact matching, crash-safe locking, owner identity, bad files."""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from accelflow import CoordinationError, DiscoveryError
from accelflow.resources.gpu import (
    CoordinationFile,
    GPUDevice,
    Liveness,
    Owner,
    default_coordination_path,
)

from .conftest import plant


def gpus(n: int, *, uuids: bool = True) -> list[GPUDevice]:
    return [GPUDevice(index=str(i), uuid=f"GPU-{i:04d}" if uuids else None) for i in range(n)]


def indexes(devices: list[GPUDevice]) -> list[str]:
    return [d.index for d in devices]


def held(ledger: CoordinationFile) -> dict[str, int]:
    return {r.index: r.owner.pid for r in ledger.allocations()}


@pytest.fixture
def me() -> Owner:
    return Owner.of_process()


@pytest.fixture
def ledger(coordination_file: Path) -> CoordinationFile:
    return CoordinationFile(coordination_file)


def dead_owner(pid: int) -> Owner:
    return dataclasses.replace(Owner.of_process(), pid=pid, start_ticks=1, start_time=1.0)


# -- basics ----------------------------------------------------------------------------------


def test_allocations_are_disjoint_and_recorded(ledger: CoordinationFile, me: Owner) -> None:
    first = ledger.allocate(gpus(4), 2, me)
    second = ledger.allocate(gpus(4), 2, me)
    assert indexes(first) == ["0", "1"] and indexes(second) == ["2", "3"]
    assert sorted(held(ledger)) == ["0", "1", "2", "3"]
    document = json.loads(ledger.path.read_text())
    assert document["format"] == "accelflow-gpu-coordination" and document["version"] == 1
    record = document["allocations"][0]
    assert record["gpu"] == "GPU-0000" and record["owner"]["pid"] == os.getpid()
    assert record["owner"]["start_time"] == pytest.approx(psutil.Process().create_time())
    stat = Path(f"/proc/{os.getpid()}/stat").read_text()
    assert record["owner"]["start_ticks"] == int(stat[stat.rfind(")") + 2 :].split()[19])


def test_not_enough_names_every_holder_and_writes_nothing(
    ledger: CoordinationFile, me: Owner
) -> None:
    ledger.allocate(gpus(2), 2, me)
    before = ledger.path.read_bytes()
    with pytest.raises(DiscoveryError) as info:
        ledger.allocate(gpus(2), 1, me)
    message = str(info.value)
    assert "need 1 GPU(s) but only 0 of the 2" in message
    assert (
        f"GPU 0 (GPU-0000) held by pid {os.getpid()}" in message and "GPU 1 (GPU-0001)" in message
    )
    assert str(ledger.path) in message
    assert ledger.path.read_bytes() == before


def test_release_drops_only_the_owners_records(
    ledger: CoordinationFile, me: Owner, live_process: subprocess.Popen[bytes]
) -> None:
    other = Owner.of_process(live_process.pid)
    mine = ledger.allocate(gpus(3), 2, me)
    ledger.allocate(gpus(3), 1, other)
    released = ledger.release(gpus(3), me)
    assert sorted(r.index for r in released) == indexes(mine)
    assert held(ledger) == {"2": live_process.pid}
    assert ledger.release(gpus(3), me) == []  # idempotent
    assert len(ledger.release_owner(other)) == 1 and held(ledger) == {}


def test_state_file_is_replaced_atomically_and_lock_file_never(
    ledger: CoordinationFile, me: Owner
) -> None:
    ledger.allocate(gpus(2), 1, me)
    old_lock = os.open(ledger.lock_path, os.O_RDONLY)
    old_state = os.open(ledger.path, os.O_RDONLY)
    try:
        ledger.allocate(gpus(2), 1, me)
        ledger.release_owner(me)
        assert os.path.samestat(os.fstat(old_lock), ledger.lock_path.stat())
        assert os.fstat(old_state).st_nlink == 0  # replaced by rename, never edited in place
        assert b'"index": "0"' in os.read(old_state, 10_000)
    finally:
        os.close(old_lock)
        os.close(old_state)
    leftovers = [p.name for p in ledger.path.parent.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []


def test_a_failed_write_keeps_the_old_state(
    ledger: CoordinationFile, me: Owner, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger.allocate(gpus(3), 1, me)
    before = ledger.path.read_bytes()

    def full_disk(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(CoordinationError, match="No space left on device"):
        ledger.allocate(gpus(3), 1, me)
    monkeypatch.undo()
    assert ledger.path.read_bytes() == before
    assert not [p for p in ledger.path.parent.iterdir() if p.name.endswith(".tmp")]


def test_amount_must_be_positive(ledger: CoordinationFile, me: Owner) -> None:
    with pytest.raises(ValueError, match="positive"):
        ledger.allocate(gpus(2), 0, me)


# -- exact matching ("1" vs "11") --------------------------------------------------------------


@pytest.mark.parametrize("with_uuids", [True, False], ids=["by-uuid", "by-index"])
def test_reclaiming_gpu_1_never_touches_gpu_11(
    ledger: CoordinationFile,
    dead_pid: int,
    live_process: subprocess.Popen[bytes],
    with_uuids: bool,
) -> None:
    devices = gpus(12, uuids=with_uuids)
    live = Owner.of_process(live_process.pid)
    ledger.allocate(devices, 12, live)
    assert [r.index for r in ledger.release([devices[1]], live)] == ["1"]  # 11 stays
    plant(ledger.path, [devices[1]], dead_owner(dead_pid))
    me = Owner.of_process()
    assert indexes(ledger.allocate(devices, 1, me)) == ["1"]  # reclaimed from the dead owner
    assert held(ledger)["11"] == live_process.pid
    assert [r.index for r in ledger.release([devices[1]], me)] == ["1"]
    after = held(ledger)
    assert "1" not in after and after["11"] == live_process.pid
    assert indexes(ledger.allocate(devices, 1, me)) == ["1"]
    with pytest.raises(DiscoveryError):
        ledger.allocate(devices, 1, me)  # 11 (and every other) is still held


def test_records_without_uuid_match_by_index(ledger: CoordinationFile, me: Owner) -> None:
    ledger.allocate([GPUDevice(index="1")], 1, me)
    with pytest.raises(DiscoveryError):
        ledger.allocate([GPUDevice(index="1", uuid="GPU-1")], 1, me)
    assert indexes(ledger.allocate([GPUDevice(index="11", uuid="GPU-11")], 1, me)) == ["11"]


# -- owners: death, PID reuse, other hosts --------------------------------------------------------


def test_never_recorded_gpus_are_preferred_over_reclaimed_ones(
    ledger: CoordinationFile, dead_pid: int
) -> None:
    me = Owner.of_process()
    assert indexes(ledger.allocate(gpus(3), 1, me)) == ["0"]
    plant(ledger.path, gpus(3)[1:2], dead_owner(dead_pid))
    assert indexes(ledger.allocate(gpus(3), 1, me)) == ["2"]  # not 1: it was never recorded
    assert indexes(ledger.allocate(gpus(3), 1, me)) == ["1"]  # now 1 is reclaimed
    assert set(held(ledger).values()) == {os.getpid()}


def test_a_dead_owners_records_are_dropped_at_the_next_allocation(
    ledger: CoordinationFile, dead_pid: int
) -> None:
    plant(ledger.path, gpus(3)[:2], dead_owner(dead_pid))
    assert indexes(ledger.allocate(gpus(3), 1, Owner.of_process())) == ["2"]
    assert held(ledger) == {"2": os.getpid()}  # nothing leaked


def test_dead_records_are_dropped_even_when_allocation_fails(
    ledger: CoordinationFile, dead_pid: int
) -> None:
    plant(ledger.path, gpus(2)[:1], dead_owner(dead_pid))
    with pytest.raises(DiscoveryError):
        ledger.allocate(gpus(2), 3, Owner.of_process())
    assert held(ledger) == {}


def test_a_reused_pid_is_detected_by_start_time(
    ledger: CoordinationFile, live_process: subprocess.Popen[bytes]
) -> None:
    # a record whose pid is alive but belongs to a process started at another time
    real = Owner.of_process(live_process.pid)
    assert real.start_ticks is not None and real.liveness() is Liveness.ALIVE
    impostor = dataclasses.replace(real, start_ticks=real.start_ticks - 1)
    assert impostor.liveness() is Liveness.DEAD and not impostor.same_process(real)
    plant(ledger.path, gpus(1), impostor)
    assert indexes(ledger.allocate(gpus(1), 1, Owner.of_process())) == ["0"]


def test_a_clock_step_does_not_make_a_live_owner_look_dead(
    live_process: subprocess.Popen[bytes],
) -> None:
    # psutil's create_time() moves with the wall clock (NTP); the start ticks do not
    real = Owner.of_process(live_process.pid)
    stepped = dataclasses.replace(real, start_time=real.start_time + 30.0)
    assert stepped.liveness() is Liveness.ALIVE and stepped.same_process(real)


def test_without_proc_psutil_decides(live_process: subprocess.Popen[bytes], dead_pid: int) -> None:
    from accelflow.resources.coordination._owner import _psutil_liveness

    real = dataclasses.replace(Owner.of_process(live_process.pid), start_ticks=None)
    assert _psutil_liveness(real) is Liveness.ALIVE
    assert (
        _psutil_liveness(dataclasses.replace(real, start_time=real.start_time - 60))
        is Liveness.DEAD
    )
    assert _psutil_liveness(dead_owner(dead_pid)) is Liveness.DEAD


def test_a_killed_unreaped_owner_counts_as_dead(ledger: CoordinationFile) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    owner = Owner.of_process(child.pid)
    ledger.allocate(gpus(1), 1, owner)
    os.kill(child.pid, signal.SIGKILL)
    _wait_zombie(child.pid)
    assert owner.liveness() is Liveness.DEAD
    assert indexes(ledger.allocate(gpus(1), 1, Owner.of_process())) == ["0"]
    child.wait()


def _wait_zombie(pid: int) -> None:
    process = psutil.Process(pid)
    for _ in range(1000):
        if process.status() == psutil.STATUS_ZOMBIE:
            return
        time.sleep(0.01)
    raise AssertionError(f"{pid} did not become a zombie")


def test_owners_on_another_host_or_namespace_are_never_reclaimed(
    ledger: CoordinationFile, dead_pid: int
) -> None:
    elsewhere = dataclasses.replace(dead_owner(dead_pid), host="other-node")
    namespaced = dataclasses.replace(dead_owner(dead_pid), pid_namespace=1)
    assert elsewhere.liveness() is Liveness.UNKNOWN and namespaced.liveness() is Liveness.UNKNOWN
    plant(ledger.path, gpus(2)[:1], elsewhere)
    plant(ledger.path, gpus(2)[1:], namespaced)
    with pytest.raises(DiscoveryError, match="cannot tell if it runs") as info:
        ledger.allocate(gpus(2), 1, Owner.of_process())
    assert "on host other-node" in str(info.value)


def test_owners_from_before_a_reboot_are_dead(live_process: subprocess.Popen[bytes]) -> None:
    before_reboot = dataclasses.replace(Owner.of_process(live_process.pid), boot_id="0ld-b00t")
    if Owner.of_process().boot_id is None:
        pytest.skip("no boot id on this system")
    assert before_reboot.liveness() is Liveness.DEAD


def test_owner_identity_round_trips_and_rejects_bad_records() -> None:
    me = Owner.of_process()
    assert Owner.from_json(json.loads(json.dumps(me.to_json()))) == me
    assert me.same_process(Owner.from_json(me.to_json()))
    bad_records: list[object] = [
        {"pid": "1", "start_time": 1.0, "host": "h"},
        {"pid": 1, "start_time": None, "host": "h"},
        {"pid": 1, "start_time": 1.0, "host": ""},
        {"pid": True, "start_time": 1.0, "host": "h"},
        {"pid": 1, "start_time": 1.0, "host": "h", "pid_namespace": "x"},
        {"pid": 1, "start_ticks": 1.5, "start_time": 1.0, "host": "h"},
        [],
    ]
    for bad in bad_records:
        with pytest.raises(ValueError):
            Owner.from_json(bad)


# -- the lock ----------------------------------------------------------------------------------------


def test_the_lock_still_excludes_after_a_reclaim(
    ledger: CoordinationFile, dead_pid: int, coordination_file: Path
) -> None:
    """Flink's `sed -i` replaced the locked file, so a reclaim broke mutual exclusion."""
    ledger.allocate(gpus(2), 1, Owner.of_process())  # creates the lock file
    plant(ledger.path, gpus(2)[1:], dead_owner(dead_pid))
    ledger.release(gpus(2)[:1], Owner.of_process())
    old_lock = os.open(ledger.lock_path, os.O_RDONLY)
    assert len(ledger.allocate(gpus(2), 1, Owner.of_process())) == 1  # a reclaim happened
    assert os.path.samestat(os.fstat(old_lock), ledger.lock_path.stat())
    os.close(old_lock)
    script = (
        "import sys; from accelflow.resources.gpu import CoordinationFile, GPUDevice, Owner; "
        f"CoordinationFile({str(coordination_file)!r}).allocate([GPUDevice(index='1', uuid='GPU-0001')], "
        "1, Owner.of_process()); print('allocated')"
    )
    with ledger.lock():
        probe = os.open(ledger.lock_path, os.O_RDONLY)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(probe)
        waiter = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        with pytest.raises(subprocess.TimeoutExpired):
            waiter.wait(timeout=1.0)  # blocked on the lock we hold
    out, _ = waiter.communicate(timeout=30)
    assert waiter.returncode == 0 and out.strip() == "allocated"


def test_a_holder_killed_inside_the_lock_leaves_a_usable_file(
    ledger: CoordinationFile, coordination_file: Path
) -> None:
    script = (
        "import os, signal; from accelflow.resources.gpu import CoordinationFile; "
        f"ledger = CoordinationFile({str(coordination_file)!r}); "
        "cm = ledger.lock(); cm.__enter__(); print('locked', flush=True); "
        "os.kill(os.getpid(), signal.SIGKILL)"
    )
    holder = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    assert holder.stdout.strip() == "locked" and holder.returncode == -signal.SIGKILL
    assert indexes(ledger.allocate(gpus(1), 1, Owner.of_process())) == ["0"]


# -- bad files -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"0 4242\n11 4243\n", "not JSON"),  # Flink's format
        (b'{"allocations": []}', "not an accelflow GPU coordination file"),
        (b'{"format": "accelflow-gpu-coordination", "version": 2, "allocations": []}', "version 2"),
        (
            b'{"format": "accelflow-gpu-coordination", "version": 1, "allocations": {}}',
            "not a list",
        ),
        (
            b'{"format": "accelflow-gpu-coordination", "version": 1, "allocations": [{"index": "0"}]}',
            "record is malformed",
        ),
        (b'{"format": "accelflow-gpu-coordination", "version": 1, "allocations": [', "not JSON"),
        (b"\xff\xfe garbage", "not JSON"),
    ],
)
def test_a_corrupt_or_foreign_file_stops_allocation_untouched(
    ledger: CoordinationFile, content: bytes, why: str
) -> None:
    ledger.path.parent.mkdir(parents=True)
    ledger.path.write_bytes(content)
    with pytest.raises(CoordinationError, match=why) as info:
        ledger.allocate(gpus(4), 1, Owner.of_process())
    assert info.value.path == str(ledger.path)
    assert f"remove {ledger.path}" in str(info.value)
    assert "No GPU is handed out" in str(info.value)
    assert ledger.path.read_bytes() == content
    with pytest.raises(CoordinationError):
        ledger.release(gpus(4), Owner.of_process())


def test_an_empty_file_is_an_empty_state(ledger: CoordinationFile) -> None:
    ledger.path.parent.mkdir(parents=True)
    ledger.path.write_bytes(b"")
    assert indexes(ledger.allocate(gpus(2), 1, Owner.of_process())) == ["0"]


def test_symlinked_state_or_lock_files_are_refused(
    ledger: CoordinationFile, tmp_path: Path
) -> None:
    ledger.path.parent.mkdir(parents=True)
    target = tmp_path / "elsewhere"
    target.write_text("")
    ledger.path.symlink_to(target)
    with pytest.raises(CoordinationError, match="symbolic link"):
        ledger.allocate(gpus(1), 1, Owner.of_process())
    ledger.path.unlink()
    ledger.lock_path.unlink()
    ledger.lock_path.symlink_to(target)
    with pytest.raises(CoordinationError, match="symbolic link"):
        ledger.allocate(gpus(1), 1, Owner.of_process())
    assert target.read_text() == ""


# -- the default location -------------------------------------------------------------------------


def test_default_location_is_a_private_per_user_directory(tmp_path: Path) -> None:
    path = default_coordination_path(str(tmp_path))
    assert path == tmp_path / f"accelflow-{os.getuid()}" / "gpu-coordination.json"
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert default_coordination_path(str(tmp_path)) == path  # reused
    assert CoordinationFile().path.parent.name == f"accelflow-{os.getuid()}"


def test_default_location_refuses_a_planted_symlink(tmp_path: Path) -> None:
    (tmp_path / "attacker").mkdir()
    (tmp_path / f"accelflow-{os.getuid()}").symlink_to(tmp_path / "attacker")
    with pytest.raises(CoordinationError, match="symbolic link"):
        default_coordination_path(str(tmp_path))


def test_default_location_refuses_a_directory_others_can_write(tmp_path: Path) -> None:
    directory = tmp_path / f"accelflow-{os.getuid()}"
    directory.mkdir()
    directory.chmod(0o777)
    with pytest.raises(CoordinationError, match="writable by other users"):
        default_coordination_path(str(tmp_path))


@pytest.mark.skipif(
    os.getuid() != 0, reason="needs root to create a directory owned by another user"
)
def test_default_location_refuses_a_directory_of_another_user(tmp_path: Path) -> None:
    directory = tmp_path / f"accelflow-{os.getuid()}"
    directory.mkdir(mode=0o700)
    os.chown(directory, 4242, 4242)
    with pytest.raises(CoordinationError, match="owned by uid 4242"):
        default_coordination_path(str(tmp_path))
