"""``docs/deployment.md`` shows real output, and the deploy docstring examples hold."""

from __future__ import annotations

import doctest
import importlib
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from accelflow.cli._main import main
from accelflow.cli._run import misplaced_options
from accelflow.deploy import DEFAULT_JOB_PATH

DOC = Path(__file__).resolve().parents[2] / "docs" / "deployment.md"
_BLOCK = re.compile(r"^```(\w*)\n(.*?)^```\n", re.MULTILINE | re.DOTALL)
_FILE_HEADER = re.compile(r"# (\S+\.yaml)\n")


def _examples() -> tuple[dict[str, str], list[tuple[str, str]]]:
    """Config files the doc shows (first line ``# NAME.yaml``) and (command, output) pairs."""
    blocks = _BLOCK.findall(DOC.read_text(encoding="utf-8"))
    files = {m.group(1): body for _, body in blocks if (m := _FILE_HEADER.match(body))}
    runs = []
    for (_, body), (_, output) in zip(blocks, blocks[1:]):
        lines = body.splitlines()
        if len(lines) == 1 and lines[0].startswith("$ accelflow render") and "|" not in lines[0]:
            runs.append((lines[0][2:], output))
    return files, runs


FILES, RUNS = _examples()


def test_the_doc_has_generated_examples_for_both_managers() -> None:
    managers = [shlex.split(command)[2] for command, _ in RUNS]
    assert managers.count("kubernetes") >= 2 and managers.count("yarn") >= 2


@pytest.mark.parametrize(("command", "expected"), RUNS, ids=[c[:60] for c, _ in RUNS])
def test_each_example_is_the_commands_current_output(
    command: str,
    expected: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name, body in FILES.items():
        (tmp_path / name).write_text(body, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ACCELFLOW_CONF", raising=False)
    assert main(shlex.split(command)[1:]) == 0
    assert capsys.readouterr().out == expected


# -- the container image (issue 25, item 10) ---------------------------------------------------

_DOCKERFILE = next(body for lang, body in _BLOCK.findall(DOC.read_text(encoding="utf-8"))
                   if lang == "dockerfile")
_COPIES = dict(reversed(line.split()[1:3]) for line in _DOCKERFILE.splitlines()
               if line.startswith("COPY "))  # destination -> source


def _doc_commands(program: str) -> list[list[str]]:
    """Every ``$ <program> ...`` command of the doc's shell blocks, split, pipes cut off."""
    text = re.sub(r"\\\n\s*", "", DOC.read_text(encoding="utf-8"))
    return [shlex.split(line[2:].split(" | ")[0], comments=True)
            for line in text.splitlines() if line.startswith(f"$ {program} ")]


def _job_of(argv: list[str]) -> str:
    return argv[argv.index("--job") + 1] if "--job" in argv else DEFAULT_JOB_PATH


def test_every_render_example_runs_the_job_where_the_dockerfile_puts_it() -> None:
    (job_in_image,) = [dest for dest, source in _COPIES.items() if source.endswith(".py")]
    renders = [argv for argv in _doc_commands("accelflow") if argv[1] == "render"]
    assert len(renders) >= 6
    assert {_job_of(argv) for argv in renders} == {job_in_image}


def test_the_dockerfile_installs_the_wheel_the_doc_builds_not_a_registry_package(
    tmp_path: Path,
) -> None:
    installs = [shlex.split(line.split("pip install", 1)[1].rstrip("\\"))
                for line in _DOCKERFILE.splitlines() if "pip install" in line]
    requirements = [arg for argv in installs for arg in argv if not arg.startswith("-")]
    ((wheel, into),) = [(source, dest) for dest, source in _COPIES.items() if source.endswith(".whl")]
    assert requirements == [f"{into}{wheel}[nvml]"]  # the copied wheel, not a name on an index
    (build,) = [argv for argv in _doc_commands("python") if "wheel" in argv]
    build[build.index("-w") + 1] = str(tmp_path)  # where the doc builds into image/
    subprocess.run([sys.executable, *build[1:]], cwd=_ROOT, check=True, capture_output=True,
                   timeout=300)
    project = tomllib.loads((_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert [p.name for p in tmp_path.iterdir()] == [wheel]
    assert wheel == f"{project['name']}-{project['version']}-py3-none-any.whl"


@pytest.mark.parametrize(
    "module",
    [
        "accelflow.deploy._kubernetes",
        "accelflow.deploy._requests",
        "accelflow.deploy._targets",
        "accelflow.deploy._yarn",
    ],
)
def test_docstring_examples(module: str) -> None:
    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0


_ROOT = DOC.parents[1]
_RUN = re.compile(r"accelflow run((?:\\{1,2}\n|[^`\n#|\"])*)")  # with \-continued lines


def _run_commands() -> list[tuple[str, str]]:
    """Every ``accelflow run ...`` command line in the README, docs, examples and benchmarks."""
    found = []
    paths = [_ROOT / "README.md", *sorted((_ROOT / "docs").glob("*.md")),
             *sorted((_ROOT / "examples").glob("*.py")), *sorted((_ROOT / "benchmarks").glob("*.py")),
             *sorted((_ROOT / "scripts").iterdir())]
    for path in paths:
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        for match in _RUN.finditer(text):
            command = re.sub(r"\\+\n", " ", match.group(1))
            found.append((f"{path.relative_to(_ROOT)}: accelflow run{command.rstrip()}", command))
    return found


RUN_COMMANDS = _run_commands()


def test_the_docs_show_accelflow_run_commands() -> None:
    assert len(RUN_COMMANDS) >= 10


@pytest.mark.parametrize(("where", "command"), RUN_COMMANDS, ids=[w for w, _ in RUN_COMMANDS])
def test_no_documented_command_puts_an_option_after_the_script(where: str, command: str) -> None:
    """After the script, ``--conf``/``-D``/``--cluster`` are the script's and the config is lost."""
    words = [w for w in shlex.split(command.replace("\\", " ")) if w not in ("[", "]")]
    words = [w.strip("[]") for w in words]
    # skip accelflow run's options with their values; the first other word is the script
    i = 0
    while i < len(words) and words[i].startswith("-"):
        i += 2 if words[i] in ("-D", "--conf", "--cluster", "-s", "--fromSavepoint") else 1
    assert not misplaced_options(words[i + 1:]), where
