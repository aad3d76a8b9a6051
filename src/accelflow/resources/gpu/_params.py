"""The GPU driver's ``param.*`` keys: names, defaults and the one parser that checks them.

Keys are given to the factory without the ``external-resource.<name>.`` prefix, so problems
name them ``param.<p>`` (the provider adds the resource prefix). Every problem is reported,
not only the first.

As in Flink, ``discovery-script.args`` without ``discovery-script.path`` are the arguments of
the default discovery: ``--enable-coordination-mode`` (or ``--enable-coordination``) and
``--coordination-file PATH`` become in-process coordination and its file, and no
``--enable-coordination-mode`` means no coordination (Flink's default script coordinates only
when asked). Also here: :data:`GPU_DISCOVERY_ENV_VAR`, which pins the in-process discovery
source (e.g. tests that mean a fake ``nvidia-smi`` on a host that also has NVML).
"""

from __future__ import annotations

import difflib
import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from accelflow._errors import ConfigError, ConfigProblem
from accelflow.config import _parse
from accelflow.config.keys import ACCELFLOW_HOME_ENV_VAR
from accelflow.resources.gpu._cli_args import (
    COMMAND_NAME,
    MAX_LOCK_TIMEOUT_S,
    DiscoveryFlags,
    args_problem,
    lock_timeout_seconds,
    parse_flags,
)
from accelflow.resources.coordination import DEFAULT_LOCK_TIMEOUT_S
from accelflow.resources.gpu._script import DEFAULT_TIMEOUT_S, find_on_path

SCRIPT_PATH = "discovery-script.path"
SCRIPT_ARGS = "discovery-script.args"
SCRIPT_TIMEOUT = "discovery-script.timeout"
COORDINATION = "coordination"
COORDINATION_FILE = "coordination-file"
LOCK_TIMEOUT = "coordination.lock-timeout"

PARAMS: Mapping[str, str] = {
    SCRIPT_PATH: "Discovery script: an absolute path, a relative path with a '/' (against "
    "$ACCELFLOW_HOME, else the working directory), or a bare command name, looked up on PATH "
    "only (never in the working directory; write './name' for a script there). Unset: NVML, "
    "else nvidia-smi, in process.",
    SCRIPT_ARGS: "Arguments after the amount, split like a shell (quotes respected). Without "
    "a script (as in Flink): '--enable-coordination-mode [--coordination-file PATH]' turn on "
    "in-process coordination; without that flag there is none.",
    SCRIPT_TIMEOUT: f"How long the script may run, e.g. '30 s' (default {DEFAULT_TIMEOUT_S:g} s).",
    COORDINATION: "In-process discovery only: share GPUs through the host coordination file "
    "(default true).",
    COORDINATION_FILE: "In-process discovery only: the coordination file (an absolute path; "
    "default: per user, under the temp directory).",
    LOCK_TIMEOUT: "In-process discovery only: the longest wait for the coordination file's "
    f"lock, e.g. '10 s' (default {DEFAULT_LOCK_TIMEOUT_S:g} s, at most "
    f"{MAX_LOCK_TIMEOUT_S:g} s); then discovery fails naming the lock file and its holder.",
}
DEFAULT_COORDINATION = True
_SCRIPT_ONLY = (SCRIPT_TIMEOUT,)
_IN_PROCESS_ONLY = (COORDINATION, COORDINATION_FILE, LOCK_TIMEOUT)

GPU_DISCOVERY_ENV_VAR = "ACCELFLOW_GPU_DISCOVERY"
"""Where in-process discovery looks: ``auto`` (default: NVML, else ``nvidia-smi``), ``nvml``
(NVML only) or ``nvidia-smi`` (never NVML, even where it loads)."""
DiscoverySource = Literal["auto", "nvml", "nvidia-smi"]
DISCOVERY_SOURCES: tuple[DiscoverySource, ...] = ("auto", "nvml", "nvidia-smi")


def discovery_source(environ: Mapping[str, str] | None = None) -> DiscoverySource:
    """The in-process discovery source :data:`GPU_DISCOVERY_ENV_VAR` asks for.

    Example:
        >>> discovery_source({"ACCELFLOW_GPU_DISCOVERY": " NVIDIA-SMI "}), discovery_source({})
        ('nvidia-smi', 'auto')

    Raises:
        ConfigError: any other value, naming the variable and the accepted values.
    """
    env = os.environ if environ is None else environ
    raw = env.get(GPU_DISCOVERY_ENV_VAR, "")
    text = raw.strip().lower() or "auto"
    for source in DISCOVERY_SOURCES:
        if text == source:
            return source
    raise ConfigError(
        f"expected one of {', '.join(DISCOVERY_SOURCES)}, got {raw!r}", key=GPU_DISCOVERY_ENV_VAR
    )


def key(param: str) -> str:
    """The name problems use for a parameter: ``param.<p>``."""
    return f"param.{param}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ScriptConfig:
    """Discovery-script mode: what to run and for how long."""

    path: Path
    args: tuple[str, ...] = ()
    timeout: float = DEFAULT_TIMEOUT_S


