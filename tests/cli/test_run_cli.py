"""``accelflow run``: options before the script reach accelflow; after it, the script gets them
and accelflow warns (one line naming the option), so no command line loses its config."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from accelflow.cli._run import misplaced_options

SCRIPT = """\
import sys
from accelflow import Environment
env = Environment()
print("argv", sys.argv[1:])
print("slots", env.config.raw.get("taskmanager.numberOfTaskSlots"))
"""


def accelflow(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "ACCELFLOW_CONF"}
    return subprocess.run(
        [sys.executable, "-m", "accelflow", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False,
    )


@pytest.fixture
def job(tmp_path: Path) -> Path:
    script = tmp_path / "job.py"
    script.write_text(SCRIPT, encoding="utf-8")
    return script


def test_options_before_the_script_configure_the_job_without_a_warning(
    job: Path, tmp_path: Path
) -> None:
    done = accelflow("run", "-D", "taskmanager.numberOfTaskSlots=3", str(job), "--epochs", "2",
                     cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    assert "argv ['--epochs', '2']" in done.stdout
    assert "slots 3" in done.stdout
    assert "warning" not in done.stderr


def test_a_d_option_after_the_script_is_warned_about_on_one_line(job: Path, tmp_path: Path) -> None:
    done = accelflow("run", str(job), "-D", "taskmanager.numberOfTaskSlots=3", cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    assert "argv ['-D', 'taskmanager.numberOfTaskSlots=3']" in done.stdout  # the script's
    assert "slots None" in done.stdout  # not accelflow's
    (line,) = done.stderr.splitlines()
    assert line.startswith("accelflow: warning: '-D taskmanager.numberOfTaskSlots=3' comes after "
                           "the job script")
    assert "put it before the script" in line


@pytest.mark.parametrize(
    ("after", "named"),
    [
        (["--conf", "job.yaml"], "'--conf job.yaml'"),
        (["--conf=job.yaml"], "'--conf=job.yaml'"),
        (["--cluster", "http://127.0.0.1:8081"], "'--cluster http://127.0.0.1:8081'"),
        (["-Dexecution.target=ray"], "'-Dexecution.target=ray'"),
    ],
)
def test_every_accelflow_option_after_the_script_is_named(
    job: Path, tmp_path: Path, after: list[str], named: str
) -> None:
    done = accelflow("run", "--no-progress", str(job), *after, cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if line.startswith("accelflow: warning:")]
    assert len(warnings) == 1 and named in warnings[0], done.stderr


def test_a_double_dash_after_the_script_says_they_are_the_scripts_own(
    job: Path, tmp_path: Path
) -> None:
    done = accelflow("run", str(job), "--", "-D", "x=1", cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    assert "argv ['-D', 'x=1']" in done.stdout
    assert done.stderr == ""


def test_help_names_every_place_a_job_can_run(tmp_path: Path) -> None:
    done = accelflow("run", "--help", cwd=tmp_path)

    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    assert "--cluster URL" in text and "session cluster" in text
    assert "-D execution.target=ray" in text and "ray.address=auto" in text
    assert "embedded local cluster" in text
    assert "options go before the script" in text


def test_misplaced_options_stop_at_a_double_dash() -> None:
    assert misplaced_options(["--epochs", "3", "-D", "a=b", "--", "--conf", "x"]) == ["-D a=b"]
    assert misplaced_options(["--no-progress", "--confirm", "-D"]) == ["--no-progress", "-D"]


RESOURCE_SCRIPT = """\
from accelflow import Environment
env = Environment({"external-resources": "fpga"})
print("amount", env.config.external_resources["fpga"].amount)
"""


def test_a_d_override_of_a_resource_the_script_lists_is_applied_without_a_warning(tmp_path: Path) -> None:
    """17.8: the warning is about the merged config, not about the -D layer alone."""
    script = tmp_path / "fpga_job.py"
    script.write_text(RESOURCE_SCRIPT, encoding="utf-8")
    done = accelflow("run", "-D", "external-resource.fpga.amount=3", str(script), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "amount 3" in done.stdout
    assert "not listed" not in done.stderr


def test_a_key_of_a_resource_nobody_lists_still_warns_once(tmp_path: Path, job: Path) -> None:
    done = accelflow("run", "-D", "external-resource.tpu.amount=3", str(job), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("external-resource.tpu.amount: resource 'tpu' is not listed") == 1


def test_a_directory_is_named_as_one_not_as_a_missing_script(tmp_path: Path) -> None:
    empty = tmp_path / "jobs"
    empty.mkdir()
    done = accelflow("run", "jobs", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == ("accelflow: config error: accelflow run jobs: is a directory, not a job "
                           "script; give the script itself (e.g. accelflow run jobs/job.py)\n")
    for name in ("b.py", "a.py", "notes.txt"):
        (empty / name).write_text("", encoding="utf-8")
    done = accelflow("run", str(empty), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == (f"accelflow: config error: accelflow run {empty}: is a directory, not a "
                           "job script; give the script itself (one of a.py, b.py in it)\n")
    missing = accelflow("run", "nope.py", cwd=tmp_path)
    assert missing.returncode == 2
    assert missing.stderr == "accelflow: config error: accelflow run nope.py: no such job script\n"


BROKEN = """\
import helper


def build():
    helper.fail("bad top level")


build()
"""


def test_an_error_of_the_script_shows_only_the_users_frames_as_python_does(tmp_path: Path) -> None:
    (tmp_path / "helper.py").write_text("def fail(why):\n    raise ValueError(why)\n", encoding="utf-8")
    script = tmp_path / "job.py"
    script.write_text(BROKEN, encoding="utf-8")
    python = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
                            timeout=60, check=False)
    done = accelflow("run", str(script), cwd=tmp_path)
    assert done.returncode == python.returncode == 1
    assert done.stderr == python.stderr  # the script's frames and the helper's, nothing of ours
    assert done.stderr.startswith(f'Traceback (most recent call last):\n  File "{script}", line 8, in <module>\n')
    assert done.stderr.endswith("ValueError: bad top level\n")

    script.write_text("def broken(:\n", encoding="utf-8")
    python = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
                            timeout=60, check=False)
    done = accelflow("run", str(script), cwd=tmp_path)
    assert done.returncode == python.returncode == 1
    assert done.stderr == python.stderr and "SyntaxError" in done.stderr


def test_a_heartbeat_interval_over_the_timeout_is_a_config_error_before_the_script_runs(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text("open('ran', 'w').close()\n", encoding="utf-8")
    done = accelflow("run", "-D", "heartbeat.interval=5s", "-D", "heartbeat.timeout=2s", str(script), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("accelflow: config error: heartbeat.interval (from -D): heartbeat.interval (5 s) "
                                  "must be smaller than heartbeat.timeout (2 s)"), done.stderr
    assert not (tmp_path / "ran").exists()
