"""Where accelflow keeps a user's files: the per-user state directory (session clusters'
state files and logs, the checkpoint signing key)."""

from __future__ import annotations

import os
from pathlib import Path

from accelflow.config.keys import STATE_DIR_ENV_VAR


def user_state_dir() -> Path:
    """The per-user state directory, not created: ``$ACCELFLOW_STATE_DIR``, else
    ``$XDG_STATE_HOME/accelflow`` (``~/.local/state/accelflow``)."""
    base = os.environ.get(STATE_DIR_ENV_VAR)
    if base:
        return Path(base)
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "accelflow"


def state_dir() -> Path:
    """:func:`user_state_dir`, created with mode 0700 (and tightened to it if it is wider)."""
    path = user_state_dir()
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.stat().st_mode & 0o077:
        os.chmod(path, 0o700)
    return path
