"""``FileSink`` on real files: parts appear only when committed, each record exactly once
across crashes and restores, and hidden parts never look like committed ones."""

from __future__ import annotations

import os
import pickle
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from accelflow._errors import ConfigError, JobError
from accelflow.connectors.files import FileCommittable, FileSink
from accelflow.dataflow import Columns, RuntimeContext


def _ctx(index: int = 0, attempt: int = 0) -> RuntimeContext:
    return RuntimeContext(
        task_name="sink", index_of_this_subtask=index, number_of_parallel_subtasks=2,
        attempt_number=attempt, assigned={}, taskexecutor_infos={}, taskexecutor_id="te-1",
    )


_OPENED: list[FileSink[Any]] = []


@pytest.fixture(autouse=True)
def _close_opened_sinks() -> Iterator[None]:
    """Close what a test left open (as the runtime does), so no file handle leaks."""
    yield
    while _OPENED:
        _OPENED.pop().close()


def _opened(directory: Path, index: int = 0, **kwargs: Any) -> FileSink[Any]:
    sink: FileSink[Any] = FileSink(directory, **kwargs)
    sink.open(_ctx(index))
    _OPENED.append(sink)
    return sink


def _visible(directory: Path, pattern: str = "part-*") -> list[Path]:
    return sorted(directory.glob(pattern))


def _hidden(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.name.startswith("."))


def _lines(directory: Path) -> list[str]:
    return sorted(line for p in _visible(directory) for line in p.read_text().splitlines())


def test_parts_appear_only_when_committed(tmp_path: Path) -> None:
    out = tmp_path / "out"  # created at open
    sink = _opened(out, suffix=".txt")
    sink.write([1, 2])
    sink.write(["three"])

    assert _visible(out) == []
    committables = sink.prepare_commit(1)
    assert _visible(out) == []
    assert [Path(c.hidden).name.startswith(".") for c in committables] == [True]

    sink.commit(committables)
    (part,) = _visible(out)
    assert part.read_text() == "1\n2\nthree\n"
    assert part.name.endswith("-0-0.txt")
    assert _hidden(out) == []
    sink.close()
    assert part.exists()


def test_hidden_parts_never_match_the_final_pattern(tmp_path: Path) -> None:
    sink = _opened(tmp_path, rolling_size=4)
    sink.write(["abc", "def", "g"])  # two pending parts and one in progress
    sink.prepare_commit(1)
    sink.write(["x"])

    hidden = _hidden(tmp_path)
    assert len(hidden) == 4
    assert _visible(tmp_path) == [] and _visible(tmp_path, "part*") == []
    assert all(p.name.startswith(".part-") and p.name.endswith(".inprogress") for p in hidden)
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o644 & ~_umask() for p in hidden)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_names_are_unique_across_attempts_and_runs(tmp_path: Path) -> None:
    first, second = _opened(tmp_path), _opened(tmp_path)  # same subtask index, same directory
    first.write(["a"])
    second.write(["b"])
    first.commit(first.prepare_commit(1))
    second.commit(second.prepare_commit(1))

    parts = _visible(tmp_path)
    assert len(parts) == 2
    assert sorted(p.read_text() for p in parts) == ["a\n", "b\n"]


def test_rolls_by_size(tmp_path: Path) -> None:
    sink = _opened(tmp_path, rolling_size=10)
    sink.write([f"r{i:03d}" for i in range(5)])  # 5 bytes a line: 2 lines a part

    committables = sink.prepare_commit(1)
    sink.commit(committables)
    sizes = [p.stat().st_size for p in sorted(_visible(tmp_path), key=lambda p: int(p.name.rsplit("-", 1)[1]))]
    assert sizes == [10, 10, 5]
    assert _lines(tmp_path) == [f"r{i:03d}" for i in range(5)]


def test_rolls_by_age_at_a_write(tmp_path: Path) -> None:
    now = [100.0]
    sink = _opened(tmp_path, rolling_interval=5, clock=lambda: now[0])
    sink.write(["a"])
    now[0] += 4.9
    sink.write(["b"])  # same part: not old enough
    now[0] += 0.1
    sink.write(["c"])  # the part is 5 s old: it rolls first

    committables = sink.prepare_commit(1)
    assert len(committables) == 2
    sink.commit(committables)
    assert sorted(p.read_text() for p in _visible(tmp_path)) == ["a\nb\n", "c\n"]


def test_prepare_with_nothing_written_returns_nothing(tmp_path: Path) -> None:
    sink = _opened(tmp_path)
    assert sink.prepare_commit(1) == []
    sink.write([])
    assert sink.prepare_commit(2) == []
    sink.write(["a"])
    assert len(sink.prepare_commit(3)) == 1
    assert sink.prepare_commit(4) == []
    assert _hidden(tmp_path) != [] and _visible(tmp_path) == []


