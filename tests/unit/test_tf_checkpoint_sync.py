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
