"""The collection's metadata agrees with itself (issue 25, the small ones): one licence,
GPL-3.0-or-later as the modules' headers say, for galaxy.yml and every role;
meta/runtime.yml requires the ansible-core the roles say they need."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ROLES = sorted(path for path in (REPO / "roles").iterdir() if (path / "meta" / "main.yml").is_file())
LICENCE = "GPL-3.0-or-later"


def role_info(role: Path) -> dict:
    return yaml.safe_load((role / "meta" / "main.yml").read_text())["galaxy_info"]


def version(text: str) -> tuple[int, ...]:
    """A version as (major, minor, patch): "2.21" and ">=2.21.0" are the same."""
    parts = [int(part) for part in text.strip().lstrip(">=").split(".")]
    return tuple((parts + [0, 0, 0])[:3])


def test_galaxy_yml_names_the_licence() -> None:
    assert yaml.safe_load((REPO / "galaxy.yml").read_text())["license"] == [LICENCE]


@pytest.mark.parametrize("role", ROLES, ids=lambda path: path.name)
def test_every_role_has_the_collections_licence(role: Path) -> None:
    assert role_info(role)["license"] == LICENCE


def test_runtime_requires_the_ansible_core_the_roles_need() -> None:
    required = version(yaml.safe_load((REPO / "meta" / "runtime.yml").read_text())["requires_ansible"])
    needed = {version(str(role_info(role)["min_ansible_version"])) for role in ROLES}
    assert needed == {required}, (needed, required)
