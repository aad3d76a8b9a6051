"""Every code example in the README, docs/*.md and accelflow's docstrings runs here.

Three kinds of example, one test case each, named by file and line:

* fenced blocks of README.md and docs/*.md: ```` ```python ```` blocks run as a script in a
  fresh subprocess; shell blocks (``sh``, ``console``, or unlabelled with ``$`` prompts) run
  each ``accelflow ...`` command they show as a subprocess, in a scratch directory holding the
  files the docs define (a yaml block whose first line is ``# NAME.yaml``), the repository's
  ``conf/``, ``examples/`` and ``scripts/``, and a fake ``nvidia-smi`` with 4 GPUs;
* doctests (``>>>``) of every accelflow module, collected with :class:`doctest.DocTestFinder`
  and run in-process with a fake ``nvidia-smi`` with 2 GPUs;
* Python literal blocks (``Example::``) of those docstrings, run in the module's namespace.

What cannot run on a CI machine (a real Kubernetes, YARN or Ray cluster, the package
registries) is listed below with the reason; a new example that is neither run nor listed
fails :func:`test_every_command_is_run_or_listed`.
"""

from __future__ import annotations

import ast
import doctest
import gzip
import importlib.util
import os
import pkgutil
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import accelflow
from accelflow.cli._main import main
from accelflow.testing import use_fake_nvidia_smi

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FASHION_MNIST = Path(os.environ.get("ACCELFLOW_DATA_DIR") or "/usr/share/datasets/fashion-mnist")
HAS_FASHION_MNIST = all((FASHION_MNIST / f"{split}-{kind}-idx{dim}-ubyte.gz").exists()
                        for split in ("train", "t10k") for kind, dim in (("images", 3), ("labels", 1)))
try:  # where Ray is not installed, "ray" may be the folder tests/ray: no ray.util in it
    HAS_RAY = importlib.util.find_spec("ray.util") is not None
except ImportError:
    HAS_RAY = False
_TIMEOUT_S = 240

# --- what is not run, and why ---------------------------------------------------------------

#: Programs other than accelflow that doc commands run, and why this test does not run them.
NOT_RUN_PROGRAMS = {
    "scripts/run-example": "sets up .venv from the package registries; run by CI (.ci/run)",
    "scripts/test": "sets up .venv and runs this whole suite; it is what CI runs",
    "pip": "installs from the package registries (no network in tests)",
    ".venv/bin/pip": "installs from the package registries (no network in tests)",
    "python": "builds accelflow's wheel for a container image (tests/deploy/test_deploy_docs.py "
              "runs it)",
    "docker": "needs a Docker daemon",
    "kubectl": "needs a Kubernetes cluster (the rendered manifests run; kubectl does not)",
    "curl": "posts to a YARN ResourceManager",
    "yarn": "needs a YARN cluster",
}

#: accelflow commands (as written in the docs) that need something no CI machine has.
NOT_RUN_COMMANDS = {
    "accelflow run -D execution.target=ray -D ray.address=auto job.py":
        "joins a running Ray cluster (ray.address=auto)",
    "accelflow run -D execution.target=ray -D ray.address=10.0.0.5:6379 "
    "-D ray.runtime-env.working-dir=. -D ray.runtime-env.env-vars=HF_HOME=/data job.py":
        "joins a remote Ray cluster (tests/ray/test_ray_multinode.py ships a working dir to a "
        "second node)",
    "accelflow run -s ckpts/5c1f0e2a9b7d4e0f8a6b3c2d1e0f9a8b job.py":
        "needs the checkpoints of a cancelled job (tests/runtime/test_checkpointing.py resumes one)",
    "accelflow run --allow-non-restored-state -s ckpts/5c1f0e2a9b7d4e0f8a6b3c2d1e0f9a8b/chk-42 job.py":
        "needs the checkpoints of a cancelled job (tests/runtime/test_checkpointing.py resumes one)",
    "accelflow kafka-broker --topic orders":
        "runs until Ctrl-C (tests/connectors/kafka/test_kafka_broker_cli.py runs it and this flow)",
    "accelflow run -D execution.checkpointing.dir=ckpts -D execution.checkpointing.externalized-checkpoint-"
    "retention=RETAIN_ON_CANCELLATION examples/kafka_orders.py --bootstrap-servers 127.0.0.1:PORT --produce 1000":
        "an unbounded job stopped with Ctrl-C, against the broker of another terminal "
        "(tests/connectors/kafka/test_kafka_broker_cli.py runs this flow)",
}

