"""A value of the wrong type given to the API is a ConfigError naming the operator (or
argument) and what it accepts (issue 25.8), not a raw ``TypeError`` from accelflow's frames."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from accelflow import ConfigError, Environment


@pytest.mark.parametrize(("build", "key", "says"), [
    (lambda env: env.from_collection(42), "operator 'collection'",
     "from_collection needs the records as an iterable (a list, a tuple, a generator...) or a NumPy "
     "array, got int (42); for one record pass a list: [record]"),
    (lambda env: env.from_collection(None, name="rows"), "operator 'rows'", "got NoneType (None)"),
    (lambda env: env.from_collection(np.float64(2.5)), "operator 'collection'", "got float64 ("),
    (lambda env: env.from_collection(np.array(3)), "operator 'collection'",
     "from_collection needs an array of at least one dimension (its rows are the records), "
     "got the 0-d array array(3)"),
    (lambda env: env.from_sequence(1.5, 10), "operator 'sequence'",
     "from_sequence needs integers (start and end, inclusive), got float (1.5) for start"),
    (lambda env: env.from_sequence(1, "10"), "operator 'sequence'", "got str ('10') for end"),
    (lambda env: env.from_sequence(True, 3), "operator 'sequence'", "got bool (True) for start"),
    (lambda env: env.from_sequence(1, 3).key_by(abs).sum(-1), "operator 'sum'",
     "sum() needs a field: its index in the record (an integer >= 0) or its name, got int (-1)"),
    (lambda env: env.from_sequence(1, 3).sink_to_file(42), "sink_to_file(path)",
     "needs a file path (a str or os.PathLike), got int (42)"),
    (lambda env: env.from_sequence(1, 3).map(abs, name=3), "map(name=)",
     "an operator's name must be a non-empty string, got int (3)"),
    (lambda env: env.from_sequence(1, 3).print() or env.execute(name=7), "execute(name)",
     "a job's name must be a string, got int (7)"),
])
def test_a_wrong_type_names_the_operator_and_what_it_accepts(build: Any, key: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        build(Environment())
    assert caught.value.keys == (key,)
    assert says in str(caught.value)


def test_a_yaml_path_given_as_the_config_points_at_from_yaml() -> None:
    with pytest.raises(ConfigError, match=r"Environment\(config\): needs a mapping of config keys .* "
                       r"got str \('conf.yaml'\); for a YAML file use Environment.from_yaml\(path\)"):
        Environment("conf.yaml")  # type: ignore[arg-type]


def test_numpy_integers_are_integers_for_from_sequence() -> None:
    env = Environment()
    assert env.from_sequence(np.int64(1), np.int32(3)).execute_and_collect() == [1, 2, 3]


def test_the_cli_prints_one_line_for_from_collection_of_a_number(tmp_path: Path) -> None:
    job = tmp_path / "job.py"
    job.write_text("from accelflow import Environment\nenv = Environment()\n"
                   "env.from_collection(42).print()\nenv.execute()\n", encoding="utf-8")
    done = subprocess.run([str(Path(sys.executable).with_name("accelflow")), "run", str(job)],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "accelflow: config error: operator 'collection': from_collection needs the records as an "
        "iterable (a list, a tuple, a generator...) or a NumPy array, got int (42); for one record "
        "pass a list: [record]"]
