"""Every module declares its attributes (check mode, diff mode, platform) through the
collection's one doc fragment, and what it declares is what its code does (issue 25).

The docs are loaded the way ``ansible-doc -t module tf_runbook.multiworker.<name>`` loads
them (fragments merged), in a child process: Ansible's collection loader must not meet the
plain ``ansible_collections`` path the other tests import the plugins by.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PLUGINS = REPO / "plugins"
COLLECTION = "tf_runbook.multiworker"
FRAGMENT = f"{COLLECTION}.attributes"
MODULES = sorted(path.stem for path in (PLUGINS / "modules").glob("tf_*.py"))
SUPPORT = {"full", "partial", "none"}

DOC_LOADER = r"""
import json, sys
from ansible import constants as C
from ansible.plugins.loader import fragment_loader, init_plugin_loader, module_loader
from ansible.utils.plugin_docs import get_plugin_docs

init_plugin_loader(C.COLLECTIONS_PATHS)
found = {}
for name in sys.argv[1:]:
    try:
        doc, _examples, _returns, _meta = get_plugin_docs(name, "module", module_loader, fragment_loader, False)
        found[name] = doc.get("attributes")
    except Exception as exc:  # reported by the test, per module
        found[name] = {"error": f"{type(exc).__name__}: {exc}"}
print(json.dumps(found, default=str))
"""


@pytest.fixture(scope="module")
def merged() -> dict[str, Any]:
    """Each module's attributes as ansible-doc shows them, fragment merged."""
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}
    out = subprocess.run(
        [sys.executable, "-c", DOC_LOADER, *(f"{COLLECTION}.{name}" for name in MODULES)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=True,
    )
    return json.loads(out.stdout.splitlines()[-1])


def raw_documentation(name: str) -> dict[str, Any]:
    """The module's own DOCUMENTATION, read without importing it."""
    text = (PLUGINS / "modules" / f"{name}.py").read_text()
    start = text.index('DOCUMENTATION = r"""') + len('DOCUMENTATION = r"""')
    return yaml.safe_load(text[start:text.index('"""', start)])


def code_of(name: str) -> tuple[str, str]:
    """The module's code and that of its action of the same name ('' when none)."""
    action = PLUGINS / "action" / f"{name}.py"
    return (PLUGINS / "modules" / f"{name}.py").read_text(), action.read_text() if action.is_file() else ""


@pytest.mark.parametrize("name", MODULES)
def test_module_extends_the_attributes_fragment_and_gives_only_the_support(name: str) -> None:
    doc = raw_documentation(name)
    assert FRAGMENT in (doc.get("extends_documentation_fragment") or []), f"{name}: does not extend {FRAGMENT}"
    attributes = doc.get("attributes") or {}
    assert {"check_mode", "diff_mode", "platform"} <= set(attributes), f"{name}: {sorted(attributes)}"
    for key in ("check_mode", "diff_mode", "platform"):
        # The descriptions are the fragment's, written once.
        assert "description" not in attributes[key], f"{name}: {key} repeats the fragment's description"


@pytest.mark.parametrize("name", MODULES)
def test_module_attributes_as_ansible_doc_shows_them(name: str, merged: dict[str, Any]) -> None:
    attributes = merged[f"{COLLECTION}.{name}"]
    assert "error" not in attributes, f"{name}: {attributes}"
    for key in ("check_mode", "diff_mode", "platform"):
        assert attributes[key]["description"], f"{name}: {key} has no description"
        assert attributes[key]["support"] in SUPPORT, f"{name}: {key} support {attributes[key]['support']!r}"
        if attributes[key]["support"] == "partial":
            assert attributes[key].get("details"), f"{name}: partial {key} without details"
    assert attributes["platform"]["platforms"] == "posix"


@pytest.mark.parametrize("name", MODULES)
def test_declared_check_and_diff_support_is_what_the_code_does(name: str) -> None:
    attributes = raw_documentation(name)["attributes"]
    module, action = code_of(name)
    # A module runs in check mode when its AnsibleModule says so; a documentation-only module
    # is its action's, and an action runs in check mode unless it says it cannot.
    runs_module = "AnsibleModule(" in module
    handles_check = ("supports_check_mode=True" in module if runs_module else bool(action)) and (
        "_supports_check_mode = False" not in action)
    assert (attributes["check_mode"]["support"] != "none") == handles_check, name
    returns_diff = "module._diff" in module or "_task.diff" in action
    assert (attributes["diff_mode"]["support"] != "none") == returns_diff, name
