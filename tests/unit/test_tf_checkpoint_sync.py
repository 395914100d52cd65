"""Copying the chief's checkpoint to hosts without a shared filesystem (tf_checkpoint_sync)."""

from __future__ import annotations

import errno
import io
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.tf_runbook.multiworker.plugins.filter import tf_attempts
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import (
    CHECKPOINT_OWNER_FILE,
    CHECKPOINT_STAGING_PREFIX,
    CHECKPOINT_SYNCED_FILE,
)
from ansible_collections.tf_runbook.multiworker.plugins.module_utils import tf_checkpoint_copy as sync

from helpers import tree_digest


def params(mode: str, directory: Path, **more: Any) -> dict[str, Any]:
    return {"mode": mode, "dir": str(directory), "marker": "m1", "copy": True, "src": None, "dest": None,
            "archive": None, "targets": {}, "host": "h0", "chief": "h0", "controller_dir": "", "controller_free": -1,
            **more}  # fmt: skip


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


# --- issue 38: a copy that is whole or not at all, bounded, faithful, and judged ---------

def copied_once(tmp_path: Path) -> tuple[Path, Path, Path]:
    """The chief's directory, a host that took one copy of it (ckpt-2), the archive."""
    chief, other, archive = chief_dir(tmp_path), tmp_path / "other", tmp_path / "a.tar"
    sync.run(params("pack", chief, archive=str(archive)), False)
    sync.run(params("unpack", other, archive=str(archive)), False)
    return chief, other, archive


def save_checkpoint(chief: Path, number: int) -> None:
    """The chief saves checkpoint ``number``, as TensorFlow's CheckpointManager does."""
    (chief / f"ckpt-{number}.index").write_bytes(f"index-{number}".encode())
    (chief / f"ckpt-{number}.data-00000-of-00001").write_bytes(os.urandom(4096))
    (chief / "checkpoint").write_text(f'model_checkpoint_path: "ckpt-{number}"\n')


def chiefs_files(directory: Path) -> dict[str, str]:
    """The files of ``directory`` but the runbook's own."""
    return {k: v for k, v in tree_digest(directory).items() if not k.startswith(".tf-runbook-")}


def test_a_copy_cut_short_leaves_the_earlier_checkpoint_named_and_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Point 3: the disk fills while the second file of ckpt-3 is written; the host's
    ``checkpoint`` still names ckpt-2, whose files are all there, and no part of ckpt-3 is."""
    chief, other, archive = copied_once(tmp_path)
    before = chiefs_files(other)
    save_checkpoint(chief, 3)
    sync.run(params("pack", chief, archive=str(archive)), False)
    real_extract = tarfile.TarFile.extractfile
    reads: list[str] = []

    def full_disk(self: tarfile.TarFile, member: Any) -> Any:
        reads.append(getattr(member, "name", member))
        if len(reads) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_extract(self, member)

    monkeypatch.setattr(tarfile.TarFile, "extractfile", full_disk)
    with pytest.raises(OSError, match="No space left"):
        sync.run(params("unpack", other, archive=str(archive)), False)
    assert chiefs_files(other) == before
    assert (other / "checkpoint").read_text() == 'model_checkpoint_path: "ckpt-2"\n'


def test_the_pointer_files_are_swapped_in_last_and_everything_is_fsynced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Point 3: TensorFlow's ``checkpoint`` (and the default job's ``latest``) name a
    checkpoint only once its files are in place, and all of it is on the disk (files and
    directories fsynced) before the copy is marked complete."""
    chief, other, archive = chief_dir(tmp_path), tmp_path / "other", tmp_path / "a.tar"
    (chief / "sub" / "latest").write_text("2 epoch-2\n")
    (chief / "sub" / "epoch-2").write_text("weights")
    sync.run(params("pack", chief, archive=str(archive)), False)
    replaced: list[str] = []
    synced: list[str] = []
    real_replace, real_fsync = os.replace, os.fsync

    def replace(src: Any, dst: Any, **kwargs: Any) -> None:
        replaced.append(os.path.relpath(str(dst), other))
        real_replace(src, dst, **kwargs)

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "fsync", fsync)
    sync.run(params("unpack", other, archive=str(archive)), False)
    chiefs = [name for name in replaced if not name.startswith(".tf-runbook-")]
    assert sorted(chiefs) == sorted(name for name in chiefs_files(chief) if name != "link")
    assert sorted(chiefs[-2:]) == ["checkpoint", "sub/latest"]
    assert replaced[-1] == CHECKPOINT_SYNCED_FILE, "the completion record comes after every file"
    names = {os.path.basename(path) for path in synced}
    assert {"checkpoint", "latest", "ckpt-2.index", "ckpt-2.data-00000-of-00001", "extra", "epoch-2"} <= names
    assert str(other) in synced and str(other / "sub") in synced
    assert synced.index(str(other)) > max(i for i, p in enumerate(synced) if p.endswith("checkpoint"))
    assert json.loads((other / CHECKPOINT_SYNCED_FILE).read_text())["complete"] is True


