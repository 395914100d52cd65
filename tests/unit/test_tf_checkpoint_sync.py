"""Copying the chief's checkpoint to hosts without a shared filesystem (tf_checkpoint_sync)."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.tf_runbook.multiworker.plugins.filter import tf_attempts
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import (
    CHECKPOINT_OWNER_FILE,
    CHECKPOINT_SYNCED_FILE,
)
from ansible_collections.tf_runbook.multiworker.plugins.modules import tf_checkpoint_sync as sync

from helpers import tree_digest


def params(mode: str, directory: Path, **more: Any) -> dict[str, Any]:
    return {"mode": mode, "dir": str(directory), "marker": "m1", "copy": True, "src": None, "dest": None,
            "archive": None, **more}  # fmt: skip


def chief_dir(tmp_path: Path) -> Path:
    chief = tmp_path / "chief"
    (chief / "sub").mkdir(parents=True)
    (chief / "checkpoint").write_text('model_checkpoint_path: "ckpt-2"\n')
    (chief / "ckpt-2.index").write_bytes(b"index-2")
    (chief / "ckpt-2.data-00000-of-00001").write_bytes(os.urandom(4096))
    (chief / "sub" / "extra").write_text("x")
    (chief / CHECKPOINT_OWNER_FILE).write_text("{}")
    os.symlink("/etc/passwd", chief / "link")
    return chief


def test_a_host_that_sees_the_chiefs_marker_shares_the_directory(tmp_path: Path) -> None:
    chief, other = chief_dir(tmp_path), tmp_path / "other"
    other.mkdir()
    sync.run(params("mark", chief), False)
    assert sync.run(params("look", chief), False)["shared"] is True
    assert sync.run(params("look", other), False)["shared"] is False
    sync.run(params("pack", chief, copy=False), False)
    assert sync.run(params("look", chief), False)["shared"] is False, "pack must remove the marker"


def test_the_chiefs_files_replace_the_hosts_and_nothing_else(tmp_path: Path) -> None:
    chief = chief_dir(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    (other / "checkpoint").write_text('model_checkpoint_path: "ckpt-1"\n')
    (other / "ckpt-1.index").write_bytes(b"stale but not the chief's copy")
    (other / "workertemp_1").mkdir()
    (other / CHECKPOINT_OWNER_FILE).write_text('{"mine": true}')
    archive = tmp_path / "a.tar"
    packed = sync.run(params("pack", chief, archive=str(archive)), False)
    assert (packed["files"], packed["bytes"]) == (4, 4096 + 7 + 1 + len('model_checkpoint_path: "ckpt-2"\n'))
    assert packed["links_left_out"] == ["link"]
    result = sync.run(params("unpack", other, archive=str(archive)), False)
    assert result["files"] == 4
    sent = {k: v for k, v in tree_digest(chief).items() if k not in (CHECKPOINT_OWNER_FILE, "link")}
    assert {k: v for k, v in tree_digest(other).items() if k in sent} == sent
    # The host's own files stay: its owner file, files the chief never sent.
    assert (other / CHECKPOINT_OWNER_FILE).read_text() == '{"mine": true}'
    assert (other / "ckpt-1.index").exists() and (other / "workertemp_1").is_dir()
    assert not (other / "link").exists()
    assert json.loads((other / CHECKPOINT_SYNCED_FILE).read_text())["files"] == sorted(
        ["checkpoint", "ckpt-2.index", "ckpt-2.data-00000-of-00001", "sub/extra"])


def test_a_later_copy_removes_the_chiefs_files_the_chief_no_longer_has(tmp_path: Path) -> None:
    chief, other = chief_dir(tmp_path), tmp_path / "other"
    archive = tmp_path / "a.tar"
    sync.run(params("pack", chief, archive=str(archive)), False)
    sync.run(params("unpack", other, archive=str(archive)), False)
    (chief / "ckpt-2.index").unlink()
    (chief / "ckpt-3.index").write_bytes(b"3")
    sync.run(params("pack", chief, archive=str(archive)), False)
    result = sync.run(params("unpack", other, archive=str(archive)), False)
    assert result["removed"] == ["ckpt-2.index"]
    assert not (other / "ckpt-2.index").exists() and (other / "ckpt-3.index").read_bytes() == b"3"


def test_removing_a_stale_file_never_follows_a_directory_that_became_a_link(tmp_path: Path) -> None:
    """The chief dropped sub/extra; on this host sub/ is now a link to a directory outside:
    the stale name is not removed through it."""
    chief, other = chief_dir(tmp_path), tmp_path / "other"
    archive = tmp_path / "a.tar"
    sync.run(params("pack", chief, archive=str(archive)), False)
    sync.run(params("unpack", other, archive=str(archive)), False)
    (chief / "sub" / "extra").unlink()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "extra").write_text("not the chief's")
    (other / "sub" / "extra").unlink()
    (other / "sub").rmdir()
    os.symlink(outside, other / "sub")
    sync.run(params("pack", chief, archive=str(archive)), False)
    sync.run(params("unpack", other, archive=str(archive)), False)
    assert (outside / "extra").read_text() == "not the chief's"


def test_the_record_says_which_links_were_not_copied() -> None:
    looks = {"node1": {"shared": False}}
    packed = {"files": 2, "bytes": 10, "links_left_out": ["latest", "sub/link"]}
    out = tf_attempts.tf_attempts_sync_record(looks, packed, {"node1": {"files": 2}}, "node0", 1, 0.5, "/runs/r")
    assert out["message"].endswith("; symbolic links are not copied: latest, sub/link")
    assert out["record"]["links_left_out"] == ["latest", "sub/link"]


def tar_with(tmp_path: Path, *members: tuple[str, bytes, bytes | None]) -> Path:
    """An archive of (name, type, content) members."""
    path = tmp_path / "evil.tar"
    with tarfile.open(path, "w") as tar:
        for name, kind, content in members:
            info = tarfile.TarInfo(name)
            info.type = kind
            if kind == tarfile.SYMTYPE:
                info.linkname = content.decode() if content else "/"
                tar.addfile(info)
            else:
                info.size = len(content or b"")
                tar.addfile(info, io.BytesIO(content or b""))
    return path


@pytest.mark.parametrize(
    ("members", "match"),
    [
        ([("../escape", tarfile.REGTYPE, b"x")], "would leave"),
        ([("/abs", tarfile.REGTYPE, b"x")], "would leave"),
        ([("l", tarfile.SYMTYPE, b".."), ("l/escape", tarfile.REGTYPE, b"x")], "not a plain file"),
        ([(CHECKPOINT_OWNER_FILE, tarfile.REGTYPE, b"{}")], "file of the runbook"),
    ],
)
def test_an_archive_that_would_leave_the_directory_is_refused(
    tmp_path: Path, members: list[tuple[str, bytes, bytes | None]], match: str
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(ValueError, match=match):
        sync.run(params("unpack", other, archive=str(tar_with(tmp_path, *members))), False)
    assert list(other.iterdir()) == []
    assert not (tmp_path / "escape").exists()


def test_a_link_on_the_way_is_never_followed(tmp_path: Path) -> None:
    outside, other = tmp_path / "outside", tmp_path / "other"
    outside.mkdir()
    other.mkdir()
    os.symlink(outside, other / "sub")
    archive = tar_with(tmp_path, ("sub/f", tarfile.REGTYPE, b"x"))
    with pytest.raises(ValueError, match="not a directory"):
        sync.run(params("unpack", other, archive=str(archive)), False)
    assert list(outside.iterdir()) == []


def test_check_mode_writes_nothing(tmp_path: Path) -> None:
    chief, other = chief_dir(tmp_path), tmp_path / "other"
    archive = tmp_path / "a.tar"
    sync.run(params("pack", chief, archive=str(archive)), False)
    assert sync.run(params("unpack", other, archive=str(archive)), True)["files"] == 4
    assert not other.exists()
    sync.run(params("mark", chief), True)
    assert sync.run(params("look", chief), False)["shared"] is False


def test_the_record_says_what_moved_and_where_it_is_kept() -> None:
    record = tf_attempts.tf_attempts_sync_record(
        {"h1": {"shared": False}, "h2": {"shared": True}}, {"files": 3, "bytes": 250_000_000},
        {"h1": {"files": 3, "bytes": 250_000_000, "removed": ["old"]}, "h2": {"skipped": True}}, "h0", 2, 4.25,
        "/runs/r1")
    assert record["path"] == "/runs/r1/checkpoint-sync-2.json"
    assert record["message"] == ("Copied the chief's checkpoint (h0: 3 files, 250.0 MB) through the controller "
                                 "to h1 in 4.25 s; h2 share it")
    assert record["record"]["copied_to"] == ["h1"] and record["record"]["removed"] == {"h1": ["old"]}


def test_the_record_of_a_shared_directory_copies_nothing() -> None:
    record = tf_attempts.tf_attempts_sync_record({"h1": {"shared": True}}, {"files": 0, "bytes": 0, "archive": ""},
                                                 {"h1": {"skipped": True}}, "h0", 1, 0.5, "/runs/r1")
    assert record["message"] == "Every host shares the chief's checkpoint directory (h0): nothing to copy"
    assert record["record"]["files"] == 0 and record["record"]["shared"] == ["h1"]


# --- what a host holds of a run to resume (tf_run_resume) --------------------------------

def test_a_hosts_run_is_read_from_its_latest_attempt(tmp_path: Path) -> None:
    from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import cluster_checksum
    from ansible_collections.tf_runbook.multiworker.plugins.modules import tf_run_resume

    run = tmp_path / "runs" / "r1"
    cluster = {"worker": ["h0:2222", "h1:2222"]}
    for attempt_dir, code in ((run, 143), (run / "retry-1", 1), (run / "retry-2", None)):
        (attempt_dir / "worker-1").mkdir(parents=True)
        (attempt_dir / "worker-1" / "tf_config.json").write_text(json.dumps({"cluster": cluster}))
        if code is not None:
            (attempt_dir / "worker-1" / "exit.json").write_text(json.dumps({"returncode": code}))
    # retry-2's supervisor: this test's own process, working elsewhere: not the run's.
    (run / "retry-2" / "worker-1" / "state.json").write_text(json.dumps({"supervisor_pid": os.getpid()}))
    found = tf_run_resume.read_run(str(tmp_path), "r1")
    assert (found["exists"], found["last_attempt"]) == (True, 2)
    assert found["workers"] == [{"index": 1, "dir": str(run / "retry-2" / "worker-1"), "alive": False,
                                 "returncode": None, "checksum": cluster_checksum(cluster),
                                 "checkpoint_dir": None}]  # fmt: skip
    original = os.getcwd()
    os.chdir(run / "retry-2" / "worker-1")
    try:
        assert tf_run_resume.read_run(str(tmp_path), "r1")["workers"][0]["alive"] is True
    finally:
        os.chdir(original)
    assert tf_run_resume.read_run(str(tmp_path), "r2") == {
        "changed": False, "exists": False, "run_dir": str(tmp_path / "runs" / "r2"),
        "checkpoint_dir": str(tmp_path / "runs" / "r2" / "checkpoints"), "checkpoint_root": "", "last_attempt": -1,
        "workers": [], "earlier_alive": []}


def test_a_supervisor_of_an_earlier_attempt_that_still_runs_refuses_the_resume(tmp_path: Path) -> None:
    """An orphan of attempt 0 (its host was lost and came back) would share the ports of the
    resumed attempt: the resume is refused, naming its pid."""
    from ansible_collections.tf_runbook.multiworker.plugins.action.tf_run_claim import host_problems
    from ansible_collections.tf_runbook.multiworker.plugins.modules import tf_run_resume

    run = tmp_path / "runs" / "r1"
    for attempt_dir in (run, run / "retry-1"):
        (attempt_dir / "worker-0").mkdir(parents=True)
        (attempt_dir / "worker-0" / "state.json").write_text(json.dumps({"supervisor_pid": os.getpid()}))
    original = os.getcwd()
    os.chdir(run / "worker-0")  # this test's process plays attempt 0's supervisor
    try:
        found = tf_run_resume.read_run(str(tmp_path), "r1")
    finally:
        os.chdir(original)
    assert found["earlier_alive"] == [{"attempt": 0, "index": 0, "dir": str(run / "worker-0"),
                                       "supervisor_pid": os.getpid()}]  # fmt: skip
    assert [w["alive"] for w in found["workers"]] == [False]
    [problem] = host_problems("r1", "", {"h0": found})
    assert problem.startswith("host h0: worker 0 of attempt 0 of run 'r1' is still running (supervisor pid ")


def launched_worker(directory: Path, checkpoint_dir: str | None, state: str | None = None) -> None:
    """A worker directory whose supervisor recorded its launch (``checkpoint_dir`` None: an
    older supervisor's state.json, without one); ``state`` the raw state.json instead."""
    directory.mkdir(parents=True)
    launch = {} if checkpoint_dir is None else {"launch": {"attempt": 0, "checkpoint_dir": checkpoint_dir}}
    (directory / "state.json").write_text(state if state is not None else json.dumps({"supervisor_pid": 0, **launch}))


def test_a_hosts_run_says_which_checkpoint_directory_each_worker_of_its_latest_attempt_used(tmp_path: Path) -> None:
    from ansible_collections.tf_runbook.multiworker.plugins.modules import tf_run_resume

    run = tmp_path / "runs" / "r1"
    launched_worker(run / "worker-0", "/old/r1")  # attempt 0: not the latest, not read
    launched_worker(run / "retry-1" / "worker-0", "/a/r1")
    launched_worker(run / "retry-1" / "worker-1", None)
    launched_worker(run / "retry-1" / "worker-2", "", state="{not json")
    found = tf_run_resume.read_run(str(tmp_path), "r1", "/a/")
    assert [(w["index"], w["checkpoint_dir"]) for w in found["workers"]] == [(0, "/a/r1"), (1, None), (2, None)]
    assert (found["checkpoint_dir"], found["checkpoint_root"]) == ("/a/r1", "/a/")
    assert tf_run_resume.read_run(str(tmp_path), "r1")["checkpoint_dir"] == str(run / "checkpoints")
    with pytest.raises(ValueError, match="'ckpt' is not an absolute path"):
        tf_run_resume.read_run(str(tmp_path), "r1", "ckpt")


def test_the_resume_module_expands_the_checkpoint_root_and_refuses_a_relative_one(tmp_path: Path) -> None:
    from helpers import REPO, run_module

    module = REPO / "plugins" / "modules" / "tf_run_resume.py"
    launched_worker(tmp_path / "runs" / "r1" / "worker-0", str(tmp_path / "home" / "ckpt" / "r1"))
    found = run_module(module, {"base_dir": str(tmp_path), "run_id": "r1", "checkpoint_root": "~/ckpt"},
                       HOME=str(tmp_path / "home"))  # fmt: skip
    assert not found.get("failed"), found
    assert found["checkpoint_dir"] == found["workers"][0]["checkpoint_dir"] == str(tmp_path / "home" / "ckpt" / "r1")
    refused = run_module(module, {"base_dir": str(tmp_path), "run_id": "r1", "checkpoint_root": "ckpt"})
    assert refused.get("failed") and "tf_checkpoint_dir 'ckpt' is not an absolute path" in refused["msg"], refused


@pytest.mark.parametrize(
    ("launched_with", "resumed_with", "refused"),
    [("", "", False), ("root", "root", False), ("", "root", True), ("root", "", True), ("root", "other", True)],
)
def test_a_resume_with_another_checkpoint_directory_than_the_runs_is_refused(
    tmp_path: Path, launched_with: str, resumed_with: str, refused: bool
) -> None:
    """What the module reads of a crafted run, judged by the claim: the directory the run's
    workers recorded against the one this tf_checkpoint_dir gives (issue: a resume that
    silently started over)."""
    from ansible_collections.tf_runbook.multiworker.plugins.action.tf_run_claim import host_problems
    from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run_files import checkpoint_dir_of
    from ansible_collections.tf_runbook.multiworker.plugins.modules import tf_run_resume

    roots = {"": "", "root": str(tmp_path / "root"), "other": str(tmp_path / "other")}
    run = tmp_path / "runs" / "r1"
    kept = checkpoint_dir_of(str(run), "r1", roots[launched_with])
    launched_worker(run / "worker-0", kept)
    launched_worker(run / "worker-1", kept)
    found = tf_run_resume.read_run(str(tmp_path), "r1", roots[resumed_with])
    problems = host_problems("r1", "", {"h0": found})
    if not refused:
        assert problems == []
        return
    setting = f"'{roots[resumed_with]}'" if resumed_with else "'', under the run's directory"
    assert problems == [
        f"host h0: run 'r1' kept its checkpoints in {kept} (attempt 0), and this resume would use "
        f"{found['checkpoint_dir']} (tf_checkpoint_dir {setting}): resume with the tf_checkpoint_dir the run was "
        "launched with"
    ]


# --- a shared tf_checkpoint_dir records its owner (tf_run_dir, issue 24 point 13) --------

def run_dir_args(tmp_path: Path, run_id: str, cluster: list[str]) -> dict[str, Any]:
    config = {"cluster": {"worker": cluster}, "task": {"type": "worker", "index": 0}}
    return {"base_dir": str(tmp_path / f"base-{len(cluster)}"), "run_id": run_id, "indices": [0],
            "checkpoint_root": str(tmp_path / "shared"), "configs": [{"index": 0, "content": json.dumps(config)}]}


def test_a_run_id_reused_by_another_cluster_on_a_shared_checkpoint_root_is_refused(tmp_path: Path) -> None:
    from helpers import REPO, run_module

    module = REPO / "plugins" / "modules" / "tf_run_dir.py"
    first = run_module(module, run_dir_args(tmp_path, "r1", ["a:2222", "b:2222"]))
    assert not first.get("failed"), first
    owner = json.loads((tmp_path / "shared" / "r1" / CHECKPOINT_OWNER_FILE).read_text())
    assert owner["run_id"] == "r1" and len(owner["cluster_checksum"]) == 64
    (tmp_path / "shared" / "r1" / "ckpt-1.index").write_text("backup of the first cluster")
    # The same run and cluster again (a restart, a resume): accepted.
    assert not run_module(module, {**run_dir_args(tmp_path, "r1", ["a:2222", "b:2222"]), "attempt": 1}).get("failed")
    # The same run id from another cluster: refused before anything is written.
    other = run_dir_args(tmp_path, "r1", ["c:2222"])
    refused = run_module(module, other)
    assert refused.get("failed") is True
    assert f"belongs to run 'r1' of cluster {owner['cluster_checksum'][:12]}" in refused["msg"]
    assert "pick another tf_run_id or tf_checkpoint_dir" in refused["msg"]
    assert not (tmp_path / "base-1").exists()
    assert (tmp_path / "shared" / "r1" / "ckpt-1.index").read_text() == "backup of the first cluster"
