"""Every filter is documented, and its documentation cannot drift from its code (issue 12).

Each filter name of every ``FilterModule`` under ``plugins/filter/`` has a sidecar
``plugins/filter/<name>.yml`` (DOCUMENTATION, EXAMPLES, RETURN). The docs are loaded the
way ``ansible-doc -t filter tf_runbook.multiworker.<name>`` loads them, in a child process
(Ansible's collection loader must not meet the plain ``ansible_collections`` path these
tests import the plugins by). Each documented option must be a parameter of the function,
with the same order, requiredness and default: the filter's input is ``_input``, its other
parameters keep their Python names.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
FILTER_DIR = REPO / "plugins" / "filter"
COLLECTION = "tf_runbook.multiworker"

# Runs in a child process: loads each named filter's docs with ansible-doc's own functions
# and lists the collection's filters as `ansible-doc -t filter --list` does.
DOC_LOADER = r"""
import json, sys
from ansible import constants as C
from ansible.plugins.list import list_plugins
from ansible.plugins.loader import filter_loader, fragment_loader, init_plugin_loader
from ansible.utils.plugin_docs import get_plugin_docs

init_plugin_loader(C.COLLECTIONS_PATHS)
found = {"listed": sorted(list_plugins("filter", sys.argv[1])), "docs": {}}
for name in sys.argv[2:]:
    try:
        doc, examples, returns, _meta = get_plugin_docs(name, "filter", filter_loader, fragment_loader, False)
        found["docs"][name] = {"doc": doc, "examples": examples, "returns": returns}
    except Exception as exc:  # reported by the test, per filter
        found["docs"][name] = {"error": f"{type(exc).__name__}: {exc}"}
print(json.dumps(found, default=str))
"""


def _load(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"_docs_filter_{path.stem}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def filter_functions() -> dict[str, tuple[Callable[..., Any], Path]]:
    """Every filter name of every FilterModule under plugins/filter, to its function and file."""
    found: dict[str, tuple[Callable[..., Any], Path]] = {}
    for path in sorted(FILTER_DIR.glob("*.py")):
        module = _load(path)
        for name, function in module.FilterModule().filters().items():
            assert name not in found, f"filter {name} is defined in {found[name][1].name} and {path.name}"
            found[name] = (function, path)
    return found


def defines_documentation(path: Path) -> bool:
    """Whether a .py file assigns DOCUMENTATION at its top level (ansible-doc then reads it
    and never the sidecar)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(
        isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "DOCUMENTATION" for t in node.targets)
        for node in tree.body
    )


FILTERS = filter_functions()


def _cases() -> list[Any]:
    # No mark on any filter (issue 24, point 25): a filter file that defines DOCUMENTATION
    # hides its sidecar from ansible-doc, and that is a failure, never an expected one.
    return [pytest.param(name, id=name) for name in sorted(FILTERS)]


def test_no_filter_file_defines_documentation_that_would_shadow_its_sidecars() -> None:
    """ansible-doc reads a filter's DOCUMENTATION from its .py file before the sidecar: one
    string in a file that holds several filters would document all of them wrongly."""
    assert sorted({path.name for _function, path in FILTERS.values() if defines_documentation(path)}) == []