def test_an_interrupted_copy_is_seen_and_redone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Point 3: a copy killed while it swapped files in leaves no completion mark, a copy
    killed while it staged leaves its staging directory: the look says so, the next copy
    removes the leftover and writes the whole checkpoint again."""
    chief, other, archive = copied_once(tmp_path)
    assert sync.run(params("look", other), False)["incomplete"] is False
    save_checkpoint(chief, 3)
    sync.run(params("pack", chief, archive=str(archive)), False)
    real_replace = os.replace
    calls: list[str] = []

    def killed(src: Any, dst: Any, **kwargs: Any) -> None:
        calls.append(str(dst))
        if len(calls) == 3:
            raise SystemExit("killed")
        real_replace(src, dst, **kwargs)

    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(SystemExit):
        sync.run(params("unpack", other, archive=str(archive)), False)
    monkeypatch.setattr(os, "replace", real_replace)
    leftover = other / (CHECKPOINT_STAGING_PREFIX + "dead")
    leftover.mkdir()
    (leftover / "ckpt-9.index").write_bytes(b"half")
    assert sync.run(params("look", other), False)["incomplete"] is True
    result = sync.run(params("unpack", other, archive=str(archive)), False)
    assert result["redone"] is True and not leftover.exists()
    assert {k: v for k, v in chiefs_files(other).items() if k in chiefs_files(chief)} == {
        k: v for k, v in chiefs_files(chief).items() if k != "link"}
    assert sync.run(params("look", other), False)["incomplete"] is False
    assert sync.run(params("unpack", other, archive=str(archive)), False)["redone"] is False


def test_the_chiefs_archive_is_staged_beside_its_checkpoint_directory(tmp_path: Path) -> None:
    """Point 3: on the checkpoint directory's filesystem, not in the remote user's tmp."""
    chief = chief_dir(tmp_path)
    packed = sync.run(params("pack", chief), False)
    assert os.path.dirname(packed["archive"]) == str(chief)
    assert os.path.basename(packed["archive"]).startswith(".tf-runbook-")
    with tarfile.open(packed["archive"]) as tar:
        assert not [name for name in tar.getnames() if name.startswith(".tf-runbook-")]


def test_a_copy_that_does_not_fit_is_refused_naming_the_host_and_the_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Point 3: the chief (the archive), the controller (where it lands) and each host
    (the archive and the staged files) are measured before anything is packed."""
    chief = chief_dir(tmp_path)
    free = {str(chief): 10**9}
    monkeypatch.setattr(sync, "free_bytes", lambda path: free.get(path, 10**12))
    looks = {"w1": {"shared": False, "dir": "/ckpt/r1", "free": 1500, "copied": {}, "incomplete": False},
             "w2": {"shared": False, "dir": "/ckpt/r1", "free": 10**9, "copied": {}, "incomplete": False}}
    base = params("pack", chief, targets=looks, controller_dir="/runs/r1", controller_free=2000)
    with pytest.raises(ValueError) as refused:
        sync.run(base, False)
    message = str(refused.value)
    assert re.search(r"host w1: the checkpoint copy needs (\d+) kB in /ckpt/r1, 2 kB free", message), message
    assert re.search(r"the controller: the checkpoint copy needs (\d+) kB in /runs/r1, 2 kB free", message), message
    assert "w2" not in message and "host h0" not in message
    assert not [p for p in chief.iterdir() if p.name.startswith(".tf-runbook-archive-")], "nothing packed"
    free[str(chief)] = 100
    with pytest.raises(ValueError, match=rf"host h0: the checkpoint copy needs \d+ kB in {chief}, 0 kB free"):
        sync.run({**base, "controller_free": 10**9, "targets": {"w2": looks["w2"]}}, False)
    free[str(chief)] = 10**9
    assert sync.run({**base, "controller_free": 10**9, "targets": {"w2": looks["w2"]}}, False)["files"] == 4


