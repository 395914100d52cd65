"""The preflight's claim of the run's directory on the controller (an action, issue 13)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from ansible.errors import AnsibleActionFail

import tf_run_claim_action as action


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_claim_makes_both_directories_private(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    result = action.claim(str(runs), "20261203T000000Z-abcdef")
    assert result == {"changed": True, "path": str(runs / "20261203T000000Z-abcdef")}
    assert mode(runs) == 0o700 and mode(runs / "20261203T000000Z-abcdef") == 0o700


def test_an_existing_runs_directory_is_made_private_too(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir(mode=0o755)
    (runs / "earlier").mkdir()
    (runs / "earlier" / "summary.json").write_text("{}")
    action.claim(str(runs), "next")
    assert mode(runs) == 0o700
    assert (runs / "earlier" / "summary.json").read_text() == "{}"


def test_a_claimed_run_is_left_as_it_is(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True, mode=0o750)
    (run / "summary.json").write_text("kept")
    assert action.claim(str(tmp_path / "runs"), "r1") == {"changed": False, "path": str(run)}
    assert (run / "summary.json").read_text() == "kept"


def test_check_mode_creates_nothing(tmp_path: Path) -> None:
    assert action.claim(str(tmp_path / "runs"), "r1", check_mode=True)["changed"] is True
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("bad", ["", "a/b", "..", "."])
def test_a_run_id_that_is_not_one_path_component_is_refused(tmp_path: Path, bad: str) -> None:
    with pytest.raises(AnsibleActionFail, match="is not a run id"):
        action.claim(str(tmp_path / "runs"), bad)
    assert not (tmp_path / "runs").exists()


def test_a_runs_directory_that_cannot_be_made_names_the_path(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(AnsibleActionFail, match="cannot create .*file/runs/r1"):
        action.claim(str(tmp_path / "file" / "runs"), "r1")
