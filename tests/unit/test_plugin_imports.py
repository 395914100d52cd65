"""Shared code lives in module_utils/ or plugin_utils/ (issue 25): no plugin imports a
module of plugins/modules/ or another filter file, so that each module, action and filter
can change without breaking the others behind their backs."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"
PREFIX = "ansible_collections.tf_runbook.multiworker.plugins."


def plugin_files() -> list[Path]:
    return sorted(p for kind in ("modules", "action", "filter", "module_utils", "plugin_utils")
                  for p in (PLUGINS / kind).glob("*.py"))  # fmt: skip


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


@pytest.mark.parametrize("path", plugin_files(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_plugin_imports_a_module_or_another_filter(path: Path) -> None:
    forbidden = sorted(
        name for name in imported(path)
        if name.startswith((PREFIX + "modules", PREFIX + "filter"))
    )  # fmt: skip
    assert not forbidden, f"{path.relative_to(PLUGINS)} imports {forbidden}: move the shared code to plugin_utils/"


def test_the_rule_is_checked_on_every_kind_of_plugin() -> None:
    kinds = {p.parent.name for p in plugin_files()}
    assert kinds == {"modules", "action", "filter", "module_utils", "plugin_utils"}