def test_hard_links_are_copied_as_plain_files_and_named(tmp_path: Path) -> None:
    """Point 4: two names of one file (a job that links its last checkpoint) each travel
    as a plain file; the pack says which were links."""
    chief, other, archive = chief_dir(tmp_path), tmp_path / "other", tmp_path / "a.tar"
    os.link(chief / "ckpt-2.index", chief / "best.index")
    packed = sync.run(params("pack", chief, archive=str(archive)), False)
    assert packed["hard_links"] == ["best.index", "ckpt-2.index"]
    sync.run(params("unpack", other, archive=str(archive)), False)
    assert (other / "best.index").read_bytes() == (other / "ckpt-2.index").read_bytes() == b"index-2"


def test_the_record_names_hard_links_and_a_redone_copy() -> None:
    packed = {"files": 2, "bytes": 10, "hard_links": ["a", "b"]}
    out = tf_attempts.tf_attempts_sync_record({"w1": {"shared": False}}, packed,
                                              {"w1": {"files": 2, "redone": True}}, "h0", 1, 0.5, "/runs/r")
    assert "; hard links copied as plain files: a, b" in out["message"]
    assert "; redid the interrupted copy on w1" in out["message"]
    assert out["record"]["hard_links"] == ["a", "b"] and out["record"]["redone"] == ["w1"]


def test_each_file_keeps_its_time(tmp_path: Path) -> None:
    """Point 5: the copy keeps each file's mtime (a job that picks its newest by time)."""
    chief, other, archive = chief_dir(tmp_path), tmp_path / "other", tmp_path / "a.tar"
    stamp = 1_700_000_000.25
    os.utime(chief / "ckpt-2.index", (stamp, stamp))
    sync.run(params("pack", chief, archive=str(archive)), False)
    sync.run(params("unpack", other, archive=str(archive)), False)
    assert (other / "ckpt-2.index").stat().st_mtime == pytest.approx(stamp, abs=1e-3)
    assert (other / "checkpoint").stat().st_mtime == pytest.approx((chief / "checkpoint").stat().st_mtime, abs=1e-3)


@pytest.mark.parametrize(
    ("name", "text", "number"),
    [
        ("checkpoint", 'model_checkpoint_path: "ckpt-12"\nall_model_checkpoint_paths: "ckpt-11"\n', 12),
        ("checkpoint", 'model_checkpoint_path: "/abs/dir/ckpt-7"\n', 7),
        ("latest", "12 epoch-12-1-2\n11 epoch-11-1-1\n", 12),
        ("latest", "garbage\n", None),
        ("checkpoint", "", None),
    ],
)
def test_a_pointer_file_gives_its_checkpoints_number(name: str, text: str, number: int | None) -> None:
    assert sync.checkpoint_number(name, text) == number


