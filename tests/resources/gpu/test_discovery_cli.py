"""``accelflow-gpu-discovery``: Flink's script contract, coordination across real processes."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from accelflow.resources.gpu import GPU_DISCOVERY_ENV_VAR, CoordinationFile, GPUDevice, Owner
from accelflow.testing._nvidia_smi import fake_gpu_uuid

from .conftest import OWNER_PROCESS, FakeGPUs, plant
from .test_coordination import dead_owner

MODULE = [sys.executable, "-m", "accelflow.resources.gpu._discovery_cli"]


def fake_env() -> dict[str, str]:
    """This process's environment with the fake nvidia-smi as the only GPU source, said
    explicitly: the command must never ask a GPU machine's real NVML (issue 12.9)."""
    return {**os.environ, GPU_DISCOVERY_ENV_VAR: "nvidia-smi"}


def discover(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*MODULE, *args], capture_output=True, text=True, check=False, timeout=60, env=fake_env()
    )


def coordinated(
    coordination_file: Path, amount: int, flag: str = "--enable-coordination-mode"
) -> subprocess.CompletedProcess[str]:
    return discover(str(amount), flag, "--coordination-file", str(coordination_file))


# -- Flink's contract ----------------------------------------------------------------------------


def test_prints_the_first_amount_indexes(fake_gpus: FakeGPUs) -> None:
    fake_gpus(4)
    done = discover("2")  # Flink case 19
    assert (done.returncode, done.stdout, done.stderr) == (0, "0,1\n", "")


def test_amount_zero_prints_nothing_even_without_gpus(no_nvidia_smi: None) -> None:
    done = discover("0")
    assert (done.returncode, done.stdout) == (0, "")


def test_not_enough_gpus_exits_1_with_the_message_on_stderr(fake_gpus: FakeGPUs) -> None:
    fake_gpus(1)
    done = discover("2")
    assert done.returncode == 1 and done.stdout == ""
    assert "could not get enough GPU resources: need 2, found 1 (0)" in done.stderr


def test_a_failing_nvidia_smi_exits_1_with_its_message(fake_gpus: FakeGPUs) -> None:
    fake_gpus(2, exit_code=9, stderr="couldn't communicate with the NVIDIA driver")
    done = discover("1")
    assert done.returncode == 1 and "couldn't communicate with the NVIDIA driver" in done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "the following arguments are required: amount"),
        (("2", "--bogus"), "unrecognized arguments: --bogus"),
        (("2", "null"), "unrecognized arguments: null"),  # what Flink appended when args were unset
        (("2", "--enable-coordination-mod"), "unrecognized arguments"),
        (("two",), "expected a whole number >= 0, got 'two'"),
        (("-1",), "expected a whole number >= 0, got '-1'"),
        (("1", "--coordination-file"), "expected one argument"),
    ],
)
def test_usage_errors_exit_2_and_are_never_ignored(args: tuple[str, ...], message: str) -> None:
    done = discover(*args)
    assert done.returncode == 2 and done.stdout == ""
    assert message in done.stderr and "usage: accelflow-gpu-discovery" in done.stderr


def test_the_installed_console_script_works(fake_gpus: FakeGPUs) -> None:
    fake_gpus(3)
    command = Path(sys.executable).parent / "accelflow-gpu-discovery"
    done = subprocess.run(
        [str(command), "3"], capture_output=True, text=True, check=False, env=fake_env()
    )
    assert (done.returncode, done.stdout) == (0, "0,1,2\n")


