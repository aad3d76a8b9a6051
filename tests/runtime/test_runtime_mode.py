"""``execution.runtime-mode``: ``streaming`` by default, as Flink (review finding 4), so a
PyFlink program ported by changing its imports gives PyFlink's records; ``batch`` (and
``automatic`` with bounded sources) emit one final value per key. And keys compare with
Python's ``==`` and ``hash`` (finding 11): 1, 1.0 and True are one key.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from accelflow import Environment

DATA = [("a", 3, 1), ("a", 1, 2), ("a", 2, 3)]
# What PyFlink 2.3.0 emits for key_by(lambda x: x[0]).min(1) / .min_by(1) over DATA with its
# default runtime mode (STREAMING): one running value per record. `min` keeps the other fields
# of the key's first record, `min_by` is the whole record holding the minimum.
PYFLINK = {
    "min": [("a", 3, 1), ("a", 1, 1), ("a", 1, 1)],
    "min_by": [("a", 3, 1), ("a", 1, 2), ("a", 1, 2)],
}


def _aggregated(how: str, conf: dict[str, Any]) -> list[Any]:
    env = Environment({"parallelism.default": 1, **conf})
    keyed = env.from_collection(DATA).key_by(lambda r: r[0])
    return list(getattr(keyed, how)(1).execute_and_collect())


@pytest.mark.parametrize("how", ["min", "min_by"])
def test_by_default_a_bounded_input_gives_pyflinks_running_values(how: str) -> None:
    assert _aggregated(how, {}) == PYFLINK[how]


@pytest.mark.parametrize("mode", ["batch", "automatic"])
@pytest.mark.parametrize("how", ["min", "min_by"])
def test_batch_gives_one_final_value_per_key(how: str, mode: str) -> None:
    assert _aggregated(how, {"execution.runtime-mode": mode}) == PYFLINK[how][-1:]


JOB = f"""\
from accelflow import Environment
env = Environment({{"parallelism.default": 1}})
for record in env.from_collection({DATA!r}).key_by(lambda r: r[0]).min_by(1).execute_and_collect():
    print("record", record)
"""


def test_the_cli_runs_streaming_by_default_and_batch_with_d(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(JOB, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "ACCELFLOW_CONF"}

    def records(*options: str) -> list[str]:
        done = subprocess.run([sys.executable, "-m", "accelflow", "run", *options, str(script)],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
                              check=False)
        assert done.returncode == 0, done.stderr
        return [line for line in done.stdout.splitlines() if line.startswith("record ")]

    assert records() == [f"record {r!r}" for r in PYFLINK["min_by"]]
    assert records("-D", "execution.runtime-mode=batch") == [f"record {PYFLINK['min_by'][-1]!r}"]


def test_keys_equal_in_python_are_one_key() -> None:
    """Keys group by Python's ``==`` and ``hash``: 1, 1.0, True and NumPy's 1s are one key
    (Flink compares serialized bytes, so there an Integer 1 and a Double 1.0 are two keys);
    the string "1" is another. They reach one reducer from both source subtasks."""
    records = [(1, "int"), (1.0, "float"), (True, "bool"), (np.int64(1), "int64"),
               (np.float32(1.0), "float32"), ("1", "str")]
    env = Environment({"parallelism.default": 2, "execution.runtime-mode": "batch"})
    out = (env.from_collection(records, parallelism=2).key_by(lambda r: r[0])
           .reduce(lambda a, b: (a[0], f"{a[1]},{b[1]}")).execute_and_collect())
    assert sorted(sorted(labels.split(",")) for _, labels in out) == [
        ["bool", "float", "float32", "int", "int64"], ["str"]]


@pytest.mark.parametrize("one", [-1, 2**61, 2**64], ids=["minus-one", "2**61", "2**64"])
def test_equal_numbers_of_every_type_hash_alike(one: int) -> None:
    """Where ``int(k)`` and ``hash(k)`` differ (-1 hashes to -2; Python reduces large numbers
    modulo 2**61-1), an int and its float or NumPy twin still land in one key group, so they
    meet at one reducer at every parallelism (at 8, -1 and -1.0 used to reach two)."""
    from accelflow.runtime.subtask._keys import stable_hash

    twins = [one, float(one)] + ([np.int64(one), np.float64(one)] if abs(one) < 2**63 else [])
    assert len({stable_hash(k) for k in twins}) == 1
    assert len({stable_hash((k, "x")) for k in twins}) == 1
    env = Environment({"parallelism.default": 8, "execution.runtime-mode": "batch"})
    out = (env.from_collection([(k, 1) for k in twins], parallelism=2).key_by(lambda r: r[0])
           .sum(1).execute_and_collect())
    assert [n for _, n in out] == [len(twins)]
