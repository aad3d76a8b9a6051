"""The files of checkpoints and savepoints on any filesystem fsspec knows: paths, atomic
writes and who may read them.

On a local filesystem every directory the store creates gets the mode of
``execution.checkpointing.permissions`` (``private``: 0700) and every file is created 0600
and opened up to that mode's file mode (``group``: 0640) only once it is complete. A
directory that already exists (the configured ``execution.checkpointing.dir`` itself, say)
keeps its mode. Object stores (``s3://``, ``gs://``...) have no such modes: their buckets'
own access control applies; ``memory://`` lives in the JobManager's process.
"""

from __future__ import annotations

import logging
import os
import secrets
from typing import Any

from accelflow._errors import CheckpointError

#: ``execution.checkpointing.permissions`` -> (directory mode, file mode)
MODES = {"private": (0o700, 0o600), "group": (0o750, 0o640), "world": (0o755, 0o644)}
_CREATED_FILE_MODE = 0o600
_log = logging.getLogger("accelflow.runtime")


def _normalized(url: str) -> str:
    """A URL as given, or a plain path made absolute (``~`` expanded)."""
    if "://" in url:
        return url
    return os.path.abspath(os.path.expanduser(url))


def _join(url: str, name: str) -> str:
    return f"{url.rstrip('/')}/{name}"


def _filesystem(url: str) -> tuple[Any, str]:
    from fsspec.core import url_to_fs

    try:
        fs, path = url_to_fs(url)
    except (ImportError, ValueError) as exc:
        raise CheckpointError(
            f"no filesystem for this URL ({exc}); use a local path or an fsspec URL whose "
            "package is installed (e.g. s3fs for s3://)", path=url,
        ) from exc
    return fs, str(path).rstrip("/") or "/"


def _is_local(fs: Any) -> bool:
    protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    return "file" in protocols or "local" in protocols


def _makedirs(fs: Any, directory: str, mode: int) -> None:
    """Create ``directory`` and its missing parents; on a local disk each one it creates gets
    exactly ``mode`` (whatever the umask), and those that exist keep theirs."""
    if not _is_local(fs):
        fs.makedirs(directory, exist_ok=True)
        return
    missing: list[str] = []
    path = directory
    while not os.path.isdir(path) and path not in ("", "/"):
        missing.append(path)
        path = os.path.dirname(path)
    for path in reversed(missing):
        try:
            os.mkdir(path, mode)
        except FileExistsError:
            continue  # made by another writer meanwhile (a job of the same base directory)
        os.chmod(path, mode)


def _put(fs: Any, path: str, data: bytes) -> None:
    """Write ``data`` to ``path``: on local disks a synced temporary file of mode 0600 (see
    :func:`_chmod` to open it up) renamed over ``path``; elsewhere one put."""
    if not _is_local(fs):
        fs.pipe_file(path, data)
        return
    directory, _, name = path.rpartition("/")
    temporary = f"{directory}/.{name}.{secrets.token_hex(4)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        with open(os.open(temporary, flags, _CREATED_FILE_MODE), "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    finally:
        if os.path.lexists(temporary):
            os.unlink(temporary)


def _chmod(fs: Any, path: str, mode: int) -> None:
    """Give a file :func:`_put` wrote ``mode``, on local disks, where it differs from 0600."""
    if mode != _CREATED_FILE_MODE and _is_local(fs):
        os.chmod(path, mode)


def _remove(fs: Any, path: str, *, quiet: bool = False) -> None:
    """Delete ``path`` (recursively) if it exists; ``quiet``: log storage errors, not raise."""
    try:
        fs.rm(path, recursive=True)
    except FileNotFoundError:
        pass
    except Exception as exc:
        if not quiet:
            raise
        _log.warning("cannot delete %s: %s: %s", path, type(exc).__name__, exc)
