"""PyYAML's safe loader, strict about keys set twice (imported only where a file is read)."""

from __future__ import annotations

from typing import Any

import yaml


def load_strict(text: str, duplicates: list[tuple[str, int, int]]) -> Any:
    """``yaml.safe_load(text)``, noting each key set twice in one mapping in ``duplicates``."""
    loader = _StrictLoader(text)
    try:
        data = loader.get_single_data()
    finally:
        loader.dispose()
    duplicates.extend(loader.duplicates)
    return data


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader that records keys set twice in one mapping (PyYAML keeps the last)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.duplicates: list[tuple[str, int, int]] = []

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # keys merged in with << may be overridden, as YAML intends
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            try:
                if key in seen:
                    self.duplicates.append((str(key), seen[key], line))
                else:
                    seen[key] = line
            except TypeError:
                continue  # an unhashable key: SafeLoader refuses it below
        return super().construct_mapping(node, deep=deep)  # type: ignore[no-any-return]
