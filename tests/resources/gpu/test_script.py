"""Running discovery scripts: Flink's contract, every failure mode, process-group timeouts."""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
from pathlib import Path

import psutil
import pytest

from accelflow import DiscoveryError
from accelflow.resources.gpu import parse_script_output, run_discovery_script


def write_script(path: Path, body: str, *, shebang: str = "#!/bin/sh", mode: int = 0o755) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{shebang}\n{body}\n")
    path.chmod(mode)
    return path


def argv_recorder(tmp_path: Path, output: str = "0,1") -> tuple[Path, Path]:
    """A script that writes its arguments (after argv[0]) as JSON and prints ``output``."""
    record = tmp_path / "argv.json"
    script = write_script(
        tmp_path / "record.py",
        f"import json, sys\njson.dump(sys.argv[1:], open({str(record)!r}, 'w'))\nprint({output!r})",
        shebang=f"#!{sys.executable}",
    )
    return script, record


# -- the argv contract -------------------------------------------------------------------------


def test_amount_is_the_first_argument_and_nothing_is_appended_without_args(tmp_path: Path) -> None:
    script, record = argv_recorder(tmp_path)
    assert run_discovery_script(script, 2, []) == ["0", "1"]
    assert json.loads(record.read_text()) == ["2"]  # Flink appended the string "null" here


def test_args_follow_the_amount_as_separate_words(tmp_path: Path) -> None:
    script, record = argv_recorder(tmp_path)
    run_discovery_script(script, 2, ["--label", "two words", "x y", "--flag"])
    assert json.loads(record.read_text()) == ["2", "--label", "two words", "x y", "--flag"]


def test_a_path_with_spaces_runs_without_a_shell(tmp_path: Path) -> None:
    script = write_script(
        tmp_path / "dir with spaces" / "my gpu script.sh", 'echo "$1 GPUs" >&2; echo 3,4'
    )
    assert run_discovery_script(script, 2, []) == ["3", "4"]


def test_stdin_is_closed_so_a_reading_script_does_not_hang(tmp_path: Path) -> None:
    script = write_script(tmp_path / "reads.sh", "cat; echo 0")
    assert run_discovery_script(script, 1, [], timeout=20) == ["0"]


# -- output ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stdout", "expected"),
    [
        ("0,1", ["0", "1"]),
        (" 0 , 1 ,, ,2\n", ["0", "1", "2"]),
        ("0\n1\n", ["0", "1"]),  # one per line, like `nvidia-smi --query-gpu=index`
        ("", []),
        ("\n  \n", []),
        ("0:1,0:2", ["0:1", "0:2"]),  # MIG units
        ('{"name": "gpu", "addresses": ["0", "1"]}', ["0", "1"]),  # Spark's form
        ('{"name": "gpu", "addresses": [2, 3]}\n', ["2", "3"]),
        ('{"name": "gpu", "addresses": []}', []),
    ],
)
def test_output_forms(stdout: str, expected: list[str]) -> None:
    assert parse_script_output(stdout) == expected


@pytest.mark.parametrize(
    ("stdout", "message"),
    [
        ("Error: nvidia-smi not found", "'Error: nvidia-smi not found', which is not a GPU index"),
        ("0,1\ndone", "'done', which is not a GPU index"),
        ("0,-1", "'-1', which is not a GPU index"),
        ("0,1,0", "index 0 twice"),
        ('{"name": "gpu", "addresses": "0,1"}', 'without an "addresses" list'),
        ('{"name": "gpu"}', 'without an "addresses" list'),
        ('{"name": "gpu", "addresses": [', "malformed JSON"),
        ('{"name": "gpu", "addresses": ["x"]}', "'x', which is not a GPU index"),
    ],
)
def test_garbage_is_a_failure_that_quotes_the_output(stdout: str, message: str) -> None:
    with pytest.raises(DiscoveryError, match="printed") as info:
        parse_script_output(stdout, source="discover.sh")
    assert message in str(info.value)
    assert "discover.sh" in str(info.value)


def test_garbage_from_a_real_script_names_it(tmp_path: Path) -> None:
    script = write_script(tmp_path / "bad.sh", "echo 'GPU 0 is free'")
    with pytest.raises(DiscoveryError, match="'GPU 0 is free'") as info:
        run_discovery_script(script, 1, [])
    assert str(script) in str(info.value)


