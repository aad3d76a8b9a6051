"""Where accelflow keeps a user's files: the per-user state directory (session clusters'
state files and logs, the checkpoint signing key)."""

from __future__ import annotations

import os
from pathlib import Path

from accelflow._errors import ConfigError
from accelflow.config.keys import STATE_DIR_ENV_VAR


def user_state_dir() -> Path:
    """The per-user state directory, not created: ``$ACCELFLOW_STATE_DIR``, else
    ``$XDG_STATE_HOME/accelflow`` (``~/.local/state/accelflow``)."""
    base = os.environ.get(STATE_DIR_ENV_VAR)
    if base:
        return Path(base)
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "accelflow"


def state_dir() -> Path:
    """:func:`user_state_dir`, created with mode 0700 (and tightened to it if it is wider).

    It holds what lets its reader act as its owner (session clusters' tokens and submission
    keys, the checkpoint signing key), so one that is not the user's own is refused.

    Raises:
        ConfigError: it is owned by another user (names ``$ACCELFLOW_STATE_DIR`` and the fix);
            a directory others may write is made 0700 instead (it is the user's own).
    """
    path = user_state_dir()
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.stat()
    if st.st_uid != os.getuid():
        raise ConfigError(
            f"the state directory {path} is owned by uid {st.st_uid}, not by you (uid {os.getuid()}): "
            "its owner could read your session tokens and plant a checkpoint signing key; set "
            f"${STATE_DIR_ENV_VAR} to a directory of your own", key=f"${STATE_DIR_ENV_VAR}")
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)
    return path
