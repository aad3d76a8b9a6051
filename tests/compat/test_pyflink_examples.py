"""PyFlink's own DataStream examples run on accelflow with only their import lines changed
(issue 30) and print what real PyFlink printed.

The examples are those of ``flink-python/pyflink/examples/datastream`` in the apache-flink
2.3.0 release, read from its wheel on PyPI (``pyflink_source.py``: Flink's code is not copied
here) and ported by rewriting their import lines, as a user porting a job would. Each
``pyflink_examples/<name>.expected`` is what real PyFlink printed running the original
(``scripts/pyflink-expected``; CI has no PyFlink). Each example runs here as a PyFlink user
runs it, ``python example.py`` (and one through ``accelflow run``), and its stdout is compared
line for line; where PyFlink's order is not defined (several subtasks, or batch mode's sort by
serialized key) the lines are compared sorted, and the ``i> `` subtask prefix (which subtask
printed a record) is dropped.

``pyflink_snippets/`` holds PyFlink programs written for these tests around the snippets of
PyFlink's DataStream docs (intro, operators, state), kept with their ``pyflink`` imports and
ported the same way.
"""

from __future__ import annotations

import difflib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pyflink_source import PORT, examples_dir, port

EXPECTED = Path(__file__).parent / "pyflink_examples"
ACCELFLOW = Path(sys.executable).parent / "accelflow"
#: examples whose output order PyFlink defines: parallelism 1, streaming mode
ORDERED = {"basic_operations", "windowing/tumbling_time_window", "windowing/sliding_time_window",
           "windowing/session_with_gap_window", "windowing/session_with_dynamic_gap_window",
           "windowing/tumbling_count_window"}
NAMES = sorted(str(p.relative_to(EXPECTED)).removesuffix(".expected") for p in EXPECTED.rglob("*.expected")
               if not p.name.endswith(".files.expected"))
SNIPPETS = Path(__file__).parent / "pyflink_snippets"
ORDERED_SNIPPETS = {"collect_rows", "split_and_reduce"}
SUBTASK = re.compile(r"^\d+> ")


@pytest.fixture(scope="module")
def originals() -> Path:
    """PyFlink's examples, as its release ships them."""
    return examples_dir()


def _ported(originals: Path, name: str, tmp: Path) -> Path:
    ported = tmp / f"{Path(name).name}.py"
    ported.write_text(port((originals / f"{name}.py").read_text(encoding="utf-8")), encoding="utf-8")
    return ported


def _lines(text: str, ordered: bool) -> list[str]:
    lines = [SUBTASK.sub("", line) for line in text.splitlines()]
    return lines if ordered else sorted(lines)


def _run(command: list[str], cwd: Path) -> str:
    env = {**os.environ, "PYTHONPATH": ""}
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_examples_are_ported_by_their_imports_only(originals: Path, tmp_path: Path) -> None:
    """Every line a port changes is one of PyFlink's import lines, and none is left."""
    assert len(NAMES) == 10, NAMES
    for name in NAMES:
        original = (originals / f"{name}.py").read_text(encoding="utf-8").splitlines()
        ported = _ported(originals, name, tmp_path).read_text(encoding="utf-8").splitlines()
        changed = [line for line in difflib.ndiff(original, ported) if line[:2] in ("- ", "+ ")]
        assert changed and all(re.match(r"[-+] from (pyflink(\.\w+)*|accelflow) import", line)
                               for line in changed), (name, changed)
        assert not [line for line in ported if PORT.match(line) or line.startswith("import pyflink")], name


@pytest.mark.parametrize("name", NAMES)
def test_example_prints_what_pyflink_printed(name: str, originals: Path, tmp_path: Path) -> None:
    printed = _run([sys.executable, str(_ported(originals, name, tmp_path))], tmp_path)
    expected = (EXPECTED / f"{name}.expected").read_text(encoding="utf-8")
    assert _lines(printed, name in ORDERED) == _lines(expected, name in ORDERED)


@pytest.mark.parametrize("name", sorted(p.stem for p in SNIPPETS.glob("*.py")))
def test_snippet_ported_by_its_imports_prints_what_pyflink_printed(name: str, tmp_path: Path) -> None:
    original = (SNIPPETS / f"{name}.py").read_text(encoding="utf-8")
    ported = tmp_path / f"{name}.py"
    ported.write_text(port(original), encoding="utf-8")
    assert "pyflink" not in "".join(line for line in ported.read_text().splitlines() if "import" in line)
    printed = _run([sys.executable, str(ported)], tmp_path)
    expected = (SNIPPETS / f"{name}.expected").read_text(encoding="utf-8")
    assert _lines(printed, name in ORDERED_SNIPPETS) == _lines(expected, name in ORDERED_SNIPPETS)


def test_word_count_reads_and_writes_files_as_pyflink_through_the_cli(originals: Path, tmp_path: Path) -> None:
    """``FileSource`` of a text file, ``FileSink`` with ``OutputFileConfig`` and ``Encoder``:
    the parts hold PyFlink's lines (the input is the one the script gave PyFlink)."""
    words = tmp_path / "words.txt"
    words.write_text("to be or not to be\nthat is the question\n", encoding="utf-8")
    out = tmp_path / "out"
    _run([str(ACCELFLOW), "run", str(_ported(originals, "word_count", tmp_path)), "--input", str(words), "--output", str(out)],
         tmp_path)
    parts = sorted(out.rglob("prefix*.ext"))
    assert parts, sorted(out.rglob("*"))
    lines = sorted(line for part in parts for line in part.read_text(encoding="utf-8").splitlines())
    expected = (EXPECTED / "word_count.files.expected").read_text(encoding="utf-8").splitlines()
    assert lines == expected