@dataclass(frozen=True, slots=True, kw_only=True)
class GPUDriverConfig:
    """The checked parameters of one GPU driver.

    Attributes:
        script: the discovery script, or ``None`` for in-process discovery.
        coordination: in-process mode: whether to allocate through the coordination file.
        coordination_file: its path; ``None`` is the per-user default.
        lock_timeout: the longest wait for its lock, in seconds.
    """

    script: ScriptConfig | None = None
    coordination: bool = DEFAULT_COORDINATION
    coordination_file: Path | None = None
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT_S

    def __post_init__(self) -> None:
        if isinstance(self.lock_timeout, bool) or not isinstance(self.lock_timeout, int | float):
            raise ValueError(f"lock_timeout must be a number of seconds, got {self.lock_timeout!r}")
        if not 0 < self.lock_timeout <= MAX_LOCK_TIMEOUT_S:
            raise ValueError(
                f"lock_timeout must be in (0, {MAX_LOCK_TIMEOUT_S:g}] seconds, "
                f"got {self.lock_timeout!r}"
            )


def parse_params(
    params: Mapping[str, str], environ: Mapping[str, str] | None = None
) -> GPUDriverConfig:
    """Check every parameter and build the driver config.

    Example:
        >>> parse_params({"coordination": "false", "coordination.lock-timeout": "2 s"})
        GPUDriverConfig(script=None, coordination=False, coordination_file=None, lock_timeout=2.0)

    Raises:
        ConfigError: one problem per wrong key (unknown, bad value, missing script, ...).
    """
    env = os.environ if environ is None else environ
    problems = [_unknown(p) for p in params if p not in PARAMS]
    problems += _mode_conflicts(params)
    script = _script_config(params, env, problems) if SCRIPT_PATH in params else None
    coordination = _coordination(params, problems)
    coordination_file = _coordination_file(params, problems)
    lock_timeout = _lock_timeout(params, problems)
    if SCRIPT_PATH not in params and SCRIPT_ARGS in params:
        flags = _default_discovery_flags(params, problems)
        coordination, coordination_file = flags.coordination, flags.coordination_file
        lock_timeout = flags.lock_timeout or lock_timeout
    if problems:
        raise ConfigError(problems)
    return GPUDriverConfig(
        script=script,
        coordination=coordination,
        coordination_file=coordination_file,
        lock_timeout=lock_timeout,
    )


def _unknown(param: str) -> ConfigProblem:
    close = difflib.get_close_matches(param, list(PARAMS), n=1)
    hint = f"did you mean {key(close[0])}? " if close else ""
    return ConfigProblem(
        key(param),
        f"unknown GPU driver parameter; {hint}known: {', '.join(key(p) for p in PARAMS)}",
    )


def _mode_conflicts(params: Mapping[str, str]) -> list[ConfigProblem]:
    problems = []
    if SCRIPT_PATH not in params:
        problems += [
            ConfigProblem(
                key(p), f"has no effect without {key(SCRIPT_PATH)}; set the script or remove it"
            )
            for p in _SCRIPT_ONLY
            if p in params
        ]
        if SCRIPT_ARGS in params:
            problems += [
                ConfigProblem(
                    key(p),
                    f"conflicts with {key(SCRIPT_ARGS)}, which configures the default "
                    "discovery (as in Flink); keep one of them",
                )
                for p in _IN_PROCESS_ONLY
                if p in params
            ]
    else:
        problems += [
            ConfigProblem(
                key(p),
                "applies to in-process discovery only; with a discovery script, pass "
                "--enable-coordination-mode [--coordination-file PATH] [--lock-timeout S] in "
                f"{key(SCRIPT_ARGS)} (accelflow-gpu-discovery understands them)",
            )
            for p in _IN_PROCESS_ONLY
            if p in params
        ]
    return problems


def _script_config(
    params: Mapping[str, str], environ: Mapping[str, str], problems: list[ConfigProblem]
) -> ScriptConfig | None:
    path = _script_path(params[SCRIPT_PATH], environ, problems)
    args: tuple[str, ...] = ()
    try:
        args = tuple(shlex.split(params.get(SCRIPT_ARGS, "")))
    except ValueError as exc:
        problems.append(
            ConfigProblem(
                key(SCRIPT_ARGS), f"cannot split {params[SCRIPT_ARGS]!r} like a shell: {exc}"
            )
        )
    timeout = DEFAULT_TIMEOUT_S
    if SCRIPT_TIMEOUT in params:
        try:
            timeout = _parse.seconds(params[SCRIPT_TIMEOUT])
        except ValueError as exc:
            problems.append(ConfigProblem(key(SCRIPT_TIMEOUT), str(exc)))
    if path is not None and path.name == COMMAND_NAME and args_problem(args):
        problems.append(
            ConfigProblem(
                key(SCRIPT_ARGS),
                f"{COMMAND_NAME} would reject these arguments: {args_problem(args)}",
            )
        )
    return None if path is None else ScriptConfig(path=path, args=args, timeout=timeout)