@pytest.fixture(scope="module")
def ansible_docs() -> dict[str, Any]:
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}
    env.pop("PYTHONPATH", None)
    names = [f"{COLLECTION}.{name}" for name in sorted(FILTERS)]
    done = subprocess.run(
        [sys.executable, "-c", DOC_LOADER, COLLECTION, *names],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def expected_options(function: Callable[..., Any]) -> list[tuple[str, inspect.Parameter]]:
    """The options a filter's docs must show, in order: its first parameter as ``_input``."""
    params = list(inspect.signature(function).parameters.values())
    return [("_input", params[0])] + [(p.name, p) for p in params[1:]]


def option_problems(doc: dict[str, Any], function: Callable[..., Any]) -> list[str]:
    """How a filter's DOCUMENTATION disagrees with its function's signature."""
    problems = []
    options = doc.get("options") or {}
    expected = expected_options(function)
    names = [name for name, _param in expected]
    if sorted(options) != sorted(names):
        problems.append(f"options {sorted(options)} but the function takes {names}")
    positional = [
        name for name, param in expected
        if param.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]  # fmt: skip
    documented = [part.strip() for part in str(doc.get("positional") or "").split(",") if part.strip()]
    if documented != positional:
        problems.append(f"positional is {documented}, the function's positional parameters are {positional}")
    for name, param in expected:
        option = options.get(name)
        if option is None:
            continue
        required = param.default is inspect.Parameter.empty
        if bool(option.get("required", False)) != required:
            problems.append(f"option {name}: required is {option.get('required', False)}, the function says {required}")
        if not required and option.get("default") != param.default:
            problems.append(f"option {name}: default {option.get('default')!r}, the function's is {param.default!r}")
        if not option.get("description") or not option.get("type"):
            problems.append(f"option {name}: no description or type")
    return problems


@pytest.mark.parametrize("name", _cases())
def test_each_filter_has_its_own_docs_that_match_its_signature(name: str, ansible_docs: dict[str, Any]) -> None:
    function, _path = FILTERS[name]
    found = ansible_docs["docs"][f"{COLLECTION}.{name}"]
    assert "error" not in found, found.get("error")
    doc = found["doc"]
    assert doc["name"] == name
    # Read from the sidecar (the path runs through the collections/ symlink to this clone).
    assert Path(doc["filename"]).resolve() == FILTER_DIR / f"{name}.yml", doc["filename"]
    assert doc.get("short_description") and doc.get("description")
    assert "_value" in (found["returns"] or {}), "RETURN has no _value"
    examples = yaml.safe_load(found["examples"] or "")
    assert isinstance(examples, list) and examples, "EXAMPLES is not a list of tasks"
    assert f"{COLLECTION}.{name}" in found["examples"], "EXAMPLES never use the filter by its full name"
    assert option_problems(doc, function) == []


def test_ansible_doc_lists_every_filter_and_no_other(ansible_docs: dict[str, Any]) -> None:
    assert ansible_docs["listed"] == sorted(f"{COLLECTION}.{name}" for name in FILTERS)


def test_every_sidecar_documents_a_filter() -> None:
    """A sidecar left behind by a renamed or removed filter is an error, not dead text."""
    sidecars = {path.stem for path in FILTER_DIR.glob("*.y*ml")}
    assert sorted(sidecars - set(FILTERS)) == []


def _sample(a: Any, b: int, c: str = "x", d: Any = None) -> None:
    """A stand-in filter for the checks' own tests."""


SAMPLE_DOC = {
    "positional": "_input, b, c, d",
    "options": {
        "_input": {"description": "in", "type": "raw", "required": True},
        "b": {"description": "b", "type": "int", "required": True},
        "c": {"description": "c", "type": "str", "default": "x"},
        "d": {"description": "d", "type": "raw"},
    },
}


def test_the_signature_check_accepts_docs_that_match() -> None:
    assert option_problems(SAMPLE_DOC, _sample) == []


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda d: d["options"].pop("d"), r"options \['_input', 'b', 'c'\] but the function takes"),
        (lambda d: d["options"].update(e={"description": "e", "type": "str"}), "options .*'e'.* but the function"),
        (lambda d: d.update(positional="_input, c, b, d"), "positional is"),
        (lambda d: d["options"]["b"].pop("required"), "option b: required is False"),
        (lambda d: d["options"]["c"].update(default="y"), "option c: default 'y'"),
        (lambda d: d["options"]["c"].update(required=True), "option c: required is True"),
        (lambda d: d["options"]["d"].pop("type"), "option d: no description or type"),
    ],
)  # fmt: skip
def test_the_signature_check_finds_drift(change: Callable[[dict[str, Any]], Any], problem: str) -> None:
    doc = json.loads(json.dumps(SAMPLE_DOC))
    change(doc)
    problems = option_problems(doc, _sample)
    assert problems and any(re.search(problem, p) for p in problems), problems