def test_an_empty_chief_directory_is_refused_while_a_host_holds_the_chiefs_earlier_copy(tmp_path: Path) -> None:
    """Point 7: the chief's host was re-imaged; copying nothing would leave w1 on ckpt-2
    while the chief starts over."""
    chief, other, archive = copied_once(tmp_path)
    look = sync.run(params("look", other), False)
    assert look["copied"] == {"checkpoint": 2}
    shutil.rmtree(chief)
    chief.mkdir()
    before = tree_digest(other)
    with pytest.raises(ValueError, match=(
            rf"the chief's checkpoint directory on h0 \({chief}\) holds no checkpoint, and w1 holds the chief's "
            r"earlier copy \(checkpoint: 2\)")):
        sync.run(params("pack", chief, archive=str(archive), targets={"w1": look}), False)
    assert tree_digest(other) == before


def test_an_older_chief_checkpoint_is_refused_and_a_newer_one_copied(tmp_path: Path) -> None:
    """Point 7: the chief went back to ckpt-2 (a restored disk) while w1 holds ckpt-3 from
    the last copy: the copy would remove it."""
    chief, other, archive = copied_once(tmp_path)
    save_checkpoint(chief, 3)
    sync.run(params("pack", chief, archive=str(archive)), False)
    sync.run(params("unpack", other, archive=str(archive)), False)
    for path in chief.glob("ckpt-3*"):
        path.unlink()
    (chief / "checkpoint").write_text('model_checkpoint_path: "ckpt-2"\n')
    look = sync.run(params("look", other), False)
    with pytest.raises(ValueError, match=r"the chief's newest checkpoint on h0 \(checkpoint: 2\) is older than the "
                                         r"one w1 holds from the last copy \(checkpoint: 3\)"):
        sync.run(params("pack", chief, archive=str(archive), targets={"w1": look}), False)
    assert (other / "ckpt-3.index").exists()
    save_checkpoint(chief, 4)
    packed = sync.run(params("pack", chief, archive=str(archive), targets={"w1": look}), False)
    assert packed["files"] == len([name for name in chiefs_files(chief) if name != "link"])


def test_the_unpack_never_writes_through_a_link_that_is_itself_the_target_file(tmp_path: Path) -> None:
    """Point 19 (a pin): ``ckpt-2.index -> /outside/file`` on the host is replaced by the
    chief's file; the file outside keeps its bytes."""
    chief, other, archive = chief_dir(tmp_path), tmp_path / "other", tmp_path / "a.tar"
    outside = tmp_path / "outside" / "file"
    outside.parent.mkdir()
    outside.write_bytes(b"not the chief's")
    other.mkdir()
    os.symlink(outside, other / "ckpt-2.index")
    sync.run(params("pack", chief, archive=str(archive)), False)
    sync.run(params("unpack", other, archive=str(archive)), False)
    assert outside.read_bytes() == b"not the chief's"
    assert not (other / "ckpt-2.index").is_symlink() and (other / "ckpt-2.index").read_bytes() == b"index-2"


@pytest.mark.parametrize("mode", ["mark", "look", "pack", "unpack"])
def test_a_checkpoint_directory_that_is_a_link_or_another_users_is_refused(
    tmp_path: Path, mode: str
) -> None:
    """Point 8: on a world-writable tf_checkpoint_dir another user can plant
    ``<root>/<run_id>`` as a link, or make it first."""
    chief, archive = chief_dir(tmp_path), tmp_path / "a.tar"
    sync.run(params("pack", chief, archive=str(archive)), False)
    planted = tmp_path / "root" / "r1"
    planted.parent.mkdir()
    os.symlink(chief, planted)
    with pytest.raises(ValueError, match=f"{planted} is a symbolic link"):
        sync.run(params(mode, planted, archive=str(archive)), False)
    planted.unlink()
    planted.mkdir()
    os.chown(planted, 4242, 4242)
    with pytest.raises(ValueError, match=f"{planted} belongs to uid 4242, not to this user"):
        sync.run(params(mode, planted, archive=str(archive)), False)


