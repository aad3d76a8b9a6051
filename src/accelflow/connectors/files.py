"""Exactly-once text files in a local directory (Flink's ``FileSink``).

Attach a :class:`FileSink` with ``stream.sink_to(FileSink("out/"))``: every sink subtask
writes one line per record (``encoder(record) + "\\n"``, UTF-8) into part files, and a part
becomes visible only when the checkpoint covering its records completes (or, without
checkpointing, when the bounded job succeeds). After a failure and a restore, every record
appears in exactly one visible part, once.

Only *local* paths are supported (a directory on this machine, or a shared file system
mounted at the same path on every TaskExecutor); there is no ``s3://`` or fsspec support.

File names and life cycle, for subtask ``<subtask>`` whose random id ``<uid>`` (16 hex
digits, made at ``open``) keeps names unique across attempts and runs::

    .part-<uid>-<subtask>-<n>.inprogress   in progress: being written (hidden)
    .part-<uid>-<subtask>-<n>.inprogress   pending: rolled, closed and fsynced (still hidden)
    part-<uid>-<subtask>-<n><suffix>       committed: renamed at the checkpoint's commit

``part`` is the ``prefix``. Hidden names start with a dot, so readers globbing ``part-*``
never see data that may still be rolled back. A part rolls (becomes pending, and the next
record starts part ``n + 1``) when it reaches ``rolling_size`` bytes, when it is older than
``rolling_interval`` seconds at a write, and at every checkpoint barrier.

What is cleaned up, and what is left behind (always hidden, never visible):

- ``close()`` (also after a failure) removes the parts that were not yet handed to a
  checkpoint: their records are replayed from the last checkpoint.
- ``restore_state`` removes the hidden parts of the *restored* subtask (named by the uid in
  its state) that were written after that checkpoint, e.g. the parts of a checkpoint that never
  completed, or a part left by a process that was killed (no ``close``). It assumes that the
  failed attempt's processes are gone (the runtime stops them before it restores).
- Left behind: the hidden parts of an attempt killed (SIGKILL, lost machine) before any of
  its checkpoints completed, since no checkpoint names its uid; and the parts of subtasks whose
  state is dropped when a job is restored with a lower parallelism. Remove them with
  :meth:`FileSink.cleanup` while no job writes into the directory.

Restored state that names another directory than the sink's (the checkpoint of another job
whose sink has the same operator name) is refused with a :class:`~accelflow.CheckpointError`
naming both directories: nothing there is renamed or removed.

Example (squares of 0..999 in ``<out>/part-<uid>-<subtask>-0.txt``, one per subtask)::

    import pathlib, tempfile
    from accelflow import Environment
    from accelflow.connectors.files import FileSink

    with tempfile.TemporaryDirectory() as out:
        env = Environment()
        env.from_sequence(0, 999).map(lambda x: x * x).sink_to(
            FileSink(out, suffix=".txt", rolling_size=64 << 20), parallelism=2
        )
        env.execute("squares")
        parts = sorted(pathlib.Path(out).glob("part-*.txt"))
        assert sum(len(p.read_text().splitlines()) for p in parts) == 1000
"""

from __future__ import annotations

import math
import os
import re
import secrets
import stat
import time
from collections.abc import Callable, Sequence
from typing import Any, BinaryIO, NamedTuple, TypeVar

from accelflow._errors import AccelflowInternalError, CheckpointError, ConfigError, JobError
from accelflow.dataflow import RuntimeContext, Sink, iter_records

IN = TypeVar("IN")

#: default ``rolling_size``: 128 MiB, as Flink's default rolling policy
DEFAULT_ROLLING_SIZE = 128 << 20
_BUFFER = 1 << 20
_HIDDEN_SUFFIX = ".inprogress"
_UID_HEX = 16


class FileCommittable(NamedTuple):
    """What publishes one part: rename ``hidden`` (a pending part) to ``final``."""

    hidden: str
    final: str


def _hidden_pattern(prefix: str) -> re.Pattern[str]:
    return re.compile(rf"\.{re.escape(prefix)}-([0-9a-f]{{{_UID_HEX}}})-\d+-\d+{re.escape(_HIDDEN_SUFFIX)}")


