"""Running a discovery script and reading its answer (Flink's contract, without its bugs).

The contract, kept so Flink's and Spark's scripts work unchanged:

* the script runs as an argv list ``[path, str(amount), *args]`` (no shell, so paths with
  spaces work; nothing is appended when no args are configured);
* it prints the indexes, comma-separated (blank items are ignored; newlines separate too),
  or Spark's JSON ``{"name": "gpu", "addresses": ["0", "1"]}``;
* a non-zero exit is a failure that carries the script's stderr;
* fewer indexes than the amount is a failure; more are trimmed to the amount (with a warning);
* anything else is a failure that quotes the output.

The script runs in its own session (process group); on timeout the whole group is killed, so
helpers the script started die with it. ``communicate`` reads stdout and stderr while the
script runs, so a chatty script cannot fill a pipe and block.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from accelflow._errors import DiscoveryError
from accelflow.resources.gpu._device import is_device_index

log = logging.getLogger("accelflow.resources.gpu")

DEFAULT_TIMEOUT_S = 10.0
_QUOTE_LIMIT = 400
_STDERR_LIMIT = 2000
_DRAIN_AFTER_KILL_S = 2.0


@dataclass(frozen=True, slots=True)
class ScriptOutput:
    """What a finished script printed."""

    stdout: str
    stderr: str


def run_discovery_script(
    path: Path, amount: int, args: Sequence[str], timeout: float = DEFAULT_TIMEOUT_S
) -> list[str]:
    """Run the script for ``amount`` devices and return exactly ``amount`` indexes.

    Example:
        >>> run_discovery_script(Path("/opt/gpu/discover.sh"), 2, ["--fast"])  # doctest: +SKIP
        ['0', '1']

    Raises:
        DiscoveryError: the script cannot start, times out, exits non-zero, prints garbage or
            too few indexes.
    """
    output = _run(path, [str(path), str(amount), *args], timeout)
    indexes = parse_script_output(output.stdout, source=str(path))
    if len(indexes) < amount:
        raise DiscoveryError(
            f"discovery script {path} found {len(indexes)} GPU(s) {indexes} but {amount} were "
            f"asked for{_stderr_note(output.stderr)}"
        )
    if len(indexes) > amount:
        log.warning(
            "discovery script %s returned %d GPUs %s for an amount of %d; keeping the first %d",
            path,
            len(indexes),
            indexes,
            amount,
            amount,
        )
    return indexes[:amount]


def parse_script_output(stdout: str, *, source: str = "the discovery script") -> list[str]:
    """The indexes in a script's stdout: a comma/newline list or Spark's JSON object.

    Example:
        >>> parse_script_output("0, 2,\\n")
        ['0', '2']
        >>> parse_script_output('{"name": "gpu", "addresses": ["1", "3"]}')
        ['1', '3']

    Raises:
        DiscoveryError: an item is not an index, an index repeats, or the JSON is malformed.
    """
    text = stdout.strip()
    items = _json_addresses(text, source) if text.startswith("{") else _list_items(text)
    seen: set[str] = set()
    for item in items:
        if not is_device_index(item):
            raise DiscoveryError(
                f"{source} printed {_quote(item)}, which is not a GPU index (expected "
                f"comma-separated numbers such as '0,1' or Spark's JSON)"
                + ("" if item == stdout.strip() else f"; its output was {_quote(stdout)}")
            )
        if item in seen:
            raise DiscoveryError(
                f"{source} printed index {item} twice; its output was {_quote(stdout)}"
            )
        seen.add(item)
    return items


def _list_items(text: str) -> list[str]:
    return [item.strip() for line in text.splitlines() for item in line.split(",") if item.strip()]


def _json_addresses(text: str, source: str) -> list[str]:
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DiscoveryError(
            f"{source} printed malformed JSON ({exc.msg}): {_quote(text)}"
        ) from None
    addresses = document.get("addresses") if isinstance(document, dict) else None
    if not isinstance(addresses, list) or not all(isinstance(a, str | int) for a in addresses):
        raise DiscoveryError(
            f'{source} printed JSON without an "addresses" list of strings (Spark\'s form is '
            f'{{"name": "gpu", "addresses": ["0", "1"]}}): {_quote(text)}'
        )
    return [str(a).strip() for a in addresses if str(a).strip()]


def _run(path: Path, argv: list[str], timeout: float) -> ScriptOutput:
    try:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        raise DiscoveryError(f"cannot run discovery script {path}: {_start_error(exc)}") from exc
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(process)
        raise DiscoveryError(
            f"discovery script {path} did not finish within {timeout:g} s "
            "(param.discovery-script.timeout); it and every process it started were killed"
        ) from None
    except BaseException:
        _kill_group(process)
        raise
    output = ScriptOutput(out.decode(errors="replace"), err.decode(errors="replace"))
    if process.returncode != 0:
        raise DiscoveryError(
            f"discovery script {path} {_exit_description(process.returncode)}"
            f"{_stderr_note(output.stderr) or _stdout_note(output.stdout)}"
        )
    return output


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        process.communicate(timeout=_DRAIN_AFTER_KILL_S)
    except subprocess.TimeoutExpired:
        # a helper left the group (setsid) and still holds the pipes: stop reading
        for pipe in (process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()
        process.wait()


def _exit_description(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with code {code}"


def _start_error(exc: OSError) -> str:
    if isinstance(exc, PermissionError):
        return "it is not executable (chmod +x it)"
    if exc.errno == 8:  # ENOEXEC
        return "the file is not a program; add a '#!' line such as '#!/bin/sh'"
    return exc.strerror or str(exc)


def _stderr_note(stderr: str) -> str:
    text = stderr.strip()
    return f"; its stderr: {text[-_STDERR_LIMIT:]}" if text else ""


def _stdout_note(stdout: str) -> str:
    text = stdout.strip()
    return f"; no stderr; its stdout: {_quote(text)}" if text else "; it printed nothing"


def _quote(text: str) -> str:
    if len(text) <= _QUOTE_LIMIT:
        return repr(text)
    return f"{text[:_QUOTE_LIMIT]!r}... ({len(text) - _QUOTE_LIMIT} more characters)"
