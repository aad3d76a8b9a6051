"""Who owns the GPUs ``accelflow-gpu-discovery`` allocates: the TaskExecutor, even behind a
wrapper script, and never a process that has already exited."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from accelflow.resources.gpu import CoordinationFile, Owner
from accelflow.resources.gpu import OWNER_ENV_VAR

from .conftest import FakeGPUs
from .test_discovery_cli import MODULE, OwnerProcess, assert_disjoint, owners, start_owners
from .test_script import write_script

__all__ = ["owners"]  # the fixture, imported so pytest finds it here

COMMAND = Path(sys.executable).parent / "accelflow-gpu-discovery"


def coordinated(coordination_file: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*MODULE, "1", "--enable-coordination", "--coordination-file", str(coordination_file)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env={**os.environ, **env},
    )


def test_behind_a_wrapper_script_two_live_task_executors_never_share_a_gpu(
    fake_gpus: FakeGPUs, coordination_file: Path, tmp_path: Path, owners: list[OwnerProcess]
) -> None:
    """The wrapper shell is the command's parent and exits at once: recorded as the owner, its
    GPUs were reclaimed by the next TaskExecutor while the first still used them."""
    fake_gpus(2)
    wrapper = write_script(tmp_path / "gpu-discovery-wrapper.sh", f'"{COMMAND}" "$@"')  # no exec
    owners.extend(start_owners(1, "script", coordination_file, 2, str(wrapper)))
    owners.extend(start_owners(1, "script", coordination_file, 2, str(wrapper)))
    assert all(o.process.poll() is None for o in owners)  # both TaskExecutors still run
    assert_disjoint(owners)
    assert (owners[0].gpus, owners[0].error, owners[1].gpus) == (["0", "1"], None, [])
    assert "need 2 GPU(s) but only 0 of the 2" in str(owners[1].error)
    records = CoordinationFile(coordination_file).allocations()
    assert [r.owner.pid for r in records] == [owners[0].pid] * 2  # not the wrapper's shell


def test_the_owner_named_in_the_environment_wins_over_the_parent(
    fake_gpus: FakeGPUs, coordination_file: Path, live_process: subprocess.Popen[bytes]
) -> None:
    fake_gpus(2)
    owner = Owner.of_process(live_process.pid)
    done = coordinated(coordination_file, {OWNER_ENV_VAR: owner.to_env()})
    assert (done.returncode, done.stdout) == (0, "0\n"), done.stderr
    [record] = CoordinationFile(coordination_file).allocations()
    assert record.owner.same_process(owner)


def test_an_owner_that_has_exited_is_refused(
    fake_gpus: FakeGPUs, coordination_file: Path, dead_pid: int
) -> None:
    fake_gpus(2)
    done = coordinated(coordination_file, {OWNER_ENV_VAR: f"{dead_pid}:1"})
    assert done.returncode == 1 and done.stdout == ""
    assert f"{OWNER_ENV_VAR} names process {dead_pid}, which has exited" in done.stderr
    assert not coordination_file.exists() or CoordinationFile(coordination_file).allocations() == []


def test_a_reused_pid_in_the_environment_is_refused(
    fake_gpus: FakeGPUs, coordination_file: Path, live_process: subprocess.Popen[bytes]
) -> None:
    fake_gpus(2)
    ticks = Owner.of_process(live_process.pid).start_ticks
    if ticks is None:
        pytest.skip("no /proc start ticks here")
    done = coordinated(coordination_file, {OWNER_ENV_VAR: f"{live_process.pid}:{ticks - 1}"})
    assert done.returncode == 1 and "now belongs to another process" in done.stderr


@pytest.mark.parametrize("value", ["", "4242", "abc:1", "12:x", "-1:5"])
def test_a_malformed_owner_variable_names_it(
    fake_gpus: FakeGPUs, coordination_file: Path, value: str
) -> None:
    fake_gpus(1)
    done = coordinated(coordination_file, {OWNER_ENV_VAR: value})
    assert done.returncode == 1 and f"{OWNER_ENV_VAR}=" in done.stderr
    assert "expected '<pid>:<start ticks>'" in done.stderr


def test_the_driver_names_itself_as_owner_for_every_script(tmp_path: Path) -> None:
    from accelflow.resources.gpu import GPUDriverFactory

    seen = tmp_path / "owner.txt"
    script = write_script(tmp_path / "record.sh", f'printf %s "${OWNER_ENV_VAR}" > "{seen}"; echo 0')
    driver = GPUDriverFactory().create_external_resource_driver(
        {"discovery-script.path": str(script)}
    )
    driver.retrieve_resource_info(1)
    assert seen.read_text() == Owner.of_process().to_env()
    assert OWNER_ENV_VAR not in os.environ  # only the script's environment got it
