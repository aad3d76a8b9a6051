"""``scripts/_setup.sh``: ``setup_venv`` installs once per pyproject.toml and extra, and again
only when pyproject.toml changed or the install is gone (a fresh machine)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SETUP = Path(__file__).resolve().parents[2] / "scripts" / "_setup.sh"

# A stand-in for .venv/bin/python: `-m pip install` is logged (and "installs" the console
# script and the package); everything else runs the real interpreter with src/ importable.
FAKE_PYTHON = f"""#!/bin/sh
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then
    echo "pip $*" >> pip.log
    printf '#!/bin/sh\\n' > .venv/bin/accelflow && chmod +x .venv/bin/accelflow
    exit 0
fi
PYTHONPATH="$PWD/src" exec {sys.executable} "$@"
"""


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    if shutil.which("bash") is None:
        pytest.skip("needs bash")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "accelflow"\n')
    (tmp_path / "src" / "accelflow").mkdir(parents=True)
    (tmp_path / "src" / "accelflow" / "__init__.py").write_text("")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    return tmp_path


def setup_venv(checkout: Path, spec: str) -> int:
    """Run setup_venv SPEC; the number of `pip install -e` calls it made."""
    log = checkout / "pip.log"
    before = log.read_text().count("install --quiet -e") if log.exists() else 0
    subprocess.run(["bash", "-c", f'set -euo pipefail; source "{SETUP}"; setup_venv "{spec}"'],
                   cwd=checkout, check=True, timeout=60)
    return log.read_text().count("install --quiet -e") - before


def test_a_second_setup_installs_nothing(checkout: Path) -> None:
    assert setup_venv(checkout, ".") == 1
    assert setup_venv(checkout, ".") == 0


def test_a_changed_pyproject_installs_again(checkout: Path) -> None:
    assert setup_venv(checkout, ".[test]") == 1
    with (checkout / "pyproject.toml").open("a") as file:
        file.write('dependencies = ["rich"]\n')
    assert setup_venv(checkout, ".[test]") == 1
    assert setup_venv(checkout, ".[test]") == 0


def test_the_test_extra_covers_the_plain_install_but_not_the_reverse(checkout: Path) -> None:
    assert setup_venv(checkout, ".[test]") == 1
    assert setup_venv(checkout, ".") == 0  # scripts/test then a plain install
    assert setup_venv(checkout, ".[ray]") == 1


def test_a_lost_install_is_repaired_despite_the_stamp(checkout: Path) -> None:
    assert setup_venv(checkout, ".") == 1
    (checkout / ".venv" / "bin" / "accelflow").unlink()
    assert setup_venv(checkout, ".") == 1


def test_accelflow_is_compiled_even_where_no_bytecode_is_written(checkout: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")  # as in CI: imports write no .pyc
    setup_venv(checkout, ".")
    tag = sys.implementation.cache_tag
    assert (checkout / "src" / "accelflow" / "__pycache__" / f"__init__.{tag}.pyc").is_file()