def _fsync_directory(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove_own_file(path: str) -> bool:
    """Remove ``path`` if it is a regular file of this user (never follows a symlink)."""
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
            return False
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


class FileSink(Sink[IN]):
    """Write records as lines of text into part files that appear atomically when the
    checkpoint covering them completes (see the module documentation).

    Args:
        directory: a local directory, created at ``open`` when missing.
        prefix: the start of every part's name (``part`` gives ``part-<uid>-<subtask>-<n>``);
            must not start with a dot nor contain a path separator.
        suffix: the end of every committed part's name, e.g. ``".csv"``.
        encoder: turns a record into one line of text, without its newline (``str`` by
            default: a NumPy row prints as ``str(row)``, a ``Columns`` row as a tuple of NumPy
            scalars, so give your own encoder for CSV). It must return ``str``. A line that
            contains a newline is written as it is, so readers will count it as two records.
        rolling_size: a part rolls once it holds this many bytes (128 MiB by default).
        rolling_interval: a part rolls at the first write after it is this many seconds old
            (``None``: only by size and at checkpoints).
        clock: the monotonic clock ``rolling_interval`` is measured with (for tests).

    Raises:
        ConfigError: at construction, naming the argument that is wrong (e.g. ``directory``
            names an existing file).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        prefix: str = "part",
        suffix: str = "",
        encoder: Callable[[IN], str] = str,
        rolling_size: int = DEFAULT_ROLLING_SIZE,
        rolling_interval: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        path = os.path.abspath(os.fspath(directory))
        if os.path.lexists(path) and not os.path.isdir(path):
            raise ConfigError(f"{path!r} exists and is not a directory; give a directory "
                              "(it is created when missing)", key="FileSink(directory=)")
        if not isinstance(prefix, str) or not prefix or prefix.startswith(".") or "/" in prefix or "\0" in prefix:
            raise ConfigError(f"expected a non-empty file name part that does not start with '.' "
                              f"and has no '/', got {prefix!r}", key="FileSink(prefix=)")
        if not isinstance(suffix, str) or "/" in suffix or "\0" in suffix:
            raise ConfigError(f"expected a file name ending without '/', got {suffix!r}", key="FileSink(suffix=)")
        if not callable(encoder):
            raise ConfigError(f"expected a callable returning str, got {encoder!r}", key="FileSink(encoder=)")
        if isinstance(rolling_size, bool) or not isinstance(rolling_size, int) or rolling_size <= 0:
            raise ConfigError(f"expected a positive number of bytes, got {rolling_size!r}",
                              key="FileSink(rolling_size=)")
        if rolling_interval is not None and (
            isinstance(rolling_interval, bool) or not isinstance(rolling_interval, (int, float))
            or not math.isfinite(rolling_interval) or rolling_interval <= 0
        ):
            raise ConfigError(f"expected a positive number of seconds or None, got {rolling_interval!r}",
                              key="FileSink(rolling_interval=)")
        self.directory = path
        self.prefix = prefix
        self.suffix = suffix
        self.encoder = encoder
        self.rolling_size = rolling_size
        self.rolling_interval = None if rolling_interval is None else float(rolling_interval)
        self._clock = clock
        # set by open()
        self._uid: str | None = None
        self._subtask = 0
        self._next_part = 0
        self._file: BinaryIO | None = None
        self._file_path = ""
        self._file_size = 0
        self._file_opened_at = 0.0
        self._pending: list[FileCommittable] = []  # rolled, not yet returned by prepare_commit
        self._prepared: dict[str, FileCommittable] = {}  # returned, not yet seen committed

    def __repr__(self) -> str:
        return (f"FileSink(directory={self.directory!r}, prefix={self.prefix!r}, suffix={self.suffix!r}, "
                f"rolling_size={self.rolling_size}, rolling_interval={self.rolling_interval})")

    # -- the Sink contract -------------------------------------------------------------------

    def open(self, ctx: RuntimeContext) -> None:
        try:
            os.makedirs(self.directory, exist_ok=True)
        except (FileExistsError, NotADirectoryError) as exc:
            raise ConfigError(f"{self.directory!r} exists and is not a directory; give a directory",
                              key="FileSink(directory=)") from exc
        self._uid = secrets.token_hex(_UID_HEX // 2)
        self._subtask = ctx.index_of_this_subtask
        self._next_part = 0

    def write(self, chunk: Any) -> None:
        if self._uid is None:
            raise AccelflowInternalError("FileSink.write() was called before open(ctx)")
        if (self._file is not None and self.rolling_interval is not None
                and self._clock() - self._file_opened_at >= self.rolling_interval):
            self._roll()
        encoder, limit = self.encoder, self.rolling_size
        lines: list[bytes] = []
        size = self._file_size
        for record in iter_records(chunk):
            line = encoder(record)
            if not isinstance(line, str):
                raise TypeError(f"FileSink(encoder={_name(encoder)}) must return str, got "
                                f"{type(line).__name__} for a record of type {type(record).__name__}: {record!r:.80}")
            data = (line + "\n").encode("utf-8")
            lines.append(data)
            size += len(data)
            if size >= limit:
                self._append(lines, size)
                self._roll()
                lines, size = [], 0
        if lines:
            self._append(lines, size)

    def prepare_commit(self, checkpoint_id: int) -> list[Any]:
        """Roll the current part and return a :class:`FileCommittable` for every pending part
        since the last call (``[]`` when nothing was written)."""
        if self._file is not None:
            self._roll()
        ready, self._pending = self._pending, []
        if ready:
            _fsync_directory(self.directory)  # the hidden names survive a power loss too
        self._prepared.update((c.hidden, c) for c in ready)
        return list(ready)

    def commit(self, committables: Sequence[Any]) -> None:
        """Rename each pending part to its final name, then fsync the directory. Idempotent:
        a part already renamed is skipped. Works on any instance, opened or not.

        Raises:
            JobError: a part is neither pending nor committed (it was deleted; its records
                are lost).
            CheckpointError: a part is in another directory than this sink's (a restored
                checkpoint of a job that wrote elsewhere); nothing is renamed then.
        """
        pairs = [_committable(item) for item in committables]
        for _, final in pairs:
            self._check_directory(os.path.dirname(final))
        directories = set()
        for hidden, final in pairs:
            try:
                os.rename(hidden, final)
            except FileNotFoundError:
                if not os.path.lexists(final):
                    raise JobError(
                        f"FileSink cannot commit {hidden!r}: neither it nor its final name {final!r} "
                        "exists; it was deleted after its checkpoint, and its records are lost"
                    ) from None
            self._prepared.pop(hidden, None)
            directories.add(os.path.dirname(final))
        for directory in sorted(directories):
            _fsync_directory(directory)

    def snapshot_state(self, checkpoint_id: int) -> Any:
        """This subtask's uid and the hidden parts that a checkpoint may still publish (handed
        out by ``prepare_commit`` and not committed yet, or about to be)."""
        keep = set(self._prepared) | {c.hidden for c in self._pending}
        if self._file is not None:
            keep.add(self._file_path)
        return {"directory": self.directory, "prefix": self.prefix, "uid": self._uid,
                "keep": sorted(os.path.basename(p) for p in keep)}

    def restore_state(self, state: Any) -> None:
        """Remove the restored subtask's hidden parts that its checkpoint does not name (they
        hold records that are replayed). ``state`` is one :meth:`snapshot_state` result, a
        list of them (several old subtasks restored into this one), or None."""
        states = [] if state is None else list(state) if isinstance(state, (list, tuple)) else [state]
        for old in states:
            if not (isinstance(old, dict) and {"directory", "prefix", "uid", "keep"} <= old.keys()):
                raise ConfigError(f"the restored state is not a FileSink's: {old!r:.200}; was the "
                                  "sink of this job changed since the checkpoint?", key="FileSink.restore_state")
            self._check_directory(old["directory"])
            if old["uid"] is None or old["uid"] == self._uid or not os.path.isdir(old["directory"]):
                continue
            keep = set(old["keep"])
            pattern = _hidden_pattern(old["prefix"])
            with os.scandir(old["directory"]) as entries:
                names = [e.name for e in entries]
            for name in names:
                match = pattern.fullmatch(name)
                if match and match.group(1) == old["uid"] and name not in keep:
                    _remove_own_file(os.path.join(old["directory"], name))

    def close(self) -> None:
        """Remove the parts not handed to a checkpoint yet (the current one and those rolled
        since the last ``prepare_commit``); their records are replayed after a failure."""
        if self._file is not None:
            self._file.close()
            self._file = None
            _remove_own_file(self._file_path)
        for part in self._pending:
            _remove_own_file(part.hidden)
        self._pending = []

    def _check_directory(self, directory: Any) -> None:
        """Refuse restored state of a sink that wrote to another directory: publishing or
        cleaning up there would change another job's output."""
        if isinstance(directory, str) and _same_directory(directory, self.directory):
            return
        raise CheckpointError(
            f"the restored checkpoint's FileSink wrote to this directory, but this job's FileSink "
            f"writes to {self.directory}; restore a checkpoint of this job, give the sink the "
            "directory of the job that wrote the checkpoint, or rename the sink operator and "
            "restore with --allow-non-restored-state to drop its state", path=str(directory))

    # -- maintenance -------------------------------------------------------------------------

    @staticmethod
    def cleanup(directory: str | os.PathLike[str], *, prefix: str = "part") -> list[str]:
        """Remove every hidden part of ``prefix`` in ``directory`` (regular files of this user
        only) and return their paths.

        Call it only while no job writes into ``directory`` and no checkpoint of a job that
        wrote there will be restored: a restored checkpoint's pending parts are hidden too,
        and committing them after this fails with a :class:`JobError`.
        """
        path = os.path.abspath(os.fspath(directory))
        pattern = _hidden_pattern(prefix)
        with os.scandir(path) as entries:
            names = sorted(e.name for e in entries if pattern.fullmatch(e.name))
        return [p for p in (os.path.join(path, n) for n in names) if _remove_own_file(p)]

    # -- parts -------------------------------------------------------------------------------

    def _append(self, lines: list[bytes], size: int) -> None:
        if self._file is None:
            self._open_part()
        assert self._file is not None
        self._file.write(b"".join(lines))
        self._file_size = size

    def _open_part(self) -> None:
        name = f"{self.prefix}-{self._uid}-{self._subtask}-{self._next_part}"
        self._next_part += 1
        self._file_path = os.path.join(self.directory, f".{name}{_HIDDEN_SUFFIX}")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(self._file_path, flags, 0o644)
        self._file = os.fdopen(fd, "wb", buffering=_BUFFER)
        self._file_size = 0
        self._file_opened_at = self._clock()

    def _roll(self) -> None:
        """Close the current part: fsynced and pending when it holds data, removed if empty."""
        file, self._file = self._file, None
        if file is None:
            return
        try:
            file.flush()
            if self._file_size:
                os.fsync(file.fileno())
        finally:
            file.close()
        if not self._file_size:
            _remove_own_file(self._file_path)
            return
        name = os.path.basename(self._file_path)[1:-len(_HIDDEN_SUFFIX)]
        self._pending.append(FileCommittable(self._file_path, os.path.join(self.directory, name + self.suffix)))
        self._file_size = 0


def _committable(item: Any) -> tuple[str, str]:
    if (not isinstance(item, (tuple, list)) or len(item) != 2
            or not all(isinstance(p, str) for p in item)):
        raise TypeError(f"FileSink.commit: expected (hidden path, final path) pairs from "
                        f"prepare_commit, got {item!r:.200}")
    hidden, final = item
    if os.path.dirname(hidden) != os.path.dirname(final):
        raise ValueError(f"FileSink.commit: {hidden!r} and {final!r} are not in the same directory")
    return hidden, final


def _same_directory(a: str, b: str) -> bool:
    """``a`` and ``b`` name one directory (as written, or through links)."""
    if os.path.abspath(a) == b:
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _name(fn: Any) -> str:
    return str(getattr(fn, "__qualname__", None) or repr(fn))