#: Doctests marked ``+SKIP`` (test name: why). Every other doctest runs.
SKIPPED_DOCTESTS = {
    "accelflow.runtime.launchers._ray.RayLauncher": "starts a Ray instance (tests/ray runs it)",
    "accelflow.runtime.rest._rest.RestServer": "needs a running JobManager (tests/rest)",
    "accelflow.runtime.rest._snapshot": "needs a JobManager running a job (tests/rest)",
    "accelflow.resources.gpu.run_discovery_script": "names a site's own script",
    "accelflow.io.find_fashion_mnist": "a path in a user's home directory",
}

#: Doctests that read the Fashion-MNIST files (from the current directory).
NEEDS_FASHION_MNIST = {
    "accelflow.io.FashionMnistFiles", "accelflow.io.IdxFile", "accelflow.io.IdxHeader",
    "accelflow.io.open_idx", "accelflow.io.open_labeled_pair", "accelflow.io.read_idx",
    "accelflow.io.read_idx_header", "accelflow.io.read_labeled_pair",
}

#: Config files the docs name without showing them (the docs' own ``# NAME.yaml`` blocks win).
DEFAULT_FILES = {
    "job.yaml": "external-resources: gpu\n"
                "external-resource.gpu.amount: 2\n"
                "external-resource.gpu.driver-factory.class: gpu\n",
    "cluster.yaml": "external-resources: gpu\n"
                    "external-resource.gpu.amount: 2\n"
                    "external-resource.gpu.driver-factory.class: gpu\n"
                    "taskmanager.numberOfTaskSlots: 4\n",
    # reconstructed from the problems docs/configuration.md shows for it
    "bad.yaml": "external-resources: gpu;fpga;gpu\n"
                "external-resource.gpu.amount: 1.5\n"
                "external-resource.gpu.amout: 2\n"
                "external-resource.gpu.on-discovery-failure: ignore\n"
                "external-resource.fpga.kubernetes.config-key: fpga\n",
}

#: Commands whose shown output must be exactly what they print (their exit code is checked too).
EXACT_OUTPUT = {
    "accelflow resources --conf bad.yaml -D external-resource.fpga.amount=0": 2,
}

#: The job script a doc's commands run (``job.py``, ``train.py``): the README's GPU job, except
#: where the doc's cluster has no GPUs (a local Ray instance has none unless
#: ``ray.local.num-gpus`` says so).
CPU_JOB = """\
from accelflow import Environment

env = Environment()
env.from_sequence(1, 8).map(lambda x: x * x, parallelism=2).print()
env.execute("squares")
"""
JOB_OF_DOC = {"ray.md": CPU_JOB}

#: Commands whose shown output must have the same lines as what they print, up to the values
#: (pids, ports, tokens, counts): each line's label, the text before its first ':' or '('.
SHAPED_OUTPUT = {
    "accelflow cluster start --conf cluster.yaml -D rest.port=0",
    "accelflow cluster status",
    "accelflow cluster stop",
}

# --- fenced blocks ------------------------------------------------------------------------------

_FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
_SHELL_LANGS = {"sh", "bash", "shell", "console", ""}
_FILE_HEADER = re.compile(r"#\s*([\w.-]+\.yaml)\b")
_URL = re.compile(r"http://127\.0\.0\.1:\d+/?")