def test_respects_cuda_visible_devices(
    fake_gpus: FakeGPUs, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_gpus(4)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert discover("2").stdout == "2,3\n"


# -- coordination ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--enable-coordination-mode", "--enable-coordination"])
def test_coordinated_calls_are_disjoint_and_owned_by_the_parent(
    fake_gpus: FakeGPUs, coordination_file: Path, flag: str
) -> None:
    fake_gpus(5)  # Flink case 20, checked for real this time
    first, second = coordinated(coordination_file, 2, flag), coordinated(coordination_file, 2, flag)
    assert (first.stdout, second.stdout) == ("0,1\n", "2,3\n")
    records = CoordinationFile(coordination_file).allocations()
    assert sorted(r.index for r in records) == ["0", "1", "2", "3"]
    assert {r.owner.pid for r in records} == {os.getpid()}  # the process that ran the command
    third = coordinated(coordination_file, 2, flag)
    assert third.returncode == 1 and "need 2 GPU(s) but only 1 of the 5" in third.stderr


def test_both_flag_spellings_share_the_same_coordination(
    fake_gpus: FakeGPUs, coordination_file: Path
) -> None:
    fake_gpus(2)
    assert coordinated(coordination_file, 1, "--enable-coordination-mode").stdout == "0\n"
    assert coordinated(coordination_file, 1, "--enable-coordination").stdout == "1\n"
    assert coordinated(coordination_file, 1, "--enable-coordination").returncode == 1


def test_dead_owners_are_reclaimed_with_exactly_n_gpus(
    fake_gpus: FakeGPUs, coordination_file: Path, dead_pid: int
) -> None:
    fake_gpus(4)  # Flink case 21 with as many GPUs as asked for, so the reclaim really runs
    plant(coordination_file, [GPUDevice(index="0", uuid=fake_gpu_uuid(0))], dead_owner(dead_pid))
    first, second = coordinated(coordination_file, 2), coordinated(coordination_file, 2)
    assert (first.stdout, second.stdout) == ("1,2\n", "0,3\n")  # 0: its dead record was dropped


def test_a_custom_coordination_file_is_created(fake_gpus: FakeGPUs, tmp_path: Path) -> None:
    fake_gpus(1)  # Flink case 22, with a check that can fail
    target = tmp_path / "new dir" / "coordination.json"
    assert coordinated(target, 1).returncode == 0
    assert json.loads(target.read_text())["allocations"][0]["index"] == "0"
    assert (tmp_path / "new dir" / "coordination.json.lock").is_file()


def test_without_a_file_the_per_user_default_is_used(fake_gpus: FakeGPUs) -> None:
    fake_gpus(2)
    assert discover("1", "--enable-coordination").stdout == "0\n"
    assert discover("1", "--enable-coordination").stdout == "1\n"
    assert [r.index for r in CoordinationFile().allocations()] == ["0", "1"]


def test_an_explicit_owner_pid_must_be_alive(
    fake_gpus: FakeGPUs, coordination_file: Path, dead_pid: int
) -> None:
    fake_gpus(1)
    done = discover(
        "1",
        "--enable-coordination",
        "--coordination-file",
        str(coordination_file),
        "--owner-pid",
        str(dead_pid),
    )
    assert done.returncode == 1 and f"the owner process {dead_pid} is gone" in done.stderr


def test_a_corrupt_file_exits_1_and_is_left_alone(
    fake_gpus: FakeGPUs, coordination_file: Path
) -> None:
    fake_gpus(2)
    coordination_file.parent.mkdir(parents=True)
    coordination_file.write_text("0 4242\n")
    done = coordinated(coordination_file, 1)
    assert done.returncode == 1 and done.stdout == ""
    assert (
        "unusable GPU coordination state" in done.stderr
        and f"remove {coordination_file}" in done.stderr
    )
    assert coordination_file.read_text() == "0 4242\n"


# -- many real owner processes ----------------------------------------------------------------------


@dataclass
class OwnerProcess:
    process: subprocess.Popen[str]
    pid: int
    gpus: list[str]
    error: str | None

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def release(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("release\n")
        self.process.stdin.flush()
        self.process.wait(timeout=30)


def start_owners(
    n: int, mode: str, coordination_file: Path, amount: int = 1, *extra: str
) -> list[OwnerProcess]:
    """Start ``n`` owner processes at once; wait for each to report its allocation."""
    processes = [
        subprocess.Popen(
            [sys.executable, str(OWNER_PROCESS), mode, str(coordination_file), str(amount), *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=fake_env(),
        )
        for _ in range(n)
    ]
    owners = []
    for process in processes:
        assert process.stdout is not None
        report = json.loads(process.stdout.readline())
        owners.append(OwnerProcess(process, report["pid"], report["gpus"], report["error"]))
    return owners


@pytest.fixture
def owners() -> Iterator[list[OwnerProcess]]:
    started: list[OwnerProcess] = []
    yield started
    for owner in started:
        if owner.process.poll() is None:
            owner.kill()
        for pipe in (owner.process.stdin, owner.process.stdout):
            if pipe is not None:
                pipe.close()


def assert_disjoint(owners: list[OwnerProcess]) -> set[str]:
    held = [g for o in owners for g in o.gpus]
    assert len(held) == len(set(held)), f"double allocation: {sorted(held)}"
    return set(held)


@pytest.mark.slow
def test_twelve_owners_at_once_get_twelve_gpus_and_a_kill_frees_exactly_one(
    fake_gpus: FakeGPUs, coordination_file: Path, owners: list[OwnerProcess]
) -> None:
    fake_gpus(12)
    owners.extend(start_owners(12, "cli", coordination_file))
    assert [o.error for o in owners] == [None] * 12
    assert assert_disjoint(owners) == {str(i) for i in range(12)}

    owners.extend(start_owners(1, "cli", coordination_file))
    thirteenth = owners[-1]
    assert thirteenth.gpus == [] and "exit 1" in str(thirteenth.error)
    assert "need 1 GPU(s) but only 0 of the 12" in str(thirteenth.error)

    victim = owners[5]
    victim.kill()
    owners.extend(start_owners(1, "cli", coordination_file))
    assert owners[-1].gpus == victim.gpus
    records = {r.index: r.owner.pid for r in CoordinationFile(coordination_file).allocations()}
    assert records[victim.gpus[0]] == owners[-1].pid
    assert len(records) == 12 and victim.pid not in records.values()


@pytest.mark.slow
def test_random_kills_and_releases_never_double_allocate_or_leak(
    fake_gpus: FakeGPUs, coordination_file: Path, owners: list[OwnerProcess]
) -> None:
    """More owners than GPUs, started at once, in rounds; between rounds some are SIGKILLed,
    some release cleanly, some keep their GPUs."""
    gpu_count, batch = 5, 6
    fake_gpus(gpu_count)
    rng = random.Random(20240501)
    alive: list[OwnerProcess] = []
    for _round in range(3):
        amount = rng.choice([1, 2])
        fresh = start_owners(batch, "driver", coordination_file, amount=amount)
        owners.extend(fresh)
        alive += [o for o in fresh if o.gpus]
        assert all(len(o.gpus) == amount for o in alive if o in fresh)
        free = gpu_count - len(assert_disjoint(alive))
        refused = [o for o in fresh if not o.gpus]
        assert all("need" in str(o.error) for o in refused)
        # nothing leaked: a refusal happens only when fewer than `amount` GPUs were free
        # (the others of the batch only took more after it)
        assert not refused or free < amount
        for owner in list(alive):
            fate = rng.random()
            if fate < 0.4:
                owner.kill()
                alive.remove(owner)
            elif fate < 0.7:
                owner.release()
                alive.remove(owner)
    for owner in alive:
        owner.kill()
    everything = CoordinationFile(coordination_file).allocate(
        [GPUDevice(index=str(i), uuid=fake_gpu_uuid(i)) for i in range(gpu_count)],
        gpu_count,
        Owner.of_process(),
    )
    assert len(everything) == gpu_count  # every GPU of every dead owner came back
