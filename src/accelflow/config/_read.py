"""Reading the layers of a configuration: YAML files and ``-D key=value`` arguments.

Each reader also has a lenient form that returns what it could read together with the problems
it found (a key set twice, a malformed ``-D``), so that :func:`accelflow.config.config_from`
reports them with the problems of every other key.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from accelflow._errors import ConfigError, ConfigProblem

MAX_CONFIG_FILE_BYTES = 1 << 20
"""The largest config file read (1 MiB); flat keys never need more."""


def parse_definitions(definitions: Sequence[str]) -> dict[str, str]:
    """Parse ``-D key=value`` arguments. A key given twice with the same value is allowed.

    Raises:
        ConfigError: an argument without ``=`` or with an empty key, or a key given twice with
            different values, one line each.
    """
    values, problems = read_definitions(definitions)
    if problems:
        raise ConfigError(problems)
    return values


def read_definitions(definitions: Sequence[str]) -> tuple[dict[str, str], list[ConfigProblem]]:
    """The ``-D`` values that parse (the first of a key given twice), and a problem for each
    argument that does not."""
    values: dict[str, str] = {}
    problems = []
    for item in definitions:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            problems.append(ConfigProblem(f"-D {shown_key(item)}", "expected -D key=value"))
            continue
        key, value = key.strip(), value.strip()
        if key in values and values[key] != value:
            problems.append(ConfigProblem(
                shown_key(key),
                f"given twice with different values ({values[key]!r} and {value!r}); give it once",
                "-D",
            ))
            continue
        values[key] = value
    return values, problems


def read_yaml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a config file of flat keys.

    Raises:
        ConfigError: the file is missing, unreadable, not YAML, or not a mapping, or sets a key
            twice (every such key, naming both lines).
    """
    data, duplicates = read_yaml_layer(path)
    if duplicates:
        raise ConfigError(duplicates)
    return data


def read_yaml_layer(path: str | os.PathLike[str]) -> tuple[dict[str, Any], list[ConfigProblem]]:
    """The keys of a config file (the last value of a key set twice, as YAML keeps), and a
    problem for each key set twice, so the keys can still be checked with the rest.

    Raises:
        ConfigError: the file is missing, unreadable, not YAML, or not a mapping.
    """
    file = Path(path)
    try:
        text = _read_bounded(file).decode("utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file: {exc.strerror or exc}", key=str(file)) from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"not UTF-8 text (byte {exc.start}); save the config file as UTF-8", key=str(file)
        ) from exc
    import yaml  # only where a file is read: processes that never read one skip it

    from accelflow.config._yaml import load_strict

    duplicates: list[tuple[str, int, int]] = []
    try:
        data = load_strict(text, duplicates)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"not valid YAML{where}: {getattr(exc, 'problem', exc)}", key=str(file)) from exc
    except (ValueError, RecursionError) as exc:  # e.g. the timestamp 2024-13-01, deep nesting
        raise ConfigError(f"not valid YAML: {exc}; quote values that are not meant as dates",
                          key=str(file)) from exc
    problems = [
        ConfigProblem(
            shown_key(key),
            f"set twice, at lines {first} and {line}; keep one" if first != line
            else f"set twice on line {line}; keep one",
            str(file),
        )
        for key, first, line in duplicates
    ]
    if data is None:
        return {}, problems
    if not isinstance(data, dict) or not all(isinstance(key, str) for key in data):
        raise ConfigError(
            "expected a mapping of flat keys such as 'external-resource.gpu.amount: 1'",
            key=str(file),
        )
    return data, problems


def _read_bounded(file: Path) -> bytes:
    """The bytes of a regular file of at most :data:`MAX_CONFIG_FILE_BYTES`.

    Opened without blocking, so a FIFO with no writer is refused instead of waited for.

    Raises:
        OSError: the file cannot be opened, is not a regular file, or is too large.
    """
    fd = os.open(file, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError("not a regular file (a directory, device or pipe); give a YAML file")
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_CONFIG_FILE_BYTES:
                raise OSError(
                    f"larger than {MAX_CONFIG_FILE_BYTES // 1024} KiB; a config file holds flat keys only"
                )
        return b"".join(chunks)
    finally:
        os.close(fd)


def shown_key(key: str) -> str:
    """``key`` as printed in a problem: quoted when it is empty, padded or holds line breaks
    or control characters, so each problem stays on one line and the odd part is visible."""
    return key if key and key.isprintable() and key == key.strip() else repr(key)