@dataclass(frozen=True)
class Command:
    """One command line of a shell block, with the output the doc shows after it."""

    text: str  # as written, prompt and comment removed, continuation lines joined
    shown_output: str = ""

    @property
    def pipeline(self) -> list[list[str]]:
        return [shlex.split(part) for part in self.text.split(" | ")]


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence
    lang: str
    body: str
    commands: tuple[Command, ...] = field(default=())

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def _commands(lang: str, body: str) -> tuple[Command, ...]:
    prompted = lang in ("console", "") or body.lstrip().startswith("$ ")
    joined = re.sub(r"\\\n\s*", "", body)
    found: list[tuple[str, list[str]]] = []
    for line in joined.splitlines():
        if prompted and not line.startswith("$ "):
            if found:
                found[-1][1].append(line)
            continue
        text = line[2:] if prompted else line
        text = " ".join(shlex.split(text, comments=True)) if text.strip() else ""
        if text:
            found.append((text, []))
    return tuple(Command(text, "\n".join(out) + ("\n" if out else "")) for text, out in found)


def doc_blocks() -> list[Block]:
    blocks = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for m in _FENCE.finditer(text):
            lang, body = m.group(1).lower(), m.group(2)
            line = text.count("\n", 0, m.start()) + 1
            if lang in ("python", "py"):
                blocks.append(Block(path, line, "python", body))
            elif lang in _SHELL_LANGS and (commands := _commands(lang, body)):
                blocks.append(Block(path, line, "shell", body, commands))
    return blocks


def doc_files() -> dict[str, str]:
    """The files docs define (first line ``# NAME.yaml``), over :data:`DEFAULT_FILES`."""
    files = dict(DEFAULT_FILES)
    for path in DOCS:
        for m in _FENCE.finditer(path.read_text(encoding="utf-8")):
            if m.group(1) == "yaml" and (header := _FILE_HEADER.match(m.group(2))):
                files[header.group(1)] = m.group(2)
    return files


BLOCKS = doc_blocks()
README_JOB = next(b.body for b in BLOCKS if b.path.name == "README.md" and b.lang == "python")


def _program(argv: list[str]) -> str:
    return argv[0] if argv else ""


def _is_accelflow(argv: list[str]) -> bool:
    return _program(argv) in ("accelflow", ".venv/bin/accelflow")


def test_every_command_is_run_or_listed() -> None:
    """A new command in the docs either runs here or is listed with the reason it cannot."""
    unknown = []
    for block in BLOCKS:
        for command in block.commands:
            for argv in command.pipeline:
                if not _is_accelflow(argv) and _program(argv) not in NOT_RUN_PROGRAMS:
                    unknown.append(f"{block.id}: {' '.join(argv)}")
    assert not unknown, "run these commands in test_doc_block or list them in NOT_RUN_PROGRAMS"


