"""Running a discovery script and reading its answer (Flink's contract, without its bugs).

The contract, kept so Flink's and Spark's scripts work unchanged:

* the script runs as an argv list ``[path, str(amount), *args]`` (no shell, so paths with
  spaces work; nothing is appended when no args are configured);
* it prints the indexes, comma-separated (blank items are ignored; newlines separate too),
  or Spark's JSON ``{"name": "gpu", "addresses": ["0", "1"]}``; leading zeros are dropped
  (``"01"`` is ``"1"``) and an index has at most :data:`MAX_INDEX_DIGITS` digits;
* stdout may hold at most :data:`MAX_OUTPUT_BYTES` (a list of GPUs is a few bytes): more is a
  failure and the script is killed; of stderr only the last :data:`MAX_OUTPUT_BYTES` are kept;
* a non-zero exit is a failure that carries the script's stderr;
* fewer indexes than the amount is a failure; more are trimmed to the amount (with a warning);
* anything else is a failure that quotes the output.

The script runs in its own session (process group) and both pipes are read while it runs, so
a chatty script cannot fill a pipe and block. On timeout (or too much output)
:func:`accelflow.resources.coordination.kill_script_tree` kills its group, every descendant, every process left in its session, and every process
that still holds its stdout or stderr (which catches a helper started with ``setsid``, even
one orphaned by a double fork); the error lists exactly what was killed and what survived.
"""

from __future__ import annotations

import json
import logging
import os
import selectors
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from accelflow._parent import killed_by
from accelflow._errors import DiscoveryError
from accelflow.resources.coordination import kill_script_tree
from accelflow.resources.gpu._device import MAX_INDEX_DIGITS, normalize_index

log = logging.getLogger("accelflow.resources.gpu")

DEFAULT_TIMEOUT_S = 10.0
_QUOTE_LIMIT = 400
_STDERR_LIMIT = 2000
MAX_OUTPUT_BYTES = 64 * 1024
_LOG_ITEMS = 16  # indexes shown in a log line
_READ_CHUNK = 65536


@dataclass(frozen=True, slots=True)
class ScriptOutput:
    """What a finished script printed."""

    stdout: str
    stderr: str


def run_discovery_script(
    path: Path,
    amount: int,
    args: Sequence[str],
    timeout: float = DEFAULT_TIMEOUT_S,
    *,
    environ: Mapping[str, str] | None = None,
) -> list[str]:
    """Run the script for ``amount`` devices and return exactly ``amount`` indexes.

    Example (skipped in the doctest run: the script is a site's own):
        >>> run_discovery_script(Path("/opt/gpu/discover.sh"), 2, ["--fast"])  # doctest: +SKIP
        ['0', '1']

    Args:
        environ: the script's environment (default: this process's).

    Raises:
        DiscoveryError: the script cannot start, times out, exits non-zero, prints garbage,
            too much, or too few indexes.
    """
    output = _run(path, [str(path), str(amount), *args], timeout, environ)
    indexes = parse_script_output(output.stdout, source=str(path))
    if len(indexes) < amount:
        raise DiscoveryError(
            f"discovery script {path} found {len(indexes)} GPU(s) {brief(indexes)} but {amount} "
            f"were asked for{_stderr_note(output.stderr)}"
        )
    if len(indexes) > amount:
        log.warning(
            "discovery script %s returned %d GPUs %s for an amount of %d; keeping the first %d",
            path,
            len(indexes),
            brief(indexes),
            amount,
            amount,
        )
    return indexes[:amount]