@pytest.mark.parametrize("kind", ["link", "owner"])
def test_a_shared_checkpoint_root_refuses_a_planted_run_directory(tmp_path: Path, kind: str) -> None:
    """Point 8: tf_run_dir, which makes ``<tf_checkpoint_dir>/<run_id>``, refuses a link
    there (nothing is written through it) or a directory of another user."""
    from helpers import REPO, run_module

    module = REPO / "plugins" / "modules" / "tf_run_dir.py"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "shared").mkdir()
    planted = tmp_path / "shared" / "r1"
    if kind == "link":
        os.symlink(elsewhere, planted)
        problem = f"{planted} is a symbolic link"
    else:
        planted.mkdir()
        os.chown(planted, 4242, 4242)
        problem = f"{planted} belongs to uid 4242, not to this user"
    refused = run_module(module, run_dir_args(tmp_path, "r1", ["a:2222"]))
    assert refused.get("failed") and problem in refused["msg"], refused
    assert list(elsewhere.iterdir()) == [] and not (tmp_path / "base-1").exists()


def test_a_shared_checkpoint_root_gets_the_run_directory_made_private(tmp_path: Path) -> None:
    from helpers import REPO, run_module

    module = REPO / "plugins" / "modules" / "tf_run_dir.py"
    made = run_module(module, run_dir_args(tmp_path, "r1", ["a:2222"]))
    assert not made.get("failed"), made
    info = os.lstat(tmp_path / "shared" / "r1")
    assert stat.S_ISDIR(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o700 and info.st_uid == os.geteuid()


def test_hosts_that_share_a_directory_the_chief_does_not_get_one_copy(tmp_path: Path) -> None:
    """Point 6: w1 and w2 share a directory the chief does not, w3 has its own. Every host
    marks, every host but the chief looks: the pack copies once to w1's (and w2's)
    directory and once to w3's."""
    chief, shared, own = chief_dir(tmp_path), tmp_path / "shared", tmp_path / "own"
    for host, directory in (("h0", chief), ("w1", shared), ("w2", shared), ("w3", own)):
        sync.run(params("mark", directory, host=host), False)
    looks = {host: sync.run(params("look", directory, host=host, chief="h0"), False)
             for host, directory in (("w1", shared), ("w2", shared), ("w3", own))}  # fmt: skip
    assert [looks[h]["seen"] for h in ("w1", "w2", "w3")] == [["w1", "w2"], ["w1", "w2"], ["w3"]]
    assert not any(look["shared"] for look in looks.values())
    packed = sync.run(params("pack", chief, archive=str(tmp_path / "a.tar"), targets=looks), False)
    assert (packed["copy_to"], packed["shares_with"]) == (["w1", "w3"], {"w2": "w1"})
    record = tf_attempts.tf_attempts_sync_record(looks, packed, {"w1": {"files": 4}, "w3": {"files": 4}}, "h0", 1,
                                                 0.5, "/runs/r")  # fmt: skip
    assert "to w1, w3 in 0.5 s; w2 shares w1's directory;" in record["message"], record["message"]


def test_the_next_copy_removes_what_a_killed_one_left(tmp_path: Path) -> None:
    """Point 3: an archive left beside the directory (the task was killed before it
    removed it) and an earlier copy's markers go at the next copy's mark."""
    chief, other, _archive = copied_once(tmp_path)
    for directory in (chief, other):
        (directory / ".tf-runbook-archive-killed.tar").write_bytes(b"x" * 1000)
    sync.run(params("mark", other, host="w1", marker="old"), False)
    sync.run(params("mark", chief, host="h0", marker="new"), False)
    sync.run(params("mark", other, host="w1", marker="new"), False)
    assert sorted(p.name for p in chief.iterdir() if p.name.startswith(".tf-runbook-")) == sorted(
        [CHECKPOINT_OWNER_FILE, os.path.basename(sync.marker_path(str(chief), "new", "h0"))])
    assert sync.run(params("look", other, host="w1", marker="new"), False)["seen"] == ["w1"]
    assert not list(other.glob(".tf-runbook-archive-*")) and not list(other.glob(".tf-runbook-share-old-*"))


def test_two_copies_into_one_directory_take_turns(tmp_path: Path) -> None:
    """Point 6: were two hosts that share a directory sent the copy at once (a look that
    could not tell), each copy waits for the other's lock and both end whole."""
    chief, other, archive = chief_dir(tmp_path), tmp_path / "other", tmp_path / "a.tar"
    sync.run(params("pack", chief, archive=str(archive)), False)
    code = ("import sys; sys.path.insert(0, sys.argv[1]); "
            "from ansible_collections.tf_runbook.multiworker.plugins.module_utils import tf_checkpoint_copy as c\n"
            "for _ in range(15): c.unpack(sys.argv[2], sys.argv[3], False)")  # fmt: skip
    from helpers import COLLECTIONS

    racers = [subprocess.Popen([sys.executable, "-c", code, str(COLLECTIONS), str(other), str(archive)],
                               stderr=subprocess.PIPE, text=True) for _ in range(2)]  # fmt: skip
    errors = [racer.communicate(timeout=120)[1] for racer in racers]
    assert [racer.returncode for racer in racers] == [0, 0], errors
    assert {k: v for k, v in chiefs_files(other).items()} == {
        k: v for k, v in chiefs_files(chief).items() if k != "link"}
    assert not [p for p in other.iterdir() if p.name.startswith(CHECKPOINT_STAGING_PREFIX)]


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
        "workers": [], "earlier_alive": [],
        "checkpoint": {"files": 0, "bytes": 0, "newest": None, "newest_at": None, "numbers": {}}}


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