def _default_discovery_flags(
    params: Mapping[str, str], problems: list[ConfigProblem]
) -> DiscoveryFlags:
    """``discovery-script.args`` without a script: the flags of Flink's default script, which
    accelflow's default (in-process) discovery honours; anything else is an error."""
    raw = params[SCRIPT_ARGS]
    fix = (
        "without discovery-script.path only --enable-coordination-mode (or "
        "--enable-coordination), --coordination-file PATH and --lock-timeout SECONDS apply"
    )
    try:
        flags = parse_flags(shlex.split(raw))
    except ValueError as exc:
        problems.append(ConfigProblem(key(SCRIPT_ARGS), f"{raw!r}: {exc}; {fix}"))
        return DiscoveryFlags()
    if flags.owner_pid is not None:
        problems.append(
            ConfigProblem(key(SCRIPT_ARGS), f"{raw!r}: --owner-pid is for scripts only; {fix}")
        )
    for flag, value in (
        ("--coordination-file", flags.coordination_file),
        ("--lock-timeout", flags.lock_timeout),
    ):
        if value is not None and not flags.coordination:
            problems.append(
                ConfigProblem(
                    key(SCRIPT_ARGS),
                    f"{raw!r}: {flag} has no effect without --enable-coordination-mode",
                )
            )
    return flags


def _script_path(
    raw: str, environ: Mapping[str, str], problems: list[ConfigProblem]
) -> Path | None:
    text = str(raw).strip()
    if not text:
        problems.append(
            ConfigProblem(key(SCRIPT_PATH), "must not be empty; unset it to use NVML/nvidia-smi")
        )
        return None
    base, base_note = _relative_base(environ)
    if os.sep not in text and not text.startswith("~"):
        return _command_on_path(text, environ, base_note, problems)
    given = Path(text).expanduser()
    path = given if given.is_absolute() else base / given
    problem = _script_problem(path, given, base_note)
    if problem:
        problems.append(ConfigProblem(key(SCRIPT_PATH), problem))
        return None
    return path.absolute()


def _relative_base(environ: Mapping[str, str]) -> tuple[Path, str]:
    """What relative script paths are resolved against, and how messages name it."""
    home = environ.get(ACCELFLOW_HOME_ENV_VAR, "").strip()
    if home:
        return Path(home), f"${ACCELFLOW_HOME_ENV_VAR}={home}"
    return Path.cwd(), f"the working directory {Path.cwd()}"


def _command_on_path(
    name: str, environ: Mapping[str, str], base_note: str, problems: list[ConfigProblem]
) -> Path | None:
    """A bare name is a command: looked up on PATH only, never in the working directory, so a
    file planted there cannot run as the discovery script (issue 16.8)."""
    found = find_on_path(name, environ)
    if found is None:
        problems.append(
            ConfigProblem(
                key(SCRIPT_PATH),
                f"no executable {name!r} on PATH (a bare name is looked up on PATH only, never "
                f"in the working directory); give an absolute path, or './{name}' for a "
                f"script relative to {base_note}",
            )
        )
        return None
    return found.absolute()


def _lock_timeout(params: Mapping[str, str], problems: list[ConfigProblem]) -> float:
    if LOCK_TIMEOUT not in params:
        return DEFAULT_LOCK_TIMEOUT_S
    try:
        return lock_timeout_seconds(params[LOCK_TIMEOUT])
    except ValueError as exc:
        problems.append(ConfigProblem(key(LOCK_TIMEOUT), str(exc)))
        return DEFAULT_LOCK_TIMEOUT_S


def _script_problem(path: Path, given: Path, base_note: str) -> str | None:
    relative = "" if given.is_absolute() else f" (relative paths are resolved against {base_note})"
    if not path.exists():
        return f"the discovery script {path} does not exist{relative}"
    if path.is_dir():
        return f"{path} is a directory, not a discovery script"
    if not os.access(path, os.X_OK):
        return f"the discovery script {path} is not executable; run: chmod +x '{path}'"
    return None


def _coordination(params: Mapping[str, str], problems: list[ConfigProblem]) -> bool:
    if COORDINATION not in params:
        return DEFAULT_COORDINATION
    try:
        return _parse.boolean(params[COORDINATION])
    except ValueError as exc:
        problems.append(ConfigProblem(key(COORDINATION), str(exc)))
        return DEFAULT_COORDINATION


def _coordination_file(params: Mapping[str, str], problems: list[ConfigProblem]) -> Path | None:
    if COORDINATION_FILE not in params:
        return None
    path = Path(str(params[COORDINATION_FILE]).strip()).expanduser()
    if not str(params[COORDINATION_FILE]).strip() or not path.is_absolute():
        problems.append(
            ConfigProblem(
                key(COORDINATION_FILE),
                f"must be an absolute path (every TaskExecutor on the host must name the same "
                f"file), got {params[COORDINATION_FILE]!r}",
            )
        )
        return None
    if path.is_dir():
        problems.append(
            ConfigProblem(key(COORDINATION_FILE), f"{path} is a directory; name a file in it")
        )
        return None
    if params.get(COORDINATION, "true").strip().lower() in ("false", "no", "off", "0"):
        problems.append(
            ConfigProblem(
                key(COORDINATION_FILE), f"is set but {key(COORDINATION)} is false; remove one"
            )
        )
    return path
