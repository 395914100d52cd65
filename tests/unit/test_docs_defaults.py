"""One source for each default (issue 12): every role's ``defaults/main.yml`` is the source;
its ``meta/argument_specs.yml``, the README's variable tables and the sample inventory are
checked against it, names and values."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "roles"
README = REPO / "README.md"
SAMPLE_GROUP_VARS = REPO / "inventory" / "prod" / "group_vars"

# Defaults the README tables leave out on purpose: set by the runbook itself, not by users.
INTERNAL = {
    "tf_run_attempt": "the attempt being run, set by the restart loop",
    "tf_verdict_expected_size": "the cluster size, passed by collect.yml",
    "tf_verdict_context": "extra summary data, passed by collect.yml",
    "tf_attempts_stop_reason": "the reason the wait records, not a user knob",
}


def role_defaults() -> dict[str, dict[str, Any]]:
    """Role name to its defaults (``{}`` for a role without any)."""
    found = {}
    for path in sorted(ROLES.glob("*/defaults/main.yml")):
        found[path.parents[1].name] = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return found


def all_defaults() -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for role, values in role_defaults().items():
        for name, value in values.items():
            assert name not in merged, f"{name} has a default in two roles (one is {role})"
            merged[name] = value
    return merged


def role_options(role: str) -> dict[str, dict[str, Any]]:
    """Options of every entry point of a role's argument specs, by name (one entry each)."""
    path = ROLES / role / "meta" / "argument_specs.yml"
    specs = yaml.safe_load(path.read_text(encoding="utf-8"))["argument_specs"]
    options: dict[str, dict[str, Any]] = {}
    for entry in specs.values():
        options.update(entry.get("options") or {})
    return options


def is_template(value: Any) -> bool:
    return isinstance(value, str) and "{{" in value


CODE = re.compile(r"`([^`]*)`")


def readme_tables(text: str) -> dict[str, str]:
    """Variable name to the default cell of every row ``| `name` | default | ... |`` of the
    README's tables headed ``| variable | default | meaning |``."""
    rows: dict[str, str] = {}
    in_table = False
    for line in text.splitlines():
        if not line.startswith("|"):
            in_table = False
            continue
        if line.replace(" ", "") == "|variable|default|meaning|":
            in_table = True
        match = re.match(r"^\| `(tf_[a-z0-9_]+)` \| (.*?) \| .* \|$", line)
        if in_table and match:
            assert match.group(1) not in rows, f"README lists {match.group(1)} twice"
            rows[match.group(1)] = match.group(2)
    return rows


def cell_values(cell: str) -> list[str]:
    """The leading code spans of a default cell (``"`a`, `b` (note)"`` gives ``[a, b]``)."""
    match = re.match(r"^((?:`[^`]*`(?:, )?)+)", cell)
    return CODE.findall(match.group(1)) if match else []


def cell_matches(cell: str, value: Any) -> bool:
    """Whether a README default cell states ``value``."""
    shown = cell_values(cell)
    if is_template(value):
        # A template: the cell names what it resolves from (`ansible_host`,
        # `files/multiworker_train.py`, `runs/`).
        return len(shown) == 1 and shown[0].rstrip("/") in value
    if isinstance(value, list):
        return shown == (["[]"] if not value else [str(item) for item in value])
    if isinstance(value, dict):
        return not value and shown == ["{}"]
    if isinstance(value, bool):
        return shown == [str(value).lower()]
    if value == "":
        return shown == ['""']
    return shown == [str(value)]


@pytest.mark.parametrize(
    ("cell", "value", "expected"),
    [
        ("`2222`", 2222, True),
        ("`2223`", 2222, False),
        ("`true`", True, True),
        ("`false`", True, False),
        ('`""` (`<base>/venv`)', "", True),
        ("`auto`", "auto", True),
        ("`[]`", [], True),
        ("`a`, `b`", ["a", "b"], True),
        ("`a`, `c`", ["a", "b"], False),
        ("`a`", ["a", "b"], False),
        ("logs and records", ["worker.log"], False),
        ("`{}`", {}, True),
        ("`ansible_host`", "{{ ansible_host | default(inventory_hostname) }}", True),
        ("`runs/`", "{{ playbook_dir | dirname }}/runs", True),
        ("`files/x.py`", "{{ playbook_dir | dirname }}/files/multiworker_train.py", False),
    ],
)
def test_cell_matches(cell: str, value: Any, expected: bool) -> None:
    assert cell_matches(cell, value) is expected


def test_every_default_is_in_its_roles_argument_spec_with_the_same_value() -> None:
    problems = []
    for role, defaults in role_defaults().items():
        options = role_options(role)
        for name, value in defaults.items():
            option = options.get(name)
            if option is None:
                problems.append(f"{role}: {name} has a default but no argument spec")
            elif is_template(value):
                if "default" in option:
                    problems.append(f"{role}: {name} is a template; its spec gives a default")
            elif option.get("default", object()) != value:
                problems.append(
                    f"{role}: {name} defaults to {value!r}, its argument spec says "
                    f"{option.get('default', '(none)')!r}"
                )
    assert not problems, "\n".join(problems)


def test_every_argument_spec_default_is_a_roles_default() -> None:
    defaults = all_defaults()
    problems = []
    for spec in sorted(ROLES.glob("*/meta/argument_specs.yml")):
        role = spec.parents[1].name
        for name, option in role_options(role).items():
            if "default" not in option:
                continue
            if name not in defaults:
                problems.append(f"{role}: spec default of {name} is in no defaults/main.yml")
            elif defaults[name] != option["default"]:
                problems.append(
                    f"{role}: spec default of {name} is {option['default']!r}, "
                    f"defaults/main.yml says {defaults[name]!r}"
                )
    assert not problems, "\n".join(problems)


def test_readme_tables_name_every_public_default_with_its_value() -> None:
    defaults = all_defaults()
    rows = readme_tables(README.read_text(encoding="utf-8"))
    problems = [f"README lists {name}, which has no default" for name in rows if name not in defaults]
    for name, value in defaults.items():
        if name in INTERNAL:
            assert name not in rows, f"{name} is in the README: drop it from INTERNAL"
            continue
        if name not in rows:
            problems.append(f"README's tables leave out {name} (default {value!r})")
        elif not cell_matches(rows[name], value):
            problems.append(f"README says {name} defaults to {rows[name]!r}, defaults/main.yml {value!r}")
    assert not problems, "\n".join(problems)


def test_internal_names_are_defaults() -> None:
    assert set(INTERNAL) <= set(all_defaults())


def test_sample_inventory_sets_only_what_a_user_changes() -> None:
    defaults = all_defaults()
    problems = []
    for path in sorted(SAMPLE_GROUP_VARS.glob("*.yml")):
        for name, value in (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).items():
            if not name.startswith("tf_"):
                continue
            if name not in defaults:
                problems.append(f"{path.name}: {name} is no variable of the runbook")
            elif defaults[name] == value:
                problems.append(f"{path.name}: {name} repeats its default {value!r}")
    assert not problems, "\n".join(problems)
