"""Signed checkpoints: HMAC-SHA256 of ``_metadata`` with a key kept outside the checkpoint.

A subtask's state is pickled, and restoring it runs whatever code the pickle names, so a
checkpoint is trusted only when it proves that it was written with the user's key:
``_metadata`` lists every state file's size and SHA-256, and its ``signature`` entry is the
HMAC-SHA256 of the rest of ``_metadata`` (canonical JSON: sorted keys, no spaces)::

    "signature": {"algorithm": "HMAC-SHA256", "key-id": "1f0c9a2e4b7d3c58", "value": "<64 hex>"}

``key-id`` only tells keys apart in error messages (an HMAC of a fixed text; it reveals
nothing of the key). The key is the content of a file (whitespace around it stripped, at
least 32 bytes): ``execution.checkpointing.signing-key-file``, or by default
``checkpoint-signing.key`` in the per-user state directory (``$ACCELFLOW_STATE_DIR``, default
``$XDG_STATE_HOME/accelflow``, as session clusters use). A missing key file is created with
64 random hex digits, mode 0600, when the first checkpoint is written. A key file that others
may read, or that its group may write, is refused: whoever reads it can forge checkpoints; so
are a symbolic link (opened with ``O_NOFOLLOW``) and a file of another user than the current
one or root (checked on the opened file, ``fstat``). The default's state directory must be
the user's own (mode 0700; a wider one is tightened, as session clusters' is:
:func:`accelflow.config.state_dir`).

A restore checks the signature before any state is read
(``execution.state-recovery.verify-signature: false`` trusts a checkpoint as it is).
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import json
import logging
import os
import secrets
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from accelflow._errors import CheckpointError, ConfigError
from accelflow.config import Configuration, state_dir, user_state_dir
from accelflow.config import keys as k

ALGORITHM = "HMAC-SHA256"
DEFAULT_KEY_FILE = "checkpoint-signing.key"
MIN_KEY_BYTES = 32
_KEY_ID_TEXT = b"accelflow checkpoint signing key id"
_NEW_KEY = "python -c 'import secrets; print(secrets.token_hex(32))' > FILE"
_TRUST = (f"if it comes from storage that nobody else can write, trust it with "
          f"-D {k.VERIFY_CHECKPOINT_SIGNATURE.name}=false")
_log = logging.getLogger("accelflow.runtime")
_TRUSTED: set[str] = set()  # the files restored unchecked, each warned about once


def canonical(metadata: Mapping[str, Any]) -> bytes:
    """What the signature covers: ``metadata`` without its signature, as canonical JSON.

    Example:
        >>> canonical({"b": 1, "a": [1.5, "é"], "signature": {}})
        b'{"a":[1.5,"\\\\u00e9"],"b":1}'
    """
    body = {key: value for key, value in metadata.items() if key not in ("signature", "_size")}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False).encode("ascii")


class CheckpointSigning:
    """The key that signs the checkpoints of a job and checks those it restores.

    Args:
        key_file: the key's file; ``None``: the per-user default (see the module).
        verify: ``False`` restores checkpoints whatever their signature (logged).

    Example:
        >>> import tempfile
        >>> signing = CheckpointSigning(tempfile.mkdtemp() + "/key")
        >>> metadata = {"checkpoint_id": 3, "operators": []}
        >>> metadata["signature"] = signing.sign(metadata)
        >>> signing.check(metadata, "chk-3/_metadata")   # passes
        >>> metadata["checkpoint_id"] = 4   # edited after it was signed
        >>> try:
        ...     signing.check(metadata, "chk-3/_metadata")
        ... except CheckpointError as exc:
        ...     print(str(exc)[:46])
        chk-3/_metadata: its signature does not verify
    """

    def __init__(self, key_file: str | os.PathLike[str] | None = None, *, verify: bool = True) -> None:
        self.key_file = Path(key_file).expanduser().absolute() if key_file is not None else None
        self.verify = verify
        self._key: bytes | None = None

    @classmethod
    def from_config(cls, config: Configuration) -> CheckpointSigning:
        """The key and check that ``config`` asks for (the keys
        ``execution.checkpointing.signing-key-file`` and
        ``execution.state-recovery.verify-signature``)."""
        return cls(config.get_optional(k.CHECKPOINT_SIGNING_KEY_FILE),
                   verify=config.get(k.VERIFY_CHECKPOINT_SIGNATURE))

    def verifying(self) -> CheckpointSigning:
        """This key, checking signatures whatever ``verify`` says (for the checkpoints a job
        wrote itself: trusting applies to the one it starts from)."""
        strict = CheckpointSigning(self.key_file)
        strict._key = self._key
        return strict

    @property
    def path(self) -> Path:
        """The key file (the per-user default unless one is configured)."""
        return self.key_file if self.key_file is not None else user_state_dir() / DEFAULT_KEY_FILE

    def sign(self, metadata: Mapping[str, Any]) -> dict[str, str]:
        """The ``signature`` entry of ``metadata`` (the key is created if missing).

        Raises:
            CheckpointError: the key file cannot be made or read, or others may read it.
        """
        key = self._load(create=True)
        assert key is not None
        return {"algorithm": ALGORITHM, "key-id": _key_id(key),
                "value": hmac.new(key, canonical(metadata), hashlib.sha256).hexdigest()}

    def check(self, metadata: Mapping[str, Any], file: str) -> None:
        """Pass if ``metadata`` (the parsed ``_metadata`` at ``file``) carries a valid signature
        of this key, or verifying is off; else refuse it, naming ``file`` and the way to
        trust it.

        Raises:
            CheckpointError: not signed, signed with another key, or changed since.
        """
        if not self.verify:
            if file not in _TRUSTED:  # once per process: the CLI checks what the JobManager restores
                _TRUSTED.add(file)
                _log.warning("%s: restored without checking its signature (%s: false)", file,
                             k.VERIFY_CHECKPOINT_SIGNATURE.name)
            return
        signature = metadata.get("signature")
        if signature is None:
            raise CheckpointError(
                "it is not signed (written by an accelflow without checkpoint signing, or edited), "
                f"and restoring runs any code its pickled state holds; {_TRUST}", path=file)
        if not (isinstance(signature, dict) and signature.get("algorithm") == ALGORITHM
                and all(isinstance(signature.get(f), str) for f in ("key-id", "value"))):
            raise CheckpointError(f"its signature is not a valid {ALGORITHM} entry; {_TRUST}", path=file)
        key = self._load(create=False)
        if key is None or signature["key-id"] != _key_id(key):
            have = f"the key in {self.path} has id {_key_id(key)}" if key else f"there is no key at {self.path}"
            raise CheckpointError(
                f"it was signed with another key (id {signature['key-id']:.16}; {have}); set "
                f"{k.CHECKPOINT_SIGNING_KEY_FILE.name} to the key file it was written with, or, {_TRUST}",
                path=file)
        expected = hmac.new(key, canonical(metadata), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, signature["value"]):
            raise CheckpointError(
                f"its signature does not verify with the key in {self.path}: it was changed after it "
                f"was written; {_TRUST}", path=file)

    def _load(self, *, create: bool) -> bytes | None:
        """The key; ``None`` if its file is missing and not ``create``. The default's directory
        goes through :func:`state_dir`'s checks (the user's own, mode 0700) first."""
        if self._key is None:
            path = self.path if self.key_file is not None else _default_key_file()
            if create and not path.exists():
                _create_key_file(path)
            try:
                self._key = _read_key_file(path)
            except FileNotFoundError:
                return None
        return self._key


def _default_key_file() -> Path:
    """The default key file, in the state directory (checked: the user's own, made 0700)."""
    try:
        return state_dir() / DEFAULT_KEY_FILE
    except ConfigError as exc:
        raise CheckpointError(str(exc), path=str(user_state_dir() / DEFAULT_KEY_FILE)) from exc


def _key_id(key: bytes) -> str:
    return hmac.new(key, _KEY_ID_TEXT, hashlib.sha256).hexdigest()[:16]


def _create_key_file(path: Path) -> None:
    """A new random key at ``path`` (mode 0600), unless another process made one first."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            with open(fd, "w", encoding="ascii") as file:
                file.write(secrets.token_hex(32) + "\n")
                file.flush()
                os.fsync(file.fileno())
            os.link(temporary, path)  # fails if it exists: then the other process's key stands
        except FileExistsError:
            pass
        finally:
            temporary.unlink(missing_ok=True)
    except OSError as exc:
        raise CheckpointError(
            f"cannot create the checkpoint signing key ({exc.strerror or exc}); make its directory "
            f"writable or set {k.CHECKPOINT_SIGNING_KEY_FILE.name} (or ${k.STATE_DIR_ENV_VAR})",
            path=str(path)) from exc


def _read_key_file(path: Path) -> bytes:
    """The key in ``path``, opened without following a symbolic link and checked on the open
    file (no swap between the check and the read).

    Raises:
        FileNotFoundError: there is none.
        CheckpointError: it is a symbolic link or no regular file, another user owns it, others
            may read it, its group may write it, it cannot be read or is too short.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise CheckpointError(
                f"the checkpoint signing key is a symbolic link (to {_target(path)}), refused: "
                "whoever can change the link chooses your key; put the key file itself there, or set "
                f"{k.CHECKPOINT_SIGNING_KEY_FILE.name} to the file", path=str(path)) from exc
        raise CheckpointError(f"the checkpoint signing key cannot be read ({exc.strerror or exc}); "
                              "check its permissions", path=str(path)) from exc
    with open(fd, "rb") as file:
        st = os.fstat(file.fileno())
        _check_key_file(path, st)
        data = file.read(1 << 16).strip()
    if len(data) < MIN_KEY_BYTES:
        raise CheckpointError(
            f"the checkpoint signing key holds {len(data)} bytes, fewer than {MIN_KEY_BYTES}; "
            f"make a new one: {_NEW_KEY}", path=str(path))
    return data


def _target(link: Path) -> str:
    try:
        return os.readlink(link)
    except OSError:
        return "?"


def _check_key_file(path: Path, st: os.stat_result) -> None:
    """Refuse the opened key file ``path`` (its ``fstat``) unless it is a regular file of this
    user (or of root: a key shared with a group, ``/etc/accelflow/ckpt.key`` 0640) that others
    cannot read and its group cannot write."""
    if not stat.S_ISREG(st.st_mode):
        raise CheckpointError(f"the checkpoint signing key is no regular file ({stat.filemode(st.st_mode)}); "
                              f"make one: {_NEW_KEY}", path=str(path))
    if st.st_uid not in (os.getuid(), 0):  # root's: a key shared with a group on purpose
        raise CheckpointError(
            f"the checkpoint signing key is owned by uid {st.st_uid}, not by you (uid {os.getuid()}) "
            f"or root: its owner can forge your checkpoints; delete it for a new one (or make your "
            f"own: {_NEW_KEY})", path=str(path))
    if st.st_mode & 0o027:
        raise CheckpointError(
            f"the checkpoint signing key has mode {stat.filemode(st.st_mode)}: whoever can read it can forge "
            "checkpoints; make it readable by its owner (and group) only: chmod 600 (or 640) it, or "
            "delete it for a new one if others may have read it", path=str(path))