def test_a_host_says_what_its_checkpoint_directory_holds_for_a_resume(tmp_path: Path) -> None:
    """Issue 39, point 5: what the resumed job restores from (the runbook's own files left
    out), or that it holds nothing."""
    from ansible_collections.tf_runbook.multiworker.plugins.modules import tf_run_resume

    ckpt = tmp_path / "runs" / "r1" / "checkpoints"
    ckpt.mkdir(parents=True)
    assert tf_run_resume.read_run(str(tmp_path), "r1")["checkpoint"]["files"] == 0
    (ckpt / ".tf-runbook-owner.json").write_text("{}")
    (ckpt / "chief").mkdir()
    (ckpt / "chief" / "ckpt-3.index").write_bytes(b"x" * 10)
    (ckpt / "checkpoint").write_text('model_checkpoint_path: "chief/ckpt-3"\n')
    os.utime(ckpt / "checkpoint", (2_000_000_000, 2_000_000_000))
    held = tf_run_resume.read_run(str(tmp_path), "r1")["checkpoint"]
    assert (held["files"], held["newest"], held["numbers"]) == (2, "checkpoint", {"checkpoint": 3})
    assert held["bytes"] == 10 + len('model_checkpoint_path: "chief/ckpt-3"\n')


# --- A host that already holds the chief's files gets nothing (issue 42) -----------------


def look_with_chiefs(chief: Path, other: Path) -> dict[str, Any]:
    files = sync.run(params("mark", chief, manifest=True), False)["files"]
    return sync.run(params("look", other, host="h1", chief_files=files), False)


def test_the_chiefs_mark_lists_each_file_with_its_size_and_sha256(tmp_path: Path) -> None:
    chief = chief_dir(tmp_path)
    files = sync.run(params("mark", chief, manifest=True), False)["files"]
    import hashlib
    data = (chief / "ckpt-2.data-00000-of-00001").read_bytes()
    assert files["ckpt-2.data-00000-of-00001"] == [4096, hashlib.sha256(data).hexdigest()]
    assert sorted(files) == ["checkpoint", "ckpt-2.data-00000-of-00001", "ckpt-2.index", "sub/extra"]
    assert "files" not in sync.run(params("mark", chief), False), "only the chief's mark hashes"