def test_commit_is_idempotent_also_on_a_new_instance(tmp_path: Path) -> None:
    sink = _opened(tmp_path)
    sink.write(["a", "b"])
    committables = sink.prepare_commit(1)
    sink.commit(committables)
    sink.commit(committables)
    FileSink(tmp_path).commit(committables)  # never opened: commit needs only the committables

    assert _lines(tmp_path) == ["a", "b"]


def test_close_removes_only_what_no_checkpoint_holds(tmp_path: Path) -> None:
    sink = _opened(tmp_path, rolling_size=2)
    sink.write(["c"])
    committed = sink.prepare_commit(1)
    sink.commit(committed)
    sink.write(["p"])
    prepared = sink.prepare_commit(2)  # pending, belongs to checkpoint 2
    sink.write(["x", "y"])  # one rolled part and one in progress, in no checkpoint yet
    assert len(_hidden(tmp_path)) == 3

    sink.close()
    assert _hidden(tmp_path) == [Path(prepared[0].hidden)]
    assert _lines(tmp_path) == ["c"]
    sink.commit(prepared)  # a checkpoint completing after close still publishes it
    assert _lines(tmp_path) == ["c", "p"]


_CRASHING_WRITER = """
import os, pickle, signal, sys
import numpy as np
from accelflow.connectors.files import FileSink
from accelflow.dataflow import RuntimeContext

sink = FileSink(sys.argv[1], rolling_size=12)
sink.open(RuntimeContext(task_name="sink", index_of_this_subtask=0, number_of_parallel_subtasks=1,
                         attempt_number=0, assigned={}, taskexecutor_infos={}, taskexecutor_id="te"))
sink.write(list(range(10)))
checkpoint_1 = (sink.prepare_commit(1), sink.snapshot_state(1))
with open(sys.argv[2], "wb") as f:
    pickle.dump(checkpoint_1, f)
sink.write(np.arange(10, 15))
sink.prepare_commit(2)  # checkpoint 2 never completes
sink.snapshot_state(2)
sink.write([15, 16, 17])
os.kill(os.getpid(), signal.SIGKILL)
"""


