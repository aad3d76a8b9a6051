"""Checkpoint and savepoint storage, on any filesystem fsspec knows (Flink's layout).

::

    <execution.checkpointing.dir>/<job-uid>/chk-<n>/op-0-source.state
                                                   /op-1-map.state
                                                   /_metadata        written last
    <savepoint-dir>/savepoint-<job-uid[:6]>-<random>/   the same files

A directory without ``_metadata`` is incomplete and never restored from. ``_metadata`` is
JSON naming every state file with its size and SHA-256, signed with the user's key (see
:mod:`._checkpoint_signing`: a restore checks the signature before it reads any state); a
state file is ``pickle.dumps(list_of_bytes)``, one opaque blob per subtask, never unpickled
here. Local files are written under a temporary name and renamed, private to their owner
unless ``execution.checkpointing.permissions`` says otherwise (see :mod:`._checkpoint_files`);
object stores get one (atomic) put.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import pickle
import re
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from accelflow._errors import CheckpointError
from accelflow.runtime import SYSTEM_CLOCK, Clock
from accelflow.runtime.jobmanager._checkpoint_files import (
    MODES, _chmod, _filesystem, _join, _makedirs, _normalized, _put, _remove,
)
from accelflow.runtime.jobmanager._checkpoint_signing import CheckpointSigning

CHECKPOINT_FORMAT = "accelflow-checkpoint"
METADATA_VERSION = 1
METADATA_FILE = "_metadata"
DEFAULT_CHECKPOINT_URL = "memory://accelflow-checkpoints"
MAX_METADATA_BYTES = 64 << 20
"""The largest ``_metadata`` read; an accelflow one is a few KiB."""

_CHECKPOINT_DIR = re.compile(r"chk-(\d{1,18})")
_STATE_FILE = re.compile(r"op-\d{1,9}-[A-Za-z0-9_.-]{0,60}\.state")
_JOB_UID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, slots=True)
class OperatorState:
    """The state of one operator: one opaque blob per subtask, in subtask order.

    ``name`` is unique in its job (state is matched to operators by name on restore), ``kind``
    what the operator is (``map``, ``source``...; a restore checks it), ``subtask_states`` the
    bytes each subtask produced (pickled by the subtask), ``len(subtask_states) == parallelism``.
    """

    name: str
    kind: str
    parallelism: int
    subtask_states: tuple[bytes, ...]

    def __post_init__(self) -> None:
        for field in ("name", "kind"):
            if not isinstance(getattr(self, field), str) or not getattr(self, field):
                raise ValueError(f"operator {field} must be non-empty text, got {getattr(self, field)!r}")
        if isinstance(self.parallelism, bool) or not isinstance(self.parallelism, int) or self.parallelism < 1:
            raise ValueError(f"operator {self.name!r}: parallelism must be a positive integer, got {self.parallelism!r}")
        states = tuple(self.subtask_states)
        if len(states) != self.parallelism or not all(type(s) is bytes for s in states):
            got = [type(s).__name__ for s in states]
            raise ValueError(f"operator {self.name!r}: expected {self.parallelism} subtask states as bytes, got {got}")
        object.__setattr__(self, "subtask_states", states)


@dataclass(frozen=True, slots=True)
class CompletedCheckpoint:
    """A checkpoint or savepoint whose ``_metadata`` is written.

    ``path`` is its directory (a local path or a URL, what :func:`load_checkpoint` takes),
    ``size`` the bytes of all its files, ``timestamp`` when it completed (seconds since the epoch).
    """

    checkpoint_id: int
    path: str
    size: int
    timestamp: float
    is_savepoint: bool


@dataclass(frozen=True, slots=True)
class RestoredCheckpoint:
    """A checkpoint read back, every state file checked against its size and SHA-256."""

    path: str
    checkpoint_id: int
    job_name: str
    operators: Mapping[str, OperatorState]
    timestamp: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "operators", MappingProxyType(dict(self.operators)))


class CheckpointStore:
    """The checkpoints of one job (``job_uid``, one path segment) under ``<base_url>/<job_uid>``.

    ``base_url`` is ``execution.checkpointing.dir``, a local path (made absolute) or an fsspec
    URL; ``None`` keeps them in this process's memory (``memory://``), which survives subtask
    and TaskExecutor failures but not the JobManager. ``signing`` signs ``_metadata`` (the
    per-user key by default); ``permissions`` is a key of :data:`MODES` (local disks only);
    ``clock`` gives each checkpoint's ``timestamp``."""

    def __init__(self, base_url: str | None, job_uid: str, *, signing: CheckpointSigning | None = None,
                 permissions: str = "private", clock: Clock = SYSTEM_CLOCK) -> None:
        if not isinstance(job_uid, str) or not _JOB_UID.fullmatch(job_uid):
            raise ValueError(f"job_uid must be one path segment of letters, digits, '_', '.', '-'; got {job_uid!r}")
        self.base_url = _normalized(base_url or DEFAULT_CHECKPOINT_URL)
        self.job_uid = job_uid
        self.job_path = _join(self.base_url, job_uid)
        self.signing = signing or CheckpointSigning()
        self.dir_mode, self.file_mode = MODES[permissions]
        self.clock = clock
        self._fs, self._job_dir = _filesystem(self.job_path)

    def __repr__(self) -> str:
        return f"CheckpointStore({self.job_path!r})"

    def write(
        self, checkpoint_id: int, job_name: str, operators: Sequence[OperatorState], *,
        savepoint_dir: str | None = None,
    ) -> CompletedCheckpoint:
        """Write checkpoint ``checkpoint_id`` (or, with ``savepoint_dir``, a savepoint there):
        every state file, then ``_metadata``.

        Raises:
            CheckpointError: the storage failed (the partial directory, which never has
                ``_metadata``, is removed), or checkpoint ``checkpoint_id`` already exists.
            ValueError: a bad id or two operators with one name (a bug of the caller).
        """
        if isinstance(checkpoint_id, bool) or not isinstance(checkpoint_id, int) or checkpoint_id < 0:
            raise ValueError(f"checkpoint_id must be an integer >= 0, got {checkpoint_id!r}")
        names = [op.name for op in operators]
        if len(set(names)) != len(names):
            raise ValueError(f"operator names must be unique, got {names}")
        if savepoint_dir is None:
            fs, directory = self._fs, f"{self._job_dir}/chk-{checkpoint_id}"
            url = _join(self.job_path, f"chk-{checkpoint_id}")
        else:
            name = f"savepoint-{self.job_uid[:6]}-{secrets.token_hex(6)}"
            url = _join(_normalized(savepoint_dir), name)
            fs, directory = _filesystem(url)
        try:
            if fs.exists(f"{directory}/{METADATA_FILE}"):
                raise CheckpointError("already exists and is complete; checkpoint ids are never reused", path=url)
            if fs.exists(directory):  # a leftover of a failed attempt with this id
                fs.rm(directory, recursive=True)
            _makedirs(fs, directory, self.dir_mode)
            entries: list[dict[str, Any]] = []
            for index, op in enumerate(operators):
                data = pickle.dumps(list(op.subtask_states), protocol=5)
                file = f"op-{index}-{re.sub(r'[^A-Za-z0-9_.-]+', '_', op.name)[:60].strip('._') or 'op'}.state"
                self._put(fs, f"{directory}/{file}", data)
                entries.append({"name": op.name, "kind": op.kind, "parallelism": op.parallelism, "file": file,
                                "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
            timestamp = self.clock.time()
            content: dict[str, Any] = {
                "format": CHECKPOINT_FORMAT, "version": METADATA_VERSION, "checkpoint_id": checkpoint_id,
                "job_name": job_name, "job_uid": self.job_uid, "timestamp": timestamp,
                "savepoint": savepoint_dir is not None, "operators": entries}
            content["signature"] = self.signing.sign(content)
            metadata = json.dumps(content, indent=1).encode()
            self._put(fs, f"{directory}/{METADATA_FILE}", metadata)  # last: now the checkpoint is complete
        except CheckpointError:
            raise
        except Exception as exc:
            _remove(fs, directory, quiet=True)  # it has no _metadata: never restored from anyway
            raise CheckpointError(
                f"cannot write {'savepoint' if savepoint_dir else 'checkpoint'} {checkpoint_id}: "
                f"{type(exc).__name__}: {exc}; check that the directory is writable and has space",
                path=url,
            ) from exc
        size = sum(e["size"] for e in entries) + len(metadata)
        return CompletedCheckpoint(checkpoint_id, url, size, timestamp, savepoint_dir is not None)

    def _put(self, fs: Any, path: str, data: bytes) -> None:
        _put(fs, path, data)
        _chmod(fs, path, self.file_mode)

    def retained(self) -> list[CompletedCheckpoint]:
        """This job's complete checkpoints (not savepoints), oldest first. Directories
        without a readable ``_metadata`` are left out."""
        found: list[CompletedCheckpoint] = []
        for checkpoint_id, name in _checkpoint_dirs(self._fs, self._job_dir):
            url = _join(self.job_path, name)
            try:
                metadata = _read_metadata(self._fs, f"{self._job_dir}/{name}", url)
            except CheckpointError:
                continue
            size = sum(op["size"] for op in metadata["operators"]) + metadata["_size"]
            found.append(CompletedCheckpoint(checkpoint_id, url, size, metadata["timestamp"], False))
        return found

    def latest(self) -> CompletedCheckpoint | None:
        """The newest complete checkpoint, or ``None``."""
        return next(reversed(self.retained()), None)

    def prune(self, keep: int) -> None:
        """Delete the oldest complete checkpoints beyond the newest ``keep``. Savepoints,
        incomplete directories (possibly being written) and other jobs are never touched;
        a directory already removed by hand is skipped, one that cannot be deleted logged."""
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
            raise ValueError(f"keep must be an integer >= 0, got {keep!r}")
        completed = self.retained()
        for checkpoint in completed[: max(len(completed) - keep, 0)]:
            directory = f"{self._job_dir}/chk-{checkpoint.checkpoint_id}"  # _metadata first: never
            _remove(self._fs, f"{directory}/{METADATA_FILE}", quiet=True)  # half-deleted yet complete
            _remove(self._fs, directory, quiet=True)

    def discard_all(self) -> None:
        """Delete this job's checkpoint directory (savepoints live elsewhere and stay)."""
        _remove(self._fs, self._job_dir)


def load_checkpoint(path: str, signing: CheckpointSigning | None = None) -> RestoredCheckpoint:
    """Read the checkpoint or savepoint at ``path``: a ``chk-<n>`` or savepoint directory
    (or its ``_metadata`` file), or a job's checkpoint directory, whose newest complete
    checkpoint is read. Its signature is checked with ``signing`` (the per-user key by
    default) before any state file is read. Nothing is written.

    Raises:
        CheckpointError: the path is missing, incomplete, of another format or a newer
            version, not signed with the key, or a state file is missing or corrupt; the
            message names the file.
    """
    if not isinstance(path, str) or not path.strip():
        raise CheckpointError("expected a checkpoint or savepoint directory", path=repr(path))
    url = _normalized(path.strip())
    fs, directory = _filesystem(url)
    if directory.rstrip("/").endswith(f"/{METADATA_FILE}") and fs.isfile(directory):
        directory, url = directory.rstrip("/").rpartition("/")[0], url.rstrip("/").rpartition("/")[0]
    if not fs.exists(directory):
        raise CheckpointError("no such checkpoint or savepoint directory; check execution.state-recovery.path", path=url)
    if not fs.exists(f"{directory}/{METADATA_FILE}"):
        candidates = _checkpoint_dirs(fs, directory)
        complete = [(n, name) for n, name in candidates if fs.exists(f"{directory}/{name}/{METADATA_FILE}")]
        if not complete:
            what = (f"holds only incomplete checkpoints ({', '.join(name for _, name in candidates)}: "
                    "no _metadata, they were never finished)" if candidates else
                    "has no _metadata: it is not a checkpoint or savepoint, or an incomplete one")
            raise CheckpointError(f"{what}; give a chk-<n> or savepoint directory that has a {METADATA_FILE} file",
                                  path=url)
        name = complete[-1][1]
        directory, url = f"{directory}/{name}", _join(url, name)
    metadata = _read_metadata(fs, directory, url)
    (signing or CheckpointSigning()).check(metadata, _join(url, METADATA_FILE))
    operators: dict[str, OperatorState] = {}
    for entry in metadata["operators"]:
        file_url = _join(url, entry["file"])
        states = _read_state(fs, f"{directory}/{entry['file']}", file_url, entry)
        operators[entry["name"]] = OperatorState(entry["name"], entry["kind"], entry["parallelism"], states)
    return RestoredCheckpoint(url, metadata["checkpoint_id"], metadata["job_name"], operators, metadata["timestamp"])


def match_operators(
    restored: RestoredCheckpoint, operators: Mapping[str, str], allow_non_restored: bool
) -> dict[str, OperatorState]:
    """The restored states of the operators ``{name: kind}`` of the new job that have one;
    new operators need none, and unclaimed state is dropped if ``allow_non_restored``.

    Raises:
        CheckpointError: unclaimed state (without ``allow_non_restored``), or an operator
            whose kind differs from the one that wrote its state.
    """
    unclaimed = [name for name in restored.operators if name not in operators]
    if unclaimed and not allow_non_restored:
        raise CheckpointError(
            f"state of operators {', '.join(repr(n) for n in unclaimed)} has no target in this job; "
            "give the operators the names they had in the job that wrote it, or set "
            "execution.state-recovery.ignore-unclaimed-state: true (--allow-non-restored-state) to skip it",
            path=restored.path,
        )
    matched: dict[str, OperatorState] = {}
    for name, kind in operators.items():
        state = restored.operators.get(name)
        if state is not None and state.kind != kind:
            raise CheckpointError(
                f"operator {name!r} is a {kind!r} operator in this job but its state was written by a "
                f"{state.kind!r} operator; rename one of them so that state goes to the operator that wrote it",
                path=restored.path,
            )
        if state is not None:
            matched[name] = state
    return matched


def _checkpoint_dirs(fs: Any, directory: str) -> list[tuple[int, str]]:
    """``(n, "chk-<n>")`` of the ``chk-<n>`` directories in ``directory``, by ``n``."""
    try:
        names = [str(entry).rstrip("/").rpartition("/")[2] for entry in fs.ls(directory, detail=False)]
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted((int(m.group(1)), name) for name in set(names) if (m := _CHECKPOINT_DIR.fullmatch(name)))


def _read_metadata(fs: Any, directory: str, url: str) -> dict[str, Any]:
    """The checked ``_metadata`` of ``directory``, with ``_size`` (its own size in bytes)."""
    file = _join(url, METADATA_FILE)
    try:
        with fs.open(f"{directory}/{METADATA_FILE}", "rb") as handle:
            data = handle.read(MAX_METADATA_BYTES + 1)
    except FileNotFoundError as exc:
        raise CheckpointError("missing: the checkpoint is incomplete", path=file) from exc
    except OSError as exc:
        raise CheckpointError(f"cannot be read ({exc}); check its permissions", path=file) from exc
    if len(data) > MAX_METADATA_BYTES or data.lstrip()[:1] not in (b"{", b"["):
        raise CheckpointError(
            "not an accelflow checkpoint (not JSON; Flink's own checkpoints cannot be restored by "
            "accelflow); give a directory written by accelflow", path=file,
        )
    try:
        metadata = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise CheckpointError(
            f"corrupt JSON ({exc}); restore from another checkpoint (an older chk-<n>)", path=file
        ) from exc
    if not isinstance(metadata, dict) or metadata.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(
            f"not an accelflow checkpoint (its format is not {CHECKPOINT_FORMAT!r}); "
            "give a directory written by accelflow", path=file,
        )
    version = metadata.get("version")
    if isinstance(version, int) and not isinstance(version, bool) and version > METADATA_VERSION:
        raise CheckpointError(
            f"written by a newer accelflow (format version {version}; this one reads up to "
            f"{METADATA_VERSION}); upgrade accelflow to restore it", path=file,
        )
    if problem := _metadata_problem(metadata):
        raise CheckpointError(f"corrupt: {problem}; restore from another checkpoint", path=file)
    metadata["_size"] = len(data)
    return metadata


def _metadata_problem(metadata: dict[str, Any]) -> str | None:
    """What is wrong with a ``_metadata`` of the right format, or ``None``."""
    for field, valid in _METADATA_FIELDS.items():
        if not valid(metadata.get(field)):
            return f"{field} is missing or invalid ({metadata.get(field)!r})"
    names: set[str] = set()
    files: set[str] = set()
    for position, op in enumerate(metadata["operators"]):
        if not isinstance(op, dict):
            return f"operator {position} is not an object"
        for field, valid in _OPERATOR_FIELDS.items():
            if not valid(op.get(field)):
                return f"operator {position}: {field} is missing or invalid ({op.get(field)!r})"
        if op["name"] in names or op["file"] in files:
            return f"operator {position}: name {op['name']!r} or file {op['file']!r} appears twice"
        names.add(op["name"])
        files.add(op["file"])
    return None


_count: Callable[[object], bool] = lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0
_positive_int: Callable[[object], bool] = lambda v: _count(v) and v != 0
_text: Callable[[object], bool] = lambda v: isinstance(v, str) and bool(v)
_METADATA_FIELDS: dict[str, Callable[[object], bool]] = {
    "version": _positive_int, "checkpoint_id": _count, "job_name": _text, "job_uid": _text,
    "timestamp": lambda v: isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v),
    "savepoint": lambda v: isinstance(v, bool), "operators": lambda v: isinstance(v, list),
}
_OPERATOR_FIELDS: dict[str, Callable[[object], bool]] = {
    "name": _text, "kind": _text, "parallelism": _positive_int, "size": _count,
    "file": lambda v: isinstance(v, str) and bool(_STATE_FILE.fullmatch(v)),
    "sha256": lambda v: isinstance(v, str) and bool(_SHA256.fullmatch(v)),
}


class _BytesOnly(pickle.Unpickler):
    """Unpickles plain containers of bytes only: no class or function is ever loaded."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}: a state file holds bytes only")


def _read_state(fs: Any, path: str, url: str, entry: Mapping[str, Any]) -> tuple[bytes, ...]:
    """The per-subtask blobs of one state file, checked against its ``_metadata`` entry."""
    what, size, fix = f"state file of operator {entry['name']!r}", entry["size"], "restore from an older chk-<n>"
    try:
        with fs.open(path, "rb") as handle:
            data = handle.read(size + 1)
    except FileNotFoundError as exc:
        raise CheckpointError(f"{what} is missing; {fix}", path=url) from exc
    except OSError as exc:
        raise CheckpointError(f"{what} cannot be read ({exc})", path=url) from exc
    if len(data) != size:
        problem = f"is {'larger' if len(data) > size else 'smaller'} than the {size} bytes _metadata gives"
    elif hashlib.sha256(data).hexdigest() != entry["sha256"]:
        problem = "fails its SHA-256 check"
    else:
        try:
            states = _BytesOnly(io.BytesIO(data)).load()
        except Exception as exc:
            raise CheckpointError(f"corrupt: {what} cannot be read ({exc}); {fix}", path=url) from exc
        if isinstance(states, list) and len(states) == entry["parallelism"] and all(type(s) is bytes for s in states):
            return tuple(states)
        problem = f"does not hold {entry['parallelism']} subtask states"
    raise CheckpointError(f"corrupt: {what} {problem}; {fix}", path=url)
