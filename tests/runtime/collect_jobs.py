"""The job of the ``execute_and_collect`` failover tests (``test_collect_failover``, and the
session cluster's in ``tests/rest``), run as a user runs it: ``accelflow run [--cluster URL]``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

N = 2000

#: the reported job: subtask 2 of 2 fails once (raises or SIGKILLs itself) near its end,
#: after a checkpoint completed (when checkpointing is on); ``COLLECT_HOW`` picks the collect call, ``JOB_CONF`` adds config (None unsets a key)
JOB = """\
import json, os, signal, time
import numpy as np
from accelflow import Environment, Source

MARK, FAIL = os.environ["FAIL_MARKER"], os.environ["FAIL_HOW"]  # read here: the subtasks get the values

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
            if FAIL == "kill":
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
