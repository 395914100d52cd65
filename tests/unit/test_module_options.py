"""Module options whose value the roles always pass have no default of their own (issue 25):
a second default beside the role's would be a second place for one value."""

from __future__ import annotations

from pathlib import Path

import helpers

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"


def test_the_stop_needs_its_grace_from_the_role(tmp_path: Path) -> None:
    result = helpers.run_module(PLUGINS / "modules" / "tf_worker_stop.py", {"run_dir": str(tmp_path)})
    assert result.get("failed"), result
    assert "grace" in result["msg"], result["msg"]
    # Taking the stacks only stops nothing, and needs no grace.
    only_stacks = helpers.run_module(
        PLUGINS / "modules" / "tf_worker_stop.py", {"run_dir": str(tmp_path), "capture_stacks": True, "stop": False}
    )
    assert not only_stacks.get("failed"), only_stacks


def test_the_project_archive_needs_its_size_limit_from_the_role(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('hi')\n", encoding="utf-8")
    result = helpers.run_module(
        PLUGINS / "modules" / "tf_job_archive.py",
        {"train_dir": str(tmp_path), "script": "train.py", "dest": str(tmp_path / "out")},
    )
    assert result.get("failed"), result
    assert "max_mb" in result["msg"], result["msg"]


def test_the_collect_needs_its_size_limit_from_the_role(tmp_path: Path) -> None:
    result = helpers.run_module(
        PLUGINS / "modules" / "tf_collect_bundle.py",
        {"base_dir": str(tmp_path), "run_id": "r1", "dest": str(tmp_path / "out")},
    )
    assert result.get("failed"), result
    assert "max_mb" in result["msg"], result["msg"]
