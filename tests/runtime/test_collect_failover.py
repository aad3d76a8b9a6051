"""``execute_and_collect`` after a failover (issue s7-fix-collect): every record exactly once
on every failover path, as Flink's ``CollectSinkFunction`` with checkpointing. Before, the
new attempt started from an empty list and lost every record collected before the restored
checkpoint (the job of ``collect_jobs`` returned 750 of 2000). Real processes through the real CLI
(``accelflow run``), as a user runs the job."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from collect_jobs import N, restored_a_checkpoint, run_job
from failover_jobs import Counted, Model, calls, opens

from accelflow import Environment
from accelflow.dataflow import even_ranges


@pytest.mark.parametrize(("conf", "fail", "path"), [
    ({}, "raise", "rolled back in place"),
    ({}, "kill", "rolled back in place"),
    ({"execution.failover.in-place": False}, "raise", "full restart"),
], ids=["in-place", "sigkill", "full-restart"])
def test_every_record_is_collected_once_after_a_failover(tmp_path: Path, conf: dict[str, Any], fail: str,
                                                         path: str) -> None:
    out, stderr = run_job(tmp_path, conf, fail=fail)
    assert path in stderr and restored_a_checkpoint(tmp_path)  # the path meant, from a checkpoint
    assert sorted(out) == list(range(1, N + 1))


def test_without_checkpointing_the_restart_from_the_start_collects_each_record_once(tmp_path: Path) -> None:
    out, stderr = run_job(tmp_path, {"execution.checkpointing.interval": None, "restart-strategy": "fixed-delay"})
    assert "from the start" in stderr
    assert sorted(out) == list(range(1, N + 1))


@pytest.mark.parametrize("how", ["batch", "ordered"])
def test_the_batch_and_the_ordered_collect_are_exactly_once_too(tmp_path: Path, how: str) -> None:
    out, _ = run_job(tmp_path, {}, how=how)
    assert how == "ordered" or restored_a_checkpoint(tmp_path)
    assert (out if how == "ordered" else sorted(out)) == list(range(1, N + 1))


def test_a_standby_that_takes_an_index_over_collects_from_the_checkpoint_on(gpu_conf: dict[str, Any],
                                                                             tmp_path: Path) -> None:
    # standbys are for device stages; the kill waits for the 3 subtasks' and the standby's open()
    env = Environment({**gpu_conf, "parallelism.default": 3, "execution.checkpointing.interval": "100 ms",
                       "restart-strategy.fixed-delay.delay": "0 s", "execution.failover.standby-subtasks": 1})
    model = Model(tmp_path, batch_s=0.01, fail="kill", at=1200, opens_first=4)
    stream = (env.from_source(Counted(N, chunk=10, delay=0.02), name="numbers")
              .map_batches(model, batch_size=10, name="model", resources={"gpu": 1}))
    out = sorted(int(r) for r in stream.execute_and_collect("standby"))
    assert out == list(range(N))
    standby_pid = next(pid for pid, index, _ in opens(tmp_path) if index == -1)
    # it took index 2/3 over, from a checkpoint: after the first record of that index's split
    first = next(rows[0] for _, pid, _, rows in calls(tmp_path) if pid == standby_pid)
    assert first > list(even_ranges(N, 3))[1][0]
