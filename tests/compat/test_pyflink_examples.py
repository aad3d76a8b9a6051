"""PyFlink's own DataStream examples run on accelflow with only their import lines changed
(issue 30) and print what real PyFlink printed.

``pyflink_examples/`` holds the examples of ``flink-python/pyflink/examples/datastream`` (Flink
2.3.0), ported by ``scripts/pyflink-expected``, which also wrote each ``.expected`` file by
running the original with real PyFlink (CI has no PyFlink). Each example runs here as a PyFlink
user runs it, ``python example.py`` (and one through ``accelflow run``), and its stdout is
compared line for line; where PyFlink's order is not defined (several subtasks, or batch
mode's sort by serialized key) the lines are compared sorted, and the ``i> `` subtask prefix
(which subtask printed a record) is dropped.

``pyflink_snippets/`` holds PyFlink programs written for these tests around the snippets of
PyFlink's DataStream docs (intro, operators, state), kept with their ``pyflink`` imports: the
test itself rewrites every ``from pyflink.<module> import`` line to ``from accelflow import``,
as a user porting a job would, and runs the result.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parent / "pyflink_examples"
ACCELFLOW = Path(sys.executable).parent / "accelflow"
#: examples whose output order PyFlink defines: parallelism 1, streaming mode
ORDERED = {"basic_operations", "windowing/tumbling_time_window", "windowing/sliding_time_window",
           "windowing/session_with_gap_window", "windowing/session_with_dynamic_gap_window",
           "windowing/tumbling_count_window"}
NAMES = sorted(str(p.relative_to(EXAMPLES).with_suffix("")) for p in EXAMPLES.rglob("*.py"))
SNIPPETS = Path(__file__).parent / "pyflink_snippets"
ORDERED_SNIPPETS = {"collect_rows", "split_and_reduce"}
SUBTASK = re.compile(r"^\d+> ")
#: the one change a port makes, to every import line of PyFlink
PORT = re.compile(r"^from pyflink(\.\w+)* import", re.M)


def _lines(text: str, ordered: bool) -> list[str]:
    lines = [SUBTASK.sub("", line) for line in text.splitlines()]
    return lines if ordered else sorted(lines)


def _run(command: list[str], cwd: Path) -> str:
    env = {**os.environ, "PYTHONPATH": ""}
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_examples_are_ported_by_their_imports_only() -> None:
    """No code line imports pyflink, the imports are accelflow's, and the header names the
    original."""
    assert len(NAMES) == 10, NAMES
    for name in NAMES:
        text = (EXAMPLES / f"{name}.py").read_text(encoding="utf-8")
        code = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
        assert not [line for line in code if "pyflink" in line.split("#")[0] and "import" in line], name
        assert any(line.startswith("from accelflow import") for line in code), name
        assert f"flink-python/pyflink/examples/datastream/{name}.py" in text and "Apache License" in text, name


@pytest.mark.parametrize("name", NAMES)
def test_example_prints_what_pyflink_printed(name: str, tmp_path: Path) -> None:
    printed = _run([sys.executable, str(EXAMPLES / f"{name}.py")], tmp_path)
    expected = (EXAMPLES / f"{name}.expected").read_text(encoding="utf-8")
    assert _lines(printed, name in ORDERED) == _lines(expected, name in ORDERED)


@pytest.mark.parametrize("name", sorted(p.stem for p in SNIPPETS.glob("*.py")))
def test_snippet_ported_by_its_imports_prints_what_pyflink_printed(name: str, tmp_path: Path) -> None:
    original = (SNIPPETS / f"{name}.py").read_text(encoding="utf-8")
    ported = tmp_path / f"{name}.py"
    ported.write_text(PORT.sub("from accelflow import", original), encoding="utf-8")
    assert "pyflink" not in "".join(line for line in ported.read_text().splitlines() if "import" in line)
    printed = _run([sys.executable, str(ported)], tmp_path)
    expected = (SNIPPETS / f"{name}.expected").read_text(encoding="utf-8")
    assert _lines(printed, name in ORDERED_SNIPPETS) == _lines(expected, name in ORDERED_SNIPPETS)


def test_word_count_reads_and_writes_files_as_pyflink_through_the_cli(tmp_path: Path) -> None:
    """``FileSource`` of a text file, ``FileSink`` with ``OutputFileConfig`` and ``Encoder``:
    the parts hold PyFlink's lines (the input is the one the script gave PyFlink)."""
    words = tmp_path / "words.txt"
    words.write_text("to be or not to be\nthat is the question\n", encoding="utf-8")
    out = tmp_path / "out"
    _run([str(ACCELFLOW), "run", str(EXAMPLES / "word_count.py"), "--input", str(words), "--output", str(out)],
         tmp_path)
    parts = sorted(out.rglob("prefix*.ext"))
    assert parts, sorted(out.rglob("*"))
    lines = sorted(line for part in parts for line in part.read_text(encoding="utf-8").splitlines())
    expected = (EXAMPLES / "word_count.files.expected").read_text(encoding="utf-8").splitlines()
    assert lines == expected