def test_a_host_holding_every_file_of_the_chiefs_is_skipped_and_sent_nothing(tmp_path: Path) -> None:
    chief = chief_dir(tmp_path)
    other = tmp_path / "other"
    archive = tmp_path / "a.tar"
    sync.run(params("pack", chief, targets={"h1": {}}, archive=str(archive)), False)
    sync.run(params("unpack", other, archive=str(archive)), False)
    look = look_with_chiefs(chief, other)
    assert (look["same"], look["differs"]) == (True, "")
    packed = sync.run(params("pack", chief, targets={"h1": look}, archive=str(tmp_path / "b.tar")), False)
    assert packed["copy_to"] == [] and packed["archive"] == "" and not (tmp_path / "b.tar").exists()
    assert packed["skipped_hosts"] == {"h1": "it holds every file of the chief's, same sizes and sha256"}
    assert packed["files"] == 4
    out = tf_attempts.tf_attempts_sync_record({"h1": look}, packed, {}, "h0", 2, 0.25, "/runs/r")
    assert out["message"] == (
        "Copied the chief's checkpoint (h0: 4 files, 0.0 MB) to no host: every host that does not share its "
        "directory holds it already (0.25 s); skipped h1 (it holds every file of the chief's, same sizes and sha256)")
    assert out["record"]["skipped"] == {"h1": "it holds every file of the chief's, same sizes and sha256"}


@pytest.mark.parametrize("change, why", [
    ("same size", "its ckpt-2.data-00000-of-00001 has another sha256"),
    ("size", "its ckpt-2.data-00000-of-00001 has another size"),
    ("missing", "it lacks ckpt-2.data-00000-of-00001"),
    ("stale", "it holds old of the chief's last copy, which the chief no longer has"),
])
def test_a_host_with_one_file_that_differs_gets_the_copy(tmp_path: Path, change: str, why: str) -> None:
    chief = chief_dir(tmp_path)
    other = tmp_path / "other"
    if change == "stale":
        (chief / "old").write_text("o")
    archive = tmp_path / "a.tar"
    sync.run(params("pack", chief, targets={"h1": {}}, archive=str(archive)), False)
    sync.run(params("unpack", other, archive=str(archive)), False)
    data = other / "ckpt-2.data-00000-of-00001"
    if change == "same size":
        data.write_bytes(bytes(4096))
    elif change == "size":
        data.write_bytes(b"x")
    elif change == "missing":
        data.unlink()
    else:
        (chief / "old").unlink()
    look = look_with_chiefs(chief, other)
    assert (look["same"], look["differs"]) == (False, why)
    packed = sync.run(params("pack", chief, targets={"h1": look}, archive=str(tmp_path / "b.tar")), False)
    assert packed["copy_to"] == ["h1"] and packed["skipped_hosts"] == {}


def test_the_skip_is_said_beside_the_hosts_that_got_the_copy() -> None:
    packed = {"files": 2, "bytes": 2_000_000, "copy_to": ["h1"], "skipped_hosts": {"h2": "it holds every file"}}
    out = tf_attempts.tf_attempts_sync_record({"h1": {}, "h2": {"same": True}}, packed, {"h1": {"files": 2}},
                                              "h0", 1, 1.5, "/runs/r")
    assert out["message"] == ("Copied the chief's checkpoint (h0: 2 files, 2.0 MB) through the controller to h1 "
                              "in 1.5 s; skipped h2 (it holds every file)")


def test_a_newer_checkpoint_is_told_by_its_pointer_without_reading_the_data_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chief = chief_dir(tmp_path)
    (chief / "aaa.data").write_bytes(os.urandom(8192))  # before the pointer by name, not by size
    other = tmp_path / "other"
    archive = tmp_path / "a.tar"
    sync.run(params("pack", chief, targets={"h1": {}}, archive=str(archive)), False)
    sync.run(params("unpack", other, archive=str(archive)), False)
    (chief / "checkpoint").write_text('model_checkpoint_path: "ckpt-3"\n')  # same size, names a newer one
    files = sync.run(params("mark", chief, manifest=True), False)["files"]
    read: list[str] = []
    real = sync.file_sha256
    monkeypatch.setattr(sync, "file_sha256", lambda path: read.append(os.path.basename(path)) or real(path))
    look = sync.run(params("look", other, host="h1", chief_files=files), False)
    assert (look["same"], look["differs"]) == (False, "its checkpoint has another sha256")
    assert "aaa.data" not in read and "ckpt-2.data-00000-of-00001" not in read, read