def test_a_huge_garbage_output_is_quoted_in_part(tmp_path: Path) -> None:
    script = write_script(tmp_path / "huge.sh", "head -c 60000 /dev/zero | tr '\\0' x")
    with pytest.raises(DiscoveryError, match="more characters") as info:
        run_discovery_script(script, 1, [])
    assert len(str(info.value)) < 2000


def test_fewer_indexes_than_the_amount_is_a_failure(tmp_path: Path) -> None:
    script = write_script(tmp_path / "one.sh", "echo 0; echo 'only one left' >&2")
    with pytest.raises(
        DiscoveryError, match=r"found 1 GPU\(s\) \['0'\] but 2 were asked for"
    ) as info:
        run_discovery_script(script, 2, [])
    assert "only one left" in str(info.value)


def test_empty_output_is_a_failure_not_an_empty_set(tmp_path: Path) -> None:
    script = write_script(tmp_path / "empty.sh", "exit 0")
    with pytest.raises(DiscoveryError, match="found 0 GPU"):
        run_discovery_script(script, 1, [])


def test_more_indexes_are_trimmed_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    script = write_script(tmp_path / "many.sh", "echo 5,3,1,0")
    with caplog.at_level(logging.WARNING, logger="accelflow.resources.gpu"):
        assert run_discovery_script(script, 2, []) == ["5", "3"]
    assert "returned 4 GPUs" in caplog.text and "keeping the first 2" in caplog.text


# -- failures -----------------------------------------------------------------------------------------


def test_non_zero_exit_carries_stderr(tmp_path: Path) -> None:
    script = write_script(
        tmp_path / "fails.sh",
        'if [ "$2" = "--exit-non-zero" ]; then echo "no driver loaded" >&2; exit 3; fi; echo 0,1',
    )
    assert run_discovery_script(script, 2, []) == ["0", "1"]
    with pytest.raises(DiscoveryError, match="exited with code 3; its stderr: no driver loaded"):
        run_discovery_script(script, 2, ["--exit-non-zero"])


def test_non_zero_exit_without_stderr_shows_stdout(tmp_path: Path) -> None:
    script = write_script(
        tmp_path / "flink-style.sh", 'echo "Could not get enough GPU resources."; exit 1'
    )
    with pytest.raises(
        DiscoveryError, match="no stderr; its stdout: 'Could not get enough GPU resources.'"
    ):
        run_discovery_script(script, 1, [])


def test_a_script_killed_by_a_signal_says_so(tmp_path: Path) -> None:
    script = write_script(tmp_path / "killed.sh", "kill -9 $$")
    with pytest.raises(DiscoveryError, match="was killed by SIGKILL"):
        run_discovery_script(script, 1, [])


def test_a_script_that_became_unrunnable_is_a_discovery_error(tmp_path: Path) -> None:
    gone = tmp_path / "gone.sh"
    with pytest.raises(DiscoveryError, match="cannot run discovery script"):
        run_discovery_script(gone, 1, [])
    no_shebang = tmp_path / "no-shebang"
    no_shebang.write_bytes(b"\x00\x01\x02binary")
    no_shebang.chmod(0o755)
    with pytest.raises(DiscoveryError, match="not a program"):
        run_discovery_script(no_shebang, 1, [])
    locked = write_script(tmp_path / "locked.sh", "echo 0", mode=0o644)
    with pytest.raises(DiscoveryError, match="not executable"):
        run_discovery_script(locked, 1, [])


def test_a_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    child_pid_file = tmp_path / "child.pid"
    script = write_script(
        tmp_path / "hangs.sh",
        f"sleep 300 &\necho $! > '{child_pid_file}'\nwait",
    )
    with pytest.raises(
        DiscoveryError, match=r"did not finish within 1 s \(param.discovery-script.timeout\)"
    ):
        run_discovery_script(script, 1, [], timeout=1.0)
    child = _process_or_none(int(child_pid_file.read_text()))
    if child is not None:  # killed; give the kernel a moment to finish it
        _, alive = psutil.wait_procs([child], timeout=10)
        assert not alive, f"the script's child {child.pid} survived the timeout"


def _process_or_none(pid: int) -> psutil.Process | None:
    try:
        process = psutil.Process(pid)
        return None if process.status() == psutil.STATUS_ZOMBIE else process
    except psutil.NoSuchProcess:
        return None


