"""Helpers shared by the unit and integration tests (issue 12): one copy of each.

Imported as ``import helpers`` (tests/unit/conftest.py and tests/integration/conftest.py
put tests/ on sys.path)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# The clone as the collection tf_runbook.multiworker, as ansible.cfg's collections_path
# finds it: the plugins import the shared plugins/module_utils/ by that name.
COLLECTIONS = REPO / "collections"


def module_env(**more: str) -> dict[str, str]:
    """The environment of a module run as a plain script: the collection importable, as
    AnsiballZ bundles it for a real run."""
    path = os.pathsep.join(p for p in (str(COLLECTIONS), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, **more}


def run_module(path: str | Path, args: dict[str, Any], check_mode: bool = False, **env: str) -> dict[str, Any]:
    """Run a module file as Ansible runs it (JSON arguments on stdin); its JSON result."""
    module_args = dict(args, _ansible_check_mode=check_mode)
    out = subprocess.run(
        [sys.executable, str(path)],
        input=json.dumps({"ANSIBLE_MODULE_ARGS": module_args}),
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env=module_env(**env),
    )
    try:
        return json.loads(out.stdout)
    except ValueError as exc:
        raise AssertionError(f"{path} gave no JSON (rc {out.returncode}): {out.stdout}\n{out.stderr}") from exc