def test_the_lists_name_examples_that_exist() -> None:
    """Nothing listed as not runnable has left the docs (the lists stay honest)."""
    commands = {c.text for b in BLOCKS for c in b.commands}
    programs = {_program(argv) for b in BLOCKS for c in b.commands for argv in c.pipeline}
    assert set(NOT_RUN_COMMANDS) <= commands
    assert set(EXACT_OUTPUT) <= commands
    assert SHAPED_OUTPUT <= commands
    assert set(NOT_RUN_PROGRAMS) <= programs
    assert any(b.lang == "python" for b in BLOCKS)


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A directory with a short path: Ray and the cluster put AF_UNIX sockets (107 bytes) in it."""
    path = Path(tempfile.mkdtemp(prefix="af-doc-", dir="/tmp" if Path("/tmp").is_dir() else None))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _scratch(
    block: Block, tmp_path: Path, short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    """Enter a working directory with the docs' files; 4 fake GPUs here and in subprocesses.

    Returns the environment for subprocesses (the same as this process's, made explicit).
    """
    work = tmp_path / "work"
    work.mkdir()
    for name, body in doc_files().items():
        (work / name).write_text(body, encoding="utf-8")
    for name in ("job.py", "train.py"):
        (work / name).write_text(JOB_OF_DOC.get(block.path.name, README_JOB), encoding="utf-8")
    for name in ("conf", "examples", "scripts"):
        (work / name).symlink_to(ROOT / name)
    monkeypatch.chdir(work)
    use_fake_nvidia_smi(monkeypatch, tmp_path / "fake-bin", 4)
    fake, rest = os.environ["PATH"].split(os.pathsep, 1)  # the fake first, then accelflow's scripts
    monkeypatch.setenv("PATH", os.pathsep.join([fake, str(Path(sys.executable).parent), rest]))
    for name in ("TMPDIR", "XDG_STATE_HOME", "ACCELFLOW_STATE_DIR"):
        monkeypatch.setenv(name, str(short_tmp))  # the coordination file and cluster state too
    monkeypatch.setattr(tempfile, "tempdir", str(short_tmp))
    monkeypatch.setenv("PYTHONUNBUFFERED", "1")
    monkeypatch.delenv("ACCELFLOW_CONF", raising=False)
    return dict(os.environ)


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str


def _run(argv: list[str], env: dict[str, str], capsys: pytest.CaptureFixture[str]) -> Ran:
    """Run one accelflow command: ``render`` and ``resources`` in-process (the CLI's ``main``,
    as the console script calls it, to keep this file fast), everything else in a subprocess."""
    if argv[1] in ("render", "resources"):
        capsys.readouterr()
        code = main(argv[1:])
        out, err = capsys.readouterr()
        return Ran(code, out, err)
    proc = subprocess.run([str(Path(sys.executable).parent / "accelflow"), *argv[1:]], env=env,
                          capture_output=True, text=True, timeout=_TIMEOUT_S, check=False)
    return Ran(proc.returncode, proc.stdout, proc.stderr)


def _check(what: str, ran: Ran | subprocess.CompletedProcess[str], expected_rc: int = 0) -> None:
    assert ran.returncode == expected_rc, (
        f"{what}\nexit {ran.returncode}\nstdout:\n{ran.stdout[-3000:]}\n"
        f"stderr:\n{ran.stderr[-3000:]}")


def _needs_data(block: Block) -> bool:
    return "fashion_mnist" in block.body or "run-example" in block.body


def _needs_ray(block: Block) -> bool:
    return "execution.target=ray" in block.body or "execution.target: ray" in block.body


def _is_slow(block: Block) -> bool:
    return block.lang == "python" or any(
        len(argv) > 1 and argv[1] in ("run", "cluster") for c in block.commands for argv in c.pipeline)


def _params() -> Iterator[Any]:
    for block in BLOCKS:
        marks = [pytest.mark.slow] if _is_slow(block) else []
        yield pytest.param(block, id=block.id, marks=marks)


def _labels(output: str) -> list[str]:
    return [re.split(r"[:(]", line, maxsplit=1)[0].strip() for line in output.splitlines()]


def _check_classify_output(stdout: str) -> None:
    """The README's job: every record once, its 4 subtasks spread over both GPUs (half each)."""
    records = [ast.literal_eval(line.split("> ", 1)[1]) for line in stdout.splitlines()]
    assert sorted(x for _, x in records) == list(range(1, 101))
    assert sorted(device for device, _ in records) == ["0"] * 50 + ["1"] * 50


@pytest.mark.parametrize("block", list(_params()))
def test_doc_block(
    block: Block,
    tmp_path: Path,
    short_tmp: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    env = _scratch(block, tmp_path, short_tmp, monkeypatch)
    if block.lang == "python":
        (tmp_path / "work" / "example.py").write_text(block.body, encoding="utf-8")
        proc = subprocess.run([sys.executable, "example.py"], env=env, capture_output=True,
                              text=True, timeout=_TIMEOUT_S, check=False)
        _check(block.id, proc)
        if "class Classify" in block.body:
            _check_classify_output(proc.stdout)
        return
    runnable = [c for c in block.commands
                if c.text not in NOT_RUN_COMMANDS and _is_accelflow(c.pipeline[0])]
    if not runnable:
        pytest.skip(f"{block.id}: nothing here runs without a real cluster or the registries")
    if _needs_data(block) and not HAS_FASHION_MNIST:
        pytest.skip("Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)")
    if _needs_ray(block) and not HAS_RAY:
        pytest.skip("Ray is not installed (pip install 'accelflow[ray]')")
    url: str | None = None
    try:
        for command in runnable:
            argv = command.pipeline[0]  # what follows '|' is in NOT_RUN_PROGRAMS
            if url is not None:
                argv = [_URL.sub(url, a) for a in argv]
            if argv[1:3] == ["cluster", "start"] and "rest.port=0" not in argv:
                argv = [*argv, "-D", "rest.port=0"]  # a free port: tests run side by side
            ran = _run(argv, env, capsys)
            _check(command.text, ran, EXACT_OUTPUT.get(command.text, 0))
            if command.text in EXACT_OUTPUT:
                assert ran.stdout + ran.stderr == command.shown_output
            if command.text in SHAPED_OUTPUT and command.shown_output:
                assert _labels(ran.stdout) == _labels(command.shown_output), ran.stdout
            if argv[1:3] == ["cluster", "start"]:
                started = _URL.search(ran.stdout)
                assert started, f"no URL in the output of {command.text}: {ran.stdout}"
                url = started.group(0)
            elif argv[1:3] == ["cluster", "stop"]:
                url = None
    finally:
        if url is not None:
            _run(["accelflow", "cluster", "stop"], env, capsys)


# --- docstrings ----------------------------------------------------------------------------------


def _modules() -> list[Any]:
    names = [m.name for m in pkgutil.walk_packages(accelflow.__path__, "accelflow.")
             if not m.name.endswith("__main__")]
    return [accelflow, *(importlib.import_module(name) for name in sorted(names))]


_SOURCES = {path: path.read_text(encoding="utf-8")
            for path in sorted((SRC / "accelflow").rglob("*.py"))}


def _source_line(test: doctest.DocTest) -> tuple[str, int]:
    """The file and line of a doctest's first example, also for names a facade re-exports."""
    first = ">>> " + test.examples[0].source.splitlines()[0]
    name = test.name.rsplit(".", 1)[-1]
    is_module = test.name in sys.modules
    for path, text in _SOURCES.items():
        definition = None if is_module else re.search(rf"^\s*(class|def) {name}\b", text, re.M)
        start = 0 if definition is None else definition.start()
        if (is_module or definition) and (at := text.find(first, start)) >= 0:
            return str(path.relative_to(ROOT)), text.count("\n", 0, at) + 1
    # not found as written: an escape in the source (\\x89) differs from the docstring (\x89)
    return str(Path(test.filename or "?").relative_to(ROOT)), (test.lineno or 0) + 1


def doctests() -> list[doctest.DocTest]:
    finder = doctest.DocTestFinder()
    seen: set[tuple[str, str]] = set()
    found = []
    for module in _modules():
        for test in finder.find(module, module.__name__):
            if test.examples and (test.docstring or "", test.name) not in seen:
                seen.add((test.docstring or "", test.name))
                found.append(test)
    return found


DOCTESTS = doctests()


def test_every_skipped_doctest_is_listed() -> None:
    skipped = {t.name for t in DOCTESTS
               if any(e.options.get(doctest.SKIP) for e in t.examples)}
    assert skipped == set(SKIPPED_DOCTESTS), "list each +SKIP with its reason in SKIPPED_DOCTESTS"
    assert NEEDS_FASHION_MNIST <= {t.name for t in DOCTESTS}


@pytest.fixture
def fake_gpus(tmp_path: Path, short_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two fake GPUs for this process and its children; temp files (coordination) apart."""
    use_fake_nvidia_smi(monkeypatch, tmp_path / "fake-bin", 2)
    monkeypatch.setattr(tempfile, "tempdir", str(short_tmp))
    monkeypatch.setenv("TMPDIR", str(short_tmp))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


def _link_fashion_mnist(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not HAS_FASHION_MNIST:
        pytest.skip("Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)")
    for file in FASHION_MNIST.glob("*-ubyte.gz"):
        (work / file.name).symlink_to(file)
    labels = (FASHION_MNIST / "t10k-labels-idx1-ubyte.gz").read_bytes()
    (work / "t10k-labels-idx1-ubyte").write_bytes(gzip.decompress(labels))
    monkeypatch.setenv("ACCELFLOW_DATA_DIR", str(work))


def _doctest_params() -> Iterator[Any]:
    for test in DOCTESTS:
        path, line = _source_line(test)
        slow = any("execute" in e.source for e in test.examples)
        yield pytest.param(test, id=f"{path}:{line}", marks=[pytest.mark.slow] if slow else [])


@pytest.mark.parametrize("test", list(_doctest_params()))
def test_docstring_doctest(
    test: doctest.DocTest, fake_gpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if test.name in NEEDS_FASHION_MNIST:
        _link_fashion_mnist(fake_gpus, monkeypatch)
    test.globs = {**test.globs, "tmp_path": tmp_path / "doctest", "monkeypatch": monkeypatch}
    report: list[str] = []
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    result = runner.run(test, out=report.append)
    assert result.failed == 0, "".join(report)
    if test.name not in SKIPPED_DOCTESTS:
        assert result.attempted == len(test.examples)


# --- literal blocks in docstrings ---------------------------------------------------------------


@dataclass(frozen=True)
class LiteralBlock:
    module: str
    path: Path
    line: int
    code: str

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def _is_python(code: str) -> bool:
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return False
    data = (ast.Constant, ast.Dict, ast.List, ast.Name, ast.Tuple, ast.Set)
    return not all(isinstance(s, ast.Expr) and isinstance(s.value, data) for s in tree.body)


def _literal_blocks_of(docstring: str, first_line: int) -> Iterator[tuple[int, str]]:
    lines = docstring.splitlines()
    for i, line in enumerate(lines):
        if not line.rstrip().endswith("::"):
            continue
        indent = len(line) - len(line.lstrip())
        body = []
        for following in lines[i + 1:]:
            if following.strip() and len(following) - len(following.lstrip()) <= indent:
                break
            body.append(following)
        code = textwrap.dedent("\n".join(body)).strip("\n")
        if code:
            yield first_line + i + 1, code + "\n"


def literal_blocks() -> list[LiteralBlock]:
    found = []
    for module in _modules():
        path = Path(module.__file__)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                     ast.AsyncFunctionDef)):
                continue
            if not (node.body and isinstance(node.body[0], ast.Expr)
                    and isinstance(node.body[0].value, ast.Constant)
                    and isinstance(node.body[0].value.value, str)):
                continue
            start = node.body[0].lineno
            for line, code in _literal_blocks_of(node.body[0].value.value, start):
                if _is_python(code):
                    found.append(LiteralBlock(module.__name__, path, line, code))
    return found


LITERAL_BLOCKS = literal_blocks()


def test_docstrings_have_literal_examples() -> None:
    assert any(b.module == "accelflow.deploy" for b in LITERAL_BLOCKS)


@pytest.mark.parametrize("block", [pytest.param(b, id=b.id) for b in LITERAL_BLOCKS])
def test_docstring_literal_block(
    block: LiteralBlock, fake_gpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if "fashion_mnist" in block.code:
        _link_fashion_mnist(fake_gpus, monkeypatch)
    namespace = {"pytest": pytest, **vars(importlib.import_module(block.module))}
    exec(compile(block.code, block.id, "exec"), namespace)  # noqa: S102 - the example itself
