#!/usr/bin/env python3
"""Regenerate the key tables of ``docs/configuration.md`` from ``accelflow.config.keys``.

The tables sit between the ``BEGIN``/``END`` markers below; the rest of the page is prose.
``tests/config/test_config_docs.py`` fails when the committed page is out of date.

Usage:
    python scripts/gen_config_docs.py           # rewrite docs/configuration.md
    python scripts/gen_config_docs.py --check   # exit 1 if it is out of date
"""

from __future__ import annotations

import ast
import inspect
import os
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from accelflow.config import keys
from accelflow.config.keys import KEYS, RESOURCE_SUFFIXES, Key

DOC = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
BEGIN = "<!-- BEGIN GENERATED KEYS: edit src/accelflow/config/keys.py, then run scripts/gen_config_docs.py -->"
END = "<!-- END GENERATED KEYS -->"

# What the loader (accelflow.config._load) checks instead of, or beyond, the value parser.
ACCEPTS = {"external-resources": "`;`-separated names, or `none` alone"}
EXTRA_RULES = {
    "external-resources": "Names: letters, digits, `-`, `_`; no empty, duplicate or `none` names.",
    "amount": "Required for every listed resource.",
    "kubernetes.config-key": "A Kubernetes extended-resource name `<domain>/<name>` (domain not "
    "`kubernetes.io`); no two resources may share one.",
    "yarn.config-key": "A YARN resource type name (`[prefix/]name`, not `memory-mb`/`vcores`); "
    "no two resources may share one.",
    "vendor": "`<vendor>/<resource name>` must be a valid Kubernetes extended-resource name.",
    "driver-factory.class": "Loaded when a TaskExecutor (or `accelflow resources`) starts: an "
    "unknown module, class or entry point is an error naming this key.",
}


def render() -> str:
    """The generated section, markers included."""
    parts = [
        BEGIN,
        "",
        "### Keys",
        "",
        *_table(("Key", "Default", "Accepts", "Meaning"), _key_rows(KEYS.values())),
        "",
        "### Per-resource keys: `external-resource.<name>.<suffix>`",
        "",
        *_table(("Suffix", "Default", "Accepts", "Meaning"), _key_rows(RESOURCE_SUFFIXES.values())),
        _row((f"`{keys.PARAM_PREFIX}<p>`", "—", "any text, number or boolean",
              "Handed to the driver factory as `{p: text}`, read-only, prefix stripped.")),
        "",
        "### Environment variables and names",
        "",
        *_table(("Variable or name", "Constant in `keys.py`", "Meaning"), _constant_rows()),
        "",
        END,
    ]
    return "\n".join(parts)


def _key_rows(keys: Iterable[Key[Any]]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for key in keys:
        meaning = key.help
        if key.name in EXTRA_RULES:
            meaning += " " + EXTRA_RULES[key.name]
        if key.aliases:
            meaning += " Also accepted as " + " or ".join(f"`{a}`" for a in key.aliases) + "."
        accepts = ACCEPTS.get(key.name) or _accepts(key)
        rows.append((f"`{key.name}`", _default(key), accepts, meaning))
    return rows


def _default(key: Key[Any]) -> str:
    value = key.default
    if value is None:
        return "—"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"`{value}`"


def _accepts(key: Key[Any]) -> str:
    doc = inspect.getdoc(key.parse) or key.parse.__name__
    return doc.splitlines()[0].rstrip(".")


def _constant_rows() -> list[tuple[str, ...]]:
    """Module constants of ``keys`` documented by the string literal that follows them."""
    tree = ast.parse(Path(keys.__file__).read_text(encoding="utf-8"))
    rows: list[tuple[str, ...]] = []
    for node, following in zip(tree.body, tree.body[1:]):
        if not (isinstance(node, ast.Assign) and isinstance(following, ast.Expr)):
            continue
        if not (isinstance(following.value, ast.Constant) and isinstance(following.value.value, str)):
            continue
        name = node.targets[0].id if isinstance(node.targets[0], ast.Name) else ""
        value = getattr(keys, name, None)
        if isinstance(value, str):
            rows.append((f"`{value}`", f"`{name}`", " ".join(following.value.value.split())))
    rows.append((f"`{keys.ENTRY_POINT_GROUP}`", "entry-point group",
                 "Where driver factories register by name, e.g. `gpu`."))
    return rows


def _table(header: tuple[str, ...], rows: Iterable[tuple[str, ...]]) -> list[str]:
    return [_row(header), _row(tuple("---" for _ in header)), *(_row(r) for r in rows)]


def _row(cells: tuple[str, ...]) -> str:
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def _cell(text: str) -> str:
    """One table cell: no line breaks or bare pipes, and ``<``/``>`` escaped outside code
    spans so that ``<name>`` is not taken for an HTML tag."""
    parts = text.replace("\n", " ").replace("|", "\\|").split("`")
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts)


def updated(text: str) -> str:
    """``text`` with its generated section replaced.

    Raises:
        ValueError: the markers are missing or out of order.
    """
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{DOC}: expected the markers {BEGIN!r} ... {END!r}")
    return text[:start] + render() + text[end + len(END):]


def main(argv: list[str]) -> int:
    current = DOC.read_text(encoding="utf-8")
    new = updated(current)
    if "--check" in argv:
        if new != current:
            print(f"{DOC} is out of date: run python scripts/gen_config_docs.py", file=sys.stderr)
            return 1
        return 0
    if new != current:
        fd, tmp = tempfile.mkstemp(dir=DOC.parent, prefix=".configuration.", suffix=".md")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(new)
        os.replace(tmp, DOC)
        print(f"updated {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
