"""``execute_and_collect`` after a failover (issue s7-fix-collect): every record exactly once
on every failover path, as Flink's ``CollectSinkFunction`` with checkpointing. Before, the
new attempt started from an empty list and lost every record collected before the restored
checkpoint (the job below returned 750 of 2000). Real processes through the real CLI
(``accelflow run``), as a user runs the job."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from failover_jobs import Counted, Model, calls, opens

from accelflow import Environment
from accelflow.dataflow import even_ranges

N = 2000

#: the reported job: subtask 2 of 2 fails once (raises or SIGKILLs itself) near its end,
#: after a checkpoint completed (when checkpointing is on); ``COLLECT_HOW`` picks the collect call, ``JOB_CONF`` adds config (None unsets a key)
JOB = """\
import json, os, signal, time
import numpy as np
from accelflow import Environment, Source

MARK = os.environ["FAIL_MARKER"]

def once(marker):
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False

class Numbers(Source):
    \"\"\"1..2000 in chunks of 16, two splits; the second waits at 1301 (idle, barriers pass)
    until a checkpoint completed: the failure at 1701 comes after one.\"\"\"
    def create_splits(self, parallelism):
        return [(1, 1001), (1001, 2001)]
    def read(self, split, ctx):
        raise NotImplementedError
    def read_chunks(self, split, ctx):
        first, stop = split
        deadline = time.monotonic() + 30
        for start in range(first, stop, 16):
            while start > 1300 and CHECKPOINTING and not os.path.exists(MARK + ".checkpointed") \\
                    and time.monotonic() < deadline:
                time.sleep(0.02)
                yield []
            yield np.arange(start, min(start + 16, stop), dtype=np.int64)
    def snapshot_split(self, split, records_read, checkpoint_id):
        return (split[0] + records_read, split[1])
    def notify_checkpoint_complete(self, checkpoint_id):
        open(MARK + ".checkpointed", "a").close()

class Flaky:
    def map_batch(self, b):
        time.sleep(0.005)
        with open(MARK + ".batches", "a") as f:  # the first record of each batch, as processed
            f.write(f"{b.min()}\\n")
        if b.max() > 1700 and once(MARK):
            if os.environ["FAIL_HOW"] == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError("once")
        return b

conf = {"parallelism.default": 2, "execution.checkpointing.interval": "100 ms",
        "restart-strategy.fixed-delay.delay": "0 s", **json.loads(os.environ["JOB_CONF"])}
CHECKPOINTING = conf["execution.checkpointing.interval"] is not None
env = Environment({key: value for key, value in conf.items() if value is not None})  # None: unset
how = os.environ["COLLECT_HOW"]
# ordered=True needs a source that knows each record's position (no checkpoint gate then)
source = env.from_sequence(1, 2000) if how == "ordered" else env.from_source(Numbers(), name="numbers")
stream = source.map_batches(Flaky(), batch_size=16, name="model")
if how == "batch":
    out = [int(x) for x in stream.execute_and_collect_batch()]
else:
    out = [int(x) for x in stream.execute_and_collect(ordered=how == "ordered")]
print(json.dumps(out))
"""


def run_job(tmp_path: Path, conf: dict[str, Any], *, how: str = "list", fail: str = "raise",
            cluster: str | None = None, env: dict[str, str] | None = None) -> tuple[list[int], str]:
    """Run :data:`JOB` with ``accelflow run`` (on ``cluster`` if given): (the records it
    printed, its stderr)."""
    script = tmp_path / "job.py"
    script.write_text(JOB, encoding="utf-8")
    run_env = {**(env or os.environ), "JOB_CONF": json.dumps(conf), "COLLECT_HOW": how, "FAIL_HOW": fail,
               "FAIL_MARKER": str(tmp_path / "failed")}
    where = ["--cluster", cluster] if cluster else []
    out = subprocess.run([sys.executable, "-m", "accelflow", "run", *where, str(script)], env=run_env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "failed").exists()  # it did fail once
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def restored_a_checkpoint(tmp_path: Path) -> bool:
    """Whether the job went back to a checkpoint: some batches were processed twice, but
    not a split's first (1 and 1001); then records were collected before it."""
    batches = Counter(int(line) for line in (tmp_path / "failed.batches").read_text().split())
    return max(batches.values()) > 1 and batches[1] == batches[N // 2 + 1] == 1


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
