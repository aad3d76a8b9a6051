"""The session cluster's log keeps every line whole (issue 25.16): the cluster, its
TaskExecutors and their subtasks all write to it, and a subtask's ``print()`` used to land in
pieces (block-buffered: 8 KB cut mid-line; with ``PYTHONUNBUFFERED``: each argument, space and
newline apart), so lines of parallel subtasks ran into each other and a line lost its newline
before the next writer's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from rest_support import Session, _environment, cli, gpu_definitions

N = 3000
PRINTER = """\
from accelflow import Environment


def show(x):
    print("record", x, "of a user map function,", "padded to fill buffers quickly" * 2)
    return x


env = Environment()
env.from_sequence(1, %d).map(show, parallelism=2).add_sink(lambda x: None)
env.execute("printer")
""" % N
LINE = re.compile(r"^record (\d+) of a user map function, (padded to fill buffers quickly){2}$")


@pytest.mark.parametrize("unbuffered", [False, True])
def test_every_line_subtasks_print_reaches_the_log_whole(tmp_path: Path, unbuffered: bool) -> None:
    env = _environment(tmp_path, 2)
    env.pop("PYTHONUNBUFFERED", None)
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    session = Session(env, tmp_path, gpu_definitions(tmp_path))
    try:
        script = tmp_path / "job.py"
        script.write_text(PRINTER, encoding="utf-8")
        done = cli(env, "run", "--cluster", session.url, str(script), timeout=120)
        assert done.returncode == 0, done.stderr
    finally:
        session.stop()
    lines = session.log.read_text(encoding="utf-8").splitlines()
    records = [LINE.match(line) for line in lines if "record" in line]
    assert all(records), [line for line in lines if "record" in line and not LINE.match(line)][:5]
    assert sorted(int(m[1]) for m in records if m) == list(range(1, N + 1))