def find_on_path(name: str, environ: Mapping[str, str] | None = None) -> Path | None:
    """The executable a bare ``name`` (no ``/``) means: looked up on ``PATH`` only, skipping
    empty and relative entries (``""``, ``"."``), which would mean the working directory.

    Example:
        >>> find_on_path("sh", {"PATH": ".:/bin"})
        PosixPath('/bin/sh')

    Raises:
        ValueError: ``name`` holds a path separator (it is a path, not a bare name).
    """
    if os.sep in name or (os.altsep and os.altsep in name):
        raise ValueError(f"{name!r} is a path, not a bare command name")
    env = os.environ if environ is None else environ
    for entry in env.get("PATH", os.defpath).split(os.pathsep):
        candidate = Path(entry) / name
        if os.path.isabs(entry) and candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def parse_script_output(stdout: str, *, source: str = "the discovery script") -> list[str]:
    """The indexes in a script's stdout: a comma/newline list or Spark's JSON object.

    Example:
        >>> parse_script_output("0, 2,\\n")
        ['0', '2']
        >>> parse_script_output('{"name": "gpu", "addresses": ["1", "3"]}')
        ['1', '3']

    Raises:
        DiscoveryError: an item is not an index (or has more than :data:`MAX_INDEX_DIGITS`
            digits), an index repeats (``"1"`` and ``"01"`` too), or the JSON is malformed.
    """
    text = stdout.strip()
    items = _json_addresses(text, source) if text.startswith("{") else _list_items(text)
    indexes: list[str] = []
    seen: set[str] = set()
    for item in items:
        index = normalize_index(item)
        if index is None:
            raise DiscoveryError(
                f"{source} printed {_quote(item)}, which is not a GPU index (expected "
                f"comma-separated numbers of at most {MAX_INDEX_DIGITS} digits such as '0,1' "
                "or Spark's JSON)"
                + ("" if item == stdout.strip() else f"; its output was {_quote(stdout)}")
            )
        if index in seen:
            raise DiscoveryError(
                f"{source} printed index {index} twice; its output was {_quote(stdout)}"
            )
        seen.add(index)
        indexes.append(index)
    return indexes


def brief(items: Sequence[str]) -> str:
    """A list for messages and logs, cut after a few items: ``['0', '1', ... (1998 more)]``."""
    shown = ", ".join(repr(i) for i in items[:_LOG_ITEMS])
    more = f", ... ({len(items) - _LOG_ITEMS} more)" if len(items) > _LOG_ITEMS else ""
    return f"[{shown}{more}]"


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


class _Overflow(Exception):
    pass


def _run(
    path: Path, argv: list[str], timeout: float, environ: Mapping[str, str] | None
) -> ScriptOutput:
    try:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env=None if environ is None else dict(environ),
        )
    except OSError as exc:
        raise DiscoveryError(f"cannot run discovery script {path}: {_start_error(exc)}") from exc
    try:
        out, err = _read_bounded(process, time.monotonic() + timeout)
    except subprocess.TimeoutExpired:
        killed = kill_script_tree(process)
        raise DiscoveryError(
            f"discovery script {path} did not finish within {timeout:g} s "
            f"(param.discovery-script.timeout); {killed}"
        ) from None
    except _Overflow:
        killed = kill_script_tree(process)
        raise DiscoveryError(
            f"discovery script {path} printed more than {MAX_OUTPUT_BYTES // 1024} KiB on "
            f"stdout (a list of GPU indexes is a few bytes); {killed}"
        ) from None
    except BaseException:
        kill_script_tree(process)
        raise
    output = ScriptOutput(out.decode(errors="replace"), err.decode(errors="replace"))
    if process.returncode != 0:
        raise DiscoveryError(
            f"discovery script {path} {_exit_description(process.returncode)}"
            f"{_stderr_note(output.stderr) or _stdout_note(output.stdout)}"
        )
    return output


def _read_bounded(process: subprocess.Popen[bytes], deadline: float) -> tuple[bytes, bytes]:
    """Read both pipes until EOF and wait for the exit, by ``deadline``.

    Raises:
        subprocess.TimeoutExpired: the deadline passed first.
        _Overflow: stdout exceeded :data:`MAX_OUTPUT_BYTES` (stderr keeps only its tail).
    """
    assert process.stdout is not None and process.stderr is not None
    out, err = bytearray(), bytearray()
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ, out)
        selector.register(process.stderr, selectors.EVENT_READ, err)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(process.args, 0)
            for key, _ in selector.select(left):
                chunk = os.read(key.fd, _READ_CHUNK)
                buffer: bytearray = key.data
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                buffer += chunk
                if buffer is out and len(out) > MAX_OUTPUT_BYTES:
                    raise _Overflow
                if buffer is err and len(err) > MAX_OUTPUT_BYTES:
                    del err[:-MAX_OUTPUT_BYTES]
    process.wait(timeout=max(deadline - time.monotonic(), 0.001))
    for pipe in (process.stdout, process.stderr):
        pipe.close()
    return bytes(out), bytes(err)


def _exit_description(code: int) -> str:
    name = killed_by(code)
    return f"was killed by {name}" if name else f"exited with code {code}"


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
