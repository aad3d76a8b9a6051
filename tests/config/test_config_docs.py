"""``docs/configuration.md`` documents every key, and its generated tables are up to date."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from accelflow.config import KEYS, RESOURCE_SUFFIXES

ROOT = Path(__file__).parents[2]
DOC = ROOT / "docs" / "configuration.md"
SCRIPT = ROOT / "scripts" / "gen_config_docs.py"


@pytest.fixture(scope="module")
def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_config_docs", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_tables_are_up_to_date(generator: ModuleType) -> None:
    text = DOC.read_text(encoding="utf-8")
    assert generator.updated(text) == text, "run: python scripts/gen_config_docs.py"


def test_every_key_and_suffix_has_a_row() -> None:
    text = DOC.read_text(encoding="utf-8")
    for name in [*KEYS, *RESOURCE_SUFFIXES, "param.<p>"]:
        assert f"| `{name}` |" in text, name


def test_the_generator_replaces_only_its_section(generator: ModuleType) -> None:
    stale = f"intro\n{generator.BEGIN}\n| old | table |\n{generator.END}\noutro\n"

    fresh = generator.updated(stale)

    assert fresh.startswith("intro\n" + generator.BEGIN) and fresh.endswith(generator.END + "\noutro\n")
    assert "| old | table |" not in fresh and "| `external-resources` |" in fresh
    with pytest.raises(ValueError, match="expected the markers"):
        generator.updated("no markers here")


def test_the_check_mode_passes_on_the_committed_page() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
