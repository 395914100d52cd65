"""Issue 24, point 2: unpacking the job archive on a host never writes outside the job
directory, with tarfile's ``data`` filter and with the real-path check that stands in for it
on a host Python without the filter."""

from __future__ import annotations

import io
import os
import re
import tarfile
from pathlib import Path
from typing import Iterator

import pytest

import tf_run_dir
from ansible_collections.tf_runbook.multiworker.plugins.module_utils import tf_run_files
from helpers import run_module


def member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "", data: bytes = b"") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.mode = 0o777 if kind == tarfile.SYMTYPE else 0o600
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    return info, data


def make_archive(path: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> str:
    with tarfile.open(path, "w:gz") as archive:
        for info, data in members:
            archive.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return str(path)


# The reproduction of the review: a link to the job directory itself, a link that climbs
# three levels through it (lexically it stays inside), then a file below the second link.
ESCAPE = [
    member("b", tarfile.SYMTYPE, "."),
    member("c", tarfile.SYMTYPE, "b/b/b/../../.."),
    member("c/ESCAPED.txt", data=b"escaped\n"),
]


@pytest.fixture(params=["data-filter", "real-path-fallback"])
def guard(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Each test runs with tarfile's data filter and again as on a host Python without it."""
    if request.param == "data-filter":
        if tf_run_files.DATA_FILTER is None:
            pytest.fail("this Python has no tarfile.data_filter: the test needs 3.12+ (or a backport)")
    else:
        monkeypatch.setattr(tf_run_files, "DATA_FILTER", None)
    yield request.param


def deep_job(tmp_path: Path) -> Path:
    """A job directory three levels below tmp_path, where the escape would land."""
    job = tmp_path / "l1" / "l2" / "l3" / "job"
    job.mkdir(parents=True)
    return job


def files_below(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() or p.is_symlink())


@pytest.mark.parametrize("check", [False, True])
def test_the_reviews_escape_is_refused_and_nothing_is_written(tmp_path: Path, guard: str, check: bool) -> None:
    job = deep_job(tmp_path)
    archive = make_archive(tmp_path / "evil.tar.gz", ESCAPE)
    with pytest.raises(ValueError, match="archive symlink 'c' points through another symlink of the archive"):
        tf_run_files.unpack_job_archive(archive, str(job), check)
    assert not (tmp_path / "ESCAPED.txt").exists() and not (tmp_path / "l1" / "ESCAPED.txt").exists()
    assert files_below(tmp_path) == ["evil.tar.gz"]


def test_the_escape_is_refused_by_the_module_naming_the_member(tmp_path: Path) -> None:
    archive = make_archive(tmp_path / "evil.tar.gz", ESCAPE)
    base = tmp_path / "l1" / "l2" / "base"
    result = run_module(tf_run_dir.__file__, {"base_dir": str(base), "run_id": "r1", "indices": [0], "job_archive": archive})
    assert result["failed"] and "archive symlink 'c' points through another symlink of the archive" in result["msg"]
    assert files_below(tmp_path) == ["evil.tar.gz"]


@pytest.mark.parametrize(
    ("members", "refused"),
    [
        ([member("/abs.txt", data=b"x")], "'/abs.txt' is outside the job directory"),
        ([member("../up.txt", data=b"x")], "'../up.txt' is outside the job directory"),
        ([member("a/../../up.txt", data=b"x")], "is outside the job directory"),
        ([member("up", tarfile.SYMTYPE, "../..")], "'up' points outside the job directory"),
        ([member("abs", tarfile.SYMTYPE, "/etc")], "'abs' points outside the job directory"),
        ([member("d", tarfile.DIRTYPE), member("d/in", tarfile.SYMTYPE, "."), member("d/in/x", data=b"x")],
         "'d/in/x' lies below a symlink of the archive"),
        ([member("hard", tarfile.LNKTYPE, "train.py")], "'hard' is not a file, directory or symlink"),
        ([member("null", tarfile.CHRTYPE)], "'null' is not a file, directory or symlink"),
        ([member("fifo", tarfile.FIFOTYPE)], "'fifo' is not a file, directory or symlink"),
    ],
)
def test_unsafe_members_are_refused_by_name_before_anything_is_written(
    tmp_path: Path, members: list[tuple[tarfile.TarInfo, bytes]], refused: str
) -> None:
    job = deep_job(tmp_path)
    archive = make_archive(tmp_path / "bad.tar.gz", [member("train.py", data=b"print()\n"), *members])
    with pytest.raises(ValueError, match=re.escape(refused)):
        tf_run_files.unpack_job_archive(archive, str(job), False)
    assert files_below(job) == []  # train.py came first in the archive and was not written either


def test_a_symlink_already_on_the_host_is_not_written_through(tmp_path: Path, guard: str) -> None:
    """What the names alone cannot show: a link left in the job directory (by an earlier
    archive, or by anyone) that leads out. The check on the disk refuses the member."""
    job = deep_job(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (job / "data").symlink_to(outside)
    archive = make_archive(tmp_path / "a.tar.gz", [member("data/x.txt", data=b"x")])
    with pytest.raises(ValueError, match="'data/x.txt'"):
        tf_run_files.unpack_job_archive(archive, str(job), False)
    assert list(outside.iterdir()) == []


def test_a_symlink_member_resolved_through_links_on_the_host_is_refused(tmp_path: Path, guard: str) -> None:
    """The review's link ``c``, judged on the disk once ``b -> .`` exists there: the guard
    itself (not only the check by name) sees it climb out."""
    job = deep_job(tmp_path)
    (job / "b").symlink_to(".")
    link, _data = member("c", tarfile.SYMTYPE, "b/b/b/../../..")
    with pytest.raises(ValueError, match="'c'"):
        tf_run_files.guard_member(link, str(job))
    safe, _data = member("d", tarfile.SYMTYPE, "b/b/b")
    tf_run_files.guard_member(safe, str(job))  # loops back into the job directory: allowed


def test_a_good_archive_unpacks_with_its_links_and_modes_and_again_changes_nothing(tmp_path: Path, guard: str) -> None:
    job = deep_job(tmp_path)
    run = member("run.sh", data=b"#!/bin/sh\n")
    run[0].mode = 0o755
    archive = make_archive(tmp_path / "good.tar.gz", [
        member("pkg", tarfile.DIRTYPE),
        member("pkg/model.py", data=b"X = 1\n"),
        member("model.py", tarfile.SYMTYPE, "pkg/model.py"),
        member("pkg/up.py", tarfile.SYMTYPE, "../train.py"),
        member("train.py", data=b"import model\n"),
        run,
    ])
    written = tf_run_files.unpack_job_archive(archive, str(job), False)
    assert sorted(os.path.relpath(p, job) for p in written) == [
        "model.py", "pkg", "pkg/model.py", "pkg/up.py", "run.sh", "train.py"
    ]
    assert (job / "model.py").read_text() == "X = 1\n" and (job / "pkg" / "up.py").read_text() == "import model\n"
    assert oct((job / "run.sh").stat().st_mode & 0o777) == "0o700"
    assert oct((job / "train.py").stat().st_mode & 0o777) == "0o600"
    assert tf_run_files.unpack_job_archive(archive, str(job), False) == []


def test_the_guard_on_the_disk_alone_stops_the_reviews_escape(
    tmp_path: Path, guard: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the check by name, the reproduction still writes nothing outside: ``b -> .``
    is written, then ``c`` is refused on the disk, by the data filter or by its stand-in."""
    monkeypatch.setattr(tf_run_files, "archive_problem", lambda *_args: "")
    job = deep_job(tmp_path)
    archive = make_archive(tmp_path / "evil.tar.gz", ESCAPE)
    with pytest.raises(ValueError, match="'c'"):
        tf_run_files.unpack_job_archive(archive, str(job), False)
    assert files_below(tmp_path) == ["evil.tar.gz", "l1/l2/l3/job/b"]