def _run_until_crash(directory: Path) -> tuple[list[Any], Any]:
    """In a real process: records 0..9 in checkpoint 1 (complete, not yet committed), 10..14
    in checkpoint 2 (never completes), 15..17 in progress; then SIGKILL (no close)."""
    saved = directory.parent / "checkpoint-1.pickle"
    done = subprocess.run([sys.executable, "-c", _CRASHING_WRITER, str(directory), str(saved)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGKILL, done.stderr
    committables, state = pickle.loads(saved.read_bytes())
    return list(committables), state


def test_crash_between_prepare_and_commit_publishes_every_record_once(tmp_path: Path) -> None:
    out = tmp_path / "out"
    committables, state = _run_until_crash(out)
    old = set(_hidden(out))
    assert len(old) == 5  # checkpoint 1's 2 parts, checkpoint 2's 2 parts, 1 in progress

    restored = _opened(out)
    restored.restore_state(state)
    restored.commit(committables)
    restored.write([str(i) for i in range(10, 20)])  # replayed from checkpoint 1
    restored.commit(restored.prepare_commit(3))

    assert _lines(out) == sorted(str(i) for i in range(20))
    assert old & set(_hidden(out)) == set()  # the dead attempt's leftovers are gone
    assert _hidden(out) == []


def test_restore_keeps_parts_prepared_after_the_snapshot_was_taken(tmp_path: Path) -> None:
    """If a barrier snapshots the state before it prepares, the parts it then prepares are
    kept: a restore must never delete what the restored checkpoint will commit."""
    sink = _opened(tmp_path, rolling_size=4)
    sink.write(["abc", "d"])  # one rolled part, one in progress
    state = sink.snapshot_state(1)
    committables = sink.prepare_commit(1)

    _opened(tmp_path).restore_state([state])  # committed only after the restore
    FileSink(tmp_path).commit(committables)
    assert _lines(tmp_path) == ["abc", "d"]


def test_restore_touches_neither_other_subtasks_nor_other_runs(tmp_path: Path) -> None:
    mine, other = _opened(tmp_path, 0), _opened(tmp_path, 1)
    state = mine.snapshot_state(1)
    mine.write(["garbage"])
    other.write(["live"])
    assert FileSink.cleanup(tmp_path, prefix="other") == []  # another prefix: nothing of ours

    _opened(tmp_path, 0).restore_state(state)
    (left,) = _hidden(tmp_path)
    assert left.name.endswith("-1-0.inprogress")  # subtask 1's part, still being written
    other.commit(other.prepare_commit(2))
    assert _lines(tmp_path) == ["live"]


def test_restore_without_state_and_unchanged_sinks(tmp_path: Path) -> None:
    sink = _opened(tmp_path)
    sink.restore_state(None)
    with pytest.raises(ConfigError, match="not a FileSink's"):
        sink.restore_state({"offset": 3})


def test_cleanup_removes_hidden_parts_only(tmp_path: Path) -> None:
    sink = _opened(tmp_path, rolling_size=2)
    sink.write(["a", "b"])
    sink.commit(sink.prepare_commit(1)[:1])
    (tmp_path / ".unrelated.inprogress").write_text("keep")

    removed = FileSink.cleanup(tmp_path)
    assert [Path(p).name.endswith("-0-1.inprogress") for p in removed] == [True]
    assert _lines(tmp_path) == ["a"]
    assert (tmp_path / ".unrelated.inprogress").exists()


def test_a_deleted_pending_part_fails_the_commit_naming_it(tmp_path: Path) -> None:
    sink = _opened(tmp_path)
    sink.write(["a"])
    (committable,) = sink.prepare_commit(1)
    os.unlink(committable.hidden)

    with pytest.raises(JobError, match="records are lost") as info:
        sink.commit([committable])
    assert committable.hidden in str(info.value)


def test_a_planted_symlink_is_never_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    sink = _opened(tmp_path / "out")
    sink.write(["a"])
    (first,) = sink.prepare_commit(1)
    next_part = first.hidden.replace("-0-0.inprogress", "-0-1.inprogress")
    os.symlink(victim, next_part)

    with pytest.raises(FileExistsError):
        sink.write(["b"])
    assert victim.read_text() == "precious"


def test_numpy_rows_and_a_custom_encoder(tmp_path: Path) -> None:
    sink = _opened(tmp_path, encoder=lambda row: ",".join(str(v) for v in row), suffix=".csv")
    sink.write(np.arange(6).reshape(3, 2))
    sink.write(Columns([np.array([7]), np.array([8])]))
    sink.commit(sink.prepare_commit(1))

    (part,) = _visible(tmp_path, "part-*.csv")
    assert part.read_text() == "0,1\n2,3\n4,5\n7,8\n"


def test_an_encoder_that_returns_no_str_names_the_record_type(tmp_path: Path) -> None:
    sink = _opened(tmp_path, encoder=lambda r: r)
    with pytest.raises(TypeError, match=r"must return str, got bytes for a record of type bytes"):
        sink.write([b"raw"])


def test_the_sink_pickles_before_open(tmp_path: Path) -> None:
    sink = pickle.loads(pickle.dumps(FileSink(tmp_path, rolling_interval=3)))
    sink.open(_ctx())
    sink.write([1])
    sink.commit(sink.prepare_commit(1))
    assert _lines(tmp_path) == ["1"]


def test_a_directory_that_is_a_file_is_named(tmp_path: Path) -> None:
    target = tmp_path / "out"
    target.write_text("")
    with pytest.raises(ConfigError, match="is not a directory") as info:
        FileSink(target)
    assert info.value.keys == ("FileSink(directory=)",)
    assert str(target) in str(info.value)


def test_a_directory_that_becomes_a_file_before_open_is_named(tmp_path: Path) -> None:
    sink: FileSink[Any] = FileSink(tmp_path / "out")
    (tmp_path / "out").write_text("")
    with pytest.raises(ConfigError, match="is not a directory"):
        sink.open(_ctx())


@pytest.mark.parametrize(("kwargs", "key"), [
    ({"prefix": ".part"}, "prefix"),
    ({"prefix": "a/b"}, "prefix"),
    ({"prefix": ""}, "prefix"),
    ({"suffix": "/x"}, "suffix"),
    ({"encoder": "str"}, "encoder"),
    ({"rolling_size": 0}, "rolling_size"),
    ({"rolling_size": True}, "rolling_size"),
    ({"rolling_interval": 0}, "rolling_interval"),
    ({"rolling_interval": float("nan")}, "rolling_interval"),
])
def test_bad_arguments_are_named(tmp_path: Path, kwargs: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        FileSink(tmp_path, **kwargs)
    assert info.value.keys == (f"FileSink({key}=)",)


def test_commit_rejects_what_prepare_commit_never_returns(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="expected \\(hidden path, final path\\) pairs"):
        FileSink(tmp_path).commit(["/tmp/x"])
    assert FileCommittable("a", "b") == ("a", "b")
