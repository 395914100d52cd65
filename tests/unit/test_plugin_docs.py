"""Every module's DOCUMENTATION says what its argument_spec accepts (issue 12).

Each module and action plugin is imported by its collection name
(``ansible_collections.tf_runbook.multiworker.plugins.modules.<name>``), as Ansible loads
it. A module's argument spec is what its ``main()`` hands to ``AnsibleModule`` (caught
before anything runs); its DOCUMENTATION options must name the same options with the same
type, default, required, choices and elements, also for suboptions. An action documents
its options in the module of the same name (a documentation-only module where there is
no module, as ansible.builtin.template does); where the action declares what it accepts
(``validate_argument_spec``, ``_VALID_ARGS``), the documentation says exactly that.

``ansible-test sanity`` (validate-modules, ``make sanity``) checks this too; this test runs
in a second, so the docs cannot drift between two sanity runs.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any
from unittest import mock

import pytest
import yaml
from conftest import PLUGINS

COLLECTION = "ansible_collections.tf_runbook.multiworker.plugins"
MODULES = sorted(path.stem for path in (PLUGINS / "modules").glob("*.py") if path.stem != "__init__")
ACTIONS = sorted(path.stem for path in (PLUGINS / "action").glob("*.py") if path.stem != "__init__")
# What ansible-test compares, with the value an option has when it does not say.
FIELDS = {"type": "str", "default": None, "required": False, "choices": None, "elements": None}


class Caught(Exception):
    """Raised in place of AnsibleModule, with the arguments it was given."""

    def __init__(self, kwargs: dict[str, Any]) -> None:
        super().__init__("AnsibleModule called")
        self.kwargs = kwargs


def load(kind: str, name: str) -> ModuleType:
    return importlib.import_module(f"{COLLECTION}.{kind}.{name}")


def documentation(name: str) -> dict[str, Any]:
    """The module's DOCUMENTATION with the options of the collection's doc fragments it
    extends merged in, as Ansible merges them (``run_dir`` gives tf_run_dir's options, and
    ``run_dir.deploy`` tf_worker_launch's ``deploy``)."""
    doc = yaml.safe_load(load("modules", name).DOCUMENTATION)
    assert isinstance(doc, dict) and doc.get("module") == name, f"{name}: DOCUMENTATION is not the module's"
    for fragment in doc.get("extends_documentation_fragment") or []:
        module, _dot, variable = fragment.removeprefix("tf_runbook.multiworker.").partition(".")
        text = getattr(load("doc_fragments", module).ModuleDocFragment, (variable or "documentation").upper())
        options = (yaml.safe_load(text) or {}).get("options") or {}
        assert not set(options) & set(doc.get("options") or {}), f"{name}: {fragment} documents its options again"
        doc["options"] = {**(doc.get("options") or {}), **options}
    return doc


def module_spec(module: ModuleType) -> dict[str, Any] | None:
    """The argument_spec the module's main() gives AnsibleModule; None for a module that
    has no main() (documentation only)."""
    if not hasattr(module, "main"):
        return None

    def catch(*args: Any, **kwargs: Any) -> None:
        raise Caught({"argument_spec": args[0]} if args else kwargs)

    with mock.patch.object(module, "AnsibleModule", catch), pytest.raises(Caught) as caught:
        module.main()
    return caught.value.kwargs["argument_spec"]


def action_spec(name: str) -> dict[str, Any] | set[str] | None:
    """What the action of this name accepts: the argument_spec it validates its arguments
    with, else the names of its ``_VALID_ARGS``; None when it declares neither."""
    action = load("action", name).ActionModule
    task = mock.MagicMock(args={}, async_val=0, check_mode=False, diff=False)
    instance = action(task, mock.MagicMock(), mock.MagicMock(), None, None, None)

    def catch(*args: Any, **kwargs: Any) -> None:
        raise Caught({"argument_spec": args[0]} if args else kwargs)

    if "validate_argument_spec" in action.run.__code__.co_names:
        with mock.patch.object(instance, "validate_argument_spec", catch), pytest.raises(Caught) as caught:
            instance.run(task_vars={})
        return caught.value.kwargs["argument_spec"]
    valid = getattr(action, "_VALID_ARGS", None)
    return set(valid) if valid else None


def normalised(options: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The fields ansible-test compares of each option (and of its suboptions), as the
    argument spec and the documentation both mean them."""
    out = {}
    for name, option in (options or {}).items():
        entry = {field: option.get(field, fallback) for field, fallback in FIELDS.items()}
        entry["required"] = bool(entry["required"])
        if entry["choices"] is not None:
            entry["choices"] = sorted(map(str, entry["choices"]))
        if entry["type"] in ("float", "int") and entry["default"] is not None:
            entry["default"] = float(entry["default"])
        entry["options"] = normalised(option.get("options") or option.get("suboptions") or {})
        out[name] = entry
    return out


@pytest.mark.parametrize("name", MODULES)
def test_module_documentation_equals_its_argument_spec(name: str) -> None:
    doc = documentation(name)
    for key in ("short_description", "description", "author"):
        assert doc.get(key), f"{name}: DOCUMENTATION has no {key}"
    spec = module_spec(load("modules", name))
    if spec is None:
        assert name in ACTIONS, f"{name}: no main() and no action of that name: nothing runs it"
        return
    assert normalised(doc.get("options") or {}) == normalised(spec)


@pytest.mark.parametrize("name", MODULES)
def test_module_examples_and_return_are_yaml_and_use_the_full_name(name: str) -> None:
    module = load("modules", name)
    examples = yaml.safe_load(module.EXAMPLES)
    assert isinstance(examples, list) and examples, f"{name}: no EXAMPLES"
    assert any(f"tf_runbook.multiworker.{name}" in task for task in examples), f"{name}: no example by its FQCN"
    returned = yaml.safe_load(module.RETURN)
    assert returned is None or isinstance(returned, dict), f"{name}: RETURN is not a mapping"
    for key, value in (returned or {}).items():
        assert {"description", "type", "returned"} <= set(value), f"{name}: RETURN.{key} lacks a field"


@pytest.mark.parametrize("name", ACTIONS)
def test_action_is_documented_by_the_module_of_its_name(name: str) -> None:
    assert name in MODULES, f"action {name} has no module of its name to document it"
    documented = documentation(name).get("options") or {}
    accepted = action_spec(name)
    if isinstance(accepted, set):
        assert set(documented) == accepted
    elif accepted is not None:
        assert normalised(documented) == normalised(accepted)


def test_a_drifted_documentation_is_caught() -> None:
    """The comparison sees a default, a type and a missing option."""
    spec = {"a": {"type": "int", "default": 3}, "b": {"type": "str", "choices": ["x", "y"]}}
    assert normalised({"a": {"type": "int", "default": 3}, "b": {"choices": ["y", "x"]}}) == normalised(spec)
    assert normalised({"a": {"type": "int", "default": 4}, "b": {"choices": ["x", "y"]}}) != normalised(spec)
    assert normalised({"a": {"type": "float", "default": 3}, "b": {"choices": ["x", "y"]}}) != normalised(spec)
    assert normalised({"a": {"type": "int", "default": 3}}) != normalised(spec)
    assert normalised({"a": {"type": "int", "default": 3, "required": True}, "b": {"choices": ["x", "y"]}}) != (
        normalised(spec)
    )
