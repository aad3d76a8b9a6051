"""A refused allocation says whether the holder is another TaskExecutor of the same cluster,
and then what the config asks for in all (issue 25, item 17)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from accelflow import DiscoveryError
from accelflow.resources.gpu import CoordinationFile, GPUDevice, Owner

from .conftest import FakeGPUs

ROOT = Path(__file__).resolve().parents[3]
JOB = """\
from accelflow import Environment

env = Environment()
env.from_sequence(1, 8).map(lambda x: x * x, parallelism=2).print()
env.execute("squares")
"""


def gpus(n: int) -> list[GPUDevice]:
    return [GPUDevice(index=str(i), uuid=f"GPU-{i:04d}") for i in range(n)]


@pytest.fixture
def children() -> Iterator[list[Owner]]:
    """Three live children of this test process: siblings, as a cluster's TaskExecutors are."""
    processes = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
                 for _ in range(3)]
    yield [Owner.of_process(p.pid) for p in processes]
    for process in processes:
        process.kill()
        process.wait()


def refusal(ledger: CoordinationFile, devices: list[GPUDevice], amount: int, owner: Owner) -> str:
    with pytest.raises(DiscoveryError) as info:
        ledger.allocate(devices, amount, owner)
    return str(info.value)


def test_a_sibling_holding_the_gpus_is_named_with_the_total_the_config_asks_for(
    coordination_file: Path, children: list[Owner]
) -> None:
    first, second, _ = children
    ledger = CoordinationFile(coordination_file)
    ledger.allocate(gpus(2), 2, first)
    message = refusal(ledger, gpus(2), 2, second)
    assert (
        f"pid {first.pid} is another TaskExecutor of this same cluster (started, like this one, "
        f"by pid {os.getpid()}): the config asks for at least 4 GPUs on this host in all "
        "(2 TaskExecutors x 2 GPUs), but only 2 are visible here. Lower the GPU amount per "
        "TaskExecutor (external-resource.<name>.amount) or the number of TaskExecutors "
        "(local.number-taskmanager) so that TaskExecutors x amount is at most 2"
    ) in message
    assert "Stop a TaskExecutor" not in message


def test_siblings_holding_unequal_amounts_are_summed(
    coordination_file: Path, children: list[Owner]
) -> None:
    first, second, third = children
    ledger = CoordinationFile(coordination_file)
    ledger.allocate(gpus(3), 1, first)
    ledger.allocate(gpus(3), 2, second)
    message = refusal(ledger, gpus(3), 1, third)
    assert f"pids {first.pid}, {second.pid} are other TaskExecutors of this same cluster" in message
    assert "at least 4 GPUs on this host in all (3 held by the others + 1 for this one)" in message


def test_a_holder_of_another_cluster_gets_the_usual_advice(
    coordination_file: Path, children: list[Owner]
) -> None:
    ledger = CoordinationFile(coordination_file)
    ledger.allocate(gpus(2), 2, children[0])
    message = refusal(ledger, gpus(2), 1, Owner.of_process())  # this process: not a sibling
    assert "same cluster" not in message
    assert "Stop a TaskExecutor that holds GPUs" in message


def test_when_the_cluster_alone_fits_a_stranger_is_the_one_to_stop(
    coordination_file: Path, children: list[Owner]
) -> None:
    ledger = CoordinationFile(coordination_file)
    ledger.allocate(gpus(2), 1, Owner.of_process())  # another cluster's TaskExecutor
    ledger.allocate(gpus(2), 1, children[0])
    message = refusal(ledger, gpus(2), 1, children[1])  # 1 + 1 for the cluster: fits in 2
    assert "same cluster" not in message and "Stop a TaskExecutor" in message


def test_an_amount_above_the_visible_gpus_says_so(coordination_file: Path) -> None:
    message = refusal(CoordinationFile(coordination_file), gpus(2), 3, Owner.of_process())
    assert "Held: none. This TaskExecutor alone asks for more GPUs than the 2 visible" in message


def test_the_parent_is_recorded_and_older_records_without_it_still_read(
    coordination_file: Path, children: list[Owner]
) -> None:
    ledger = CoordinationFile(coordination_file)
    ledger.allocate(gpus(1), 1, children[0])
    document = json.loads(coordination_file.read_text())
    owner = document["allocations"][0]["owner"]
    assert owner["parent"]["pid"] == os.getpid() and owner["parent"]["start_ticks"] > 0
    del owner["parent"]  # as an older accelflow wrote it
    coordination_file.write_text(json.dumps(document))
    (record,) = ledger.allocations()
    assert record.owner.parent_pid is None and record.owner.same_process(children[0])
    assert not record.owner.same_parent(children[1])


@pytest.mark.parametrize("start_method", ["zygote", "spawn"])
def test_two_taskexecutors_of_two_gpus_on_a_two_gpu_host_are_explained(
    fake_gpus: FakeGPUs, tmp_path: Path, start_method: str
) -> None:
    """``conf/two-taskexecutors.yaml`` on a 2-GPU host: the real CLI names the other
    TaskExecutor as this job's own, the 4 GPUs the file asks for, and the fix."""
    fake_gpus(2)
    (tmp_path / "job.py").write_text(JOB, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "ACCELFLOW_CONF"}
    result = subprocess.run(
        [str(Path(sys.executable).parent / "accelflow"), "run",
         "--conf", str(ROOT / "conf" / "two-taskexecutors.yaml"),
         "-D", f"local.start-method={start_method}", "job.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 1, result.stderr
    (line,) = [line for line in result.stderr.splitlines() if "could not start" in line]
    assert "is another TaskExecutor of this same cluster" in line
    assert "the config asks for at least 4 GPUs on this host in all (2 TaskExecutors x 2 GPUs)" in line
    assert "but only 2 are visible here" in line
    assert "(external-resource.<name>.amount) or the number of TaskExecutors" in line
    assert "(local.number-taskmanager)" in line and "Traceback" not in result.stderr
