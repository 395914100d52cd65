"""One place per variable: each default is in one role's defaults/main.yml, and no role's
task gives a variable that has a default another one of its own (a copy that drifts when
the default changes, and that hides a default the play cannot see)."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "roles"
# `x | default(...)` on a variable of its own name (not an attribute, `a.x | default`).
DEFAULTED = re.compile(r"(?<![.\w])(tf_\w+) \| default\((?P<args>[^()]*(?:\([^()]*\)[^()]*)*)\)")


def role_defaults() -> dict[str, list[str]]:
    owners: dict[str, list[str]] = defaultdict(list)
    for path in sorted(ROLES.glob("*/defaults/main.yml")):
        for name in yaml.safe_load(path.read_text()) or {}:
            owners[name].append(path.parts[-3])
    return owners


def test_each_variable_has_its_default_in_one_role() -> None:
    assert {name: roles for name, roles in role_defaults().items() if len(roles) > 1} == {}


def second_defaults(text: str, defaulted: set[str]) -> list[str]:
    """The variables of ``defaulted`` that ``text`` gives a default of its own. ``default(x,
    true)`` is not one: it replaces an empty or null value a user set, which a role's
    default does not."""
    found = []
    for match in DEFAULTED.finditer(text):
        if match.group(1) in defaulted and not match.group("args").replace(" ", "").endswith(",true"):
            found.append(match.group(1))
    return found


def test_no_roles_task_gives_a_defaulted_variable_a_default_of_its_own() -> None:
    defaulted = set(role_defaults())
    found = {str(path.relative_to(REPO)): names for path in sorted(ROLES.glob("*/tasks/*.yml"))
             if (names := second_defaults(path.read_text(), defaulted))}
    assert found == {}


def test_the_check_finds_a_copied_default() -> None:
    text = "{{ [tf_stop_grace | default(5) | int, tf_launch_stop_grace | default(0) | int] | max }}"
    assert second_defaults(text, {"tf_stop_grace", "tf_launch_stop_grace"}) == ["tf_stop_grace", "tf_launch_stop_grace"]
    assert second_defaults("{{ tf_worker_env | default({}, true) }}", {"tf_worker_env"}) == []
    assert second_defaults("{{ item.1.tf_stop_grace | default(5) }}", {"tf_stop_grace"}) == []
