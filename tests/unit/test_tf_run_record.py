"""The controller's records of the restart path, written by an action, not a module (issue 42)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from ansible.errors import AnsibleActionFail

import tf_run_record_action as action

REPO = Path(__file__).resolve().parents[2]


def test_a_record_is_written_as_to_nice_json_writes_it_and_private(tmp_path: Path) -> None:
    path = tmp_path / "attempt-1.json"
    result = action.record(str(path), {"b": [1, 2.5], "a": "é"}, [])
    assert result == {"changed": True, "path": str(path), "removed": []}
    assert path.read_text(encoding="utf-8") == '{\n    "a": "é",\n    "b": [\n        1,\n        2.5\n    ]\n}\n'
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["attempt-1.json"]


def test_a_record_replaces_the_old_one_whole(tmp_path: Path) -> None:
    path = tmp_path / "sync.json"
    path.write_text("old")
    path.chmod(0o644)
    action.record(str(path), [1], [])
    assert json.loads(path.read_text()) == [1]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_the_archive_is_removed_and_a_missing_one_is_no_error(tmp_path: Path) -> None:
    archive = tmp_path / ".checkpoint-1.tar"
    archive.write_bytes(b"x")
    assert action.record("", None, [str(archive), str(tmp_path / "gone.tar")]) == {
        "changed": True, "path": "", "removed": [str(archive)]}
    assert not archive.exists()
    assert action.record("", None, [str(archive)])["changed"] is False


def test_check_mode_writes_and_removes_nothing(tmp_path: Path) -> None:
    archive = tmp_path / "a.tar"
    archive.write_bytes(b"x")
    action.record(str(tmp_path / "r.json"), {}, [str(archive)], check=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.tar"]


def test_a_record_without_its_directory_or_content_is_refused_by_path(tmp_path: Path) -> None:
    with pytest.raises(AnsibleActionFail, match=r"cannot write the record .*/no/r.json: its directory .*/no does not exist"):
        action.record(str(tmp_path / "no" / "r.json"), {}, [])
    with pytest.raises(AnsibleActionFail, match=r"the record .*r.json has no content"):
        action.record(str(tmp_path / "r.json"), None, [])


def test_the_restart_path_writes_its_records_with_the_action() -> None:
    """No module started on the controller on the restart path (Cost rules, 4)."""
    for name in ("record_decision.yml", "checkpoints.yml"):
        text = (REPO / "roles" / "tf_attempts" / "tasks" / name).read_text()
        assert "tf_runbook.multiworker.tf_run_record:" in text, name
        assert "delegate_to: localhost" not in text, name