def test_a_chatty_script_does_not_block(tmp_path: Path) -> None:
    # 4 MiB on stderr, far beyond a pipe buffer, so reading only after exit would deadlock;
    # stdout stays under its bound (a long output of blanks is still allowed up to it)
    script = write_script(
        tmp_path / "chatty.py",
        "import sys\nsys.stderr.write('e' * (4 << 20))\nsys.stdout.write(' ' * 60000 + '0,1')",
        shebang=f"#!{sys.executable}",
    )
    assert run_discovery_script(script, 2, [], timeout=30) == ["0", "1"]


def test_the_environment_is_inherited(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_GPUS", "6,7")
    script = write_script(tmp_path / "env.sh", 'echo "$MY_GPUS"')
    assert run_discovery_script(script, 2, []) == ["6", "7"]
    assert os.environ["MY_GPUS"] == "6,7"


# -- unbounded output, escaped helpers --------------------------------------------------------------


def test_megabytes_of_zeros_are_refused_not_read_as_one_index(tmp_path: Path) -> None:
    script = write_script(tmp_path / "zeros.sh", "head -c 10000000 /dev/zero | tr '\\0' 0")
    with pytest.raises(DiscoveryError, match="printed more than 64 KiB on stdout") as info:
        run_discovery_script(script, 1, [], timeout=60)
    assert len(str(info.value)) < 1000


@pytest.mark.parametrize(
    ("stdout", "expected"),
    [("007,01", ["7", "1"]), ("00", ["0"]), ("0:01,1:000", ["0:1", "1:0"]), ("000999999", ["999999"])],
)
def test_leading_zeros_are_normalised(stdout: str, expected: list[str]) -> None:
    assert parse_script_output(stdout) == expected


@pytest.mark.parametrize(
    ("stdout", "message"),
    [
        ("1" * 38, "not a GPU index"),
        ("1000000", "not a GPU index"),
        ("0" * 5000, "not a GPU index"),
        ("1,01", "printed index 1 twice"),
        ("٣", "not a GPU index"),  # a non-ASCII digit
    ],
)
def test_overlong_or_disguised_indexes_are_refused(stdout: str, message: str) -> None:
    with pytest.raises(DiscoveryError, match=message) as info:
        parse_script_output(stdout)
    assert len(str(info.value)) < 1500


def test_a_huge_index_list_makes_a_short_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    script = write_script(tmp_path / "many.sh", "seq -s, 0 9999")  # ~49 KB, under the bound
    with caplog.at_level(logging.WARNING, logger="accelflow.resources.gpu"):
        assert run_discovery_script(script, 1, [], timeout=60) == ["0"]
    [record] = caplog.records
    assert "returned 10000 GPUs" in record.getMessage() and "(9984 more)" in record.getMessage()
    assert len(record.getMessage()) < 500


@pytest.mark.skipif(not shutil.which("setsid"), reason="needs setsid(1)")
def test_a_timeout_kills_helpers_that_left_the_session(tmp_path: Path) -> None:
    """``setsid`` helpers left the process group, so ``killpg`` missed them while the error
    said every process was killed; the second one is also orphaned (a double fork)."""
    direct, orphan = tmp_path / "direct.pid", tmp_path / "orphan.pid"
    script = write_script(
        tmp_path / "escapes.sh",
        f"setsid sleep 300 &\necho $! > '{direct}'\n"
        f"(setsid sleep 301 & echo $! > '{orphan}')\nsleep 300",
    )
    with pytest.raises(DiscoveryError, match=r"within 1 s") as info:
        run_discovery_script(script, 1, [], timeout=1.0)
    helpers = [int(direct.read_text()), int(orphan.read_text())]
    for pid in helpers:
        assert str(pid) in str(info.value)  # the message names what was killed
        helper = _process_or_none(pid)
        if helper is not None:
            _, alive = psutil.wait_procs([helper], timeout=10)
            assert not alive, f"helper {pid} started with setsid survived the timeout"
    assert "still running" not in str(info.value)


def test_a_bare_name_is_looked_up_on_path_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from accelflow.resources.gpu._script import find_on_path

    bin_dir = tmp_path / "bin"
    planted = write_script(tmp_path / "work" / "discover", "echo 9")  # in the working directory
    monkeypatch.chdir(planted.parent)
    assert find_on_path("discover", {"PATH": f".{os.pathsep}{os.pathsep}{bin_dir}"}) is None
    real = write_script(bin_dir / "discover", "echo 0")
    assert find_on_path("discover", {"PATH": f".{os.pathsep}{bin_dir}"}) == real
    with pytest.raises(ValueError, match="is a path"):
        find_on_path("./discover", {"PATH": str(bin_dir)})
