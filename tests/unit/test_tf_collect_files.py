"""Collecting a run in one archive per host, and writing a run's files in one module run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import tf_collect_bundle as bundle
import tf_collect_unpack as unpack
import tf_run_dir

PATTERNS = ["worker.log", "exit.json", "state.json", "tf_config.json", "multiworker-complete.txt"]


def make_run(root: Path) -> Path:
    run = root / "runs" / "r1"
    for rel, text in {
        "worker-0/worker.log": "worker=0 training_complete\n",
        "worker-0/exit.json": "{}",
        "worker-0/multiworker-complete.txt": "done\n",
        "worker-0/checkpoint.h5": "not collected",
        "retry-1/worker-0/worker.log": "retry\n",
        "job/multiworker_train.py": "print()\n",
        "checkpoints/worker-0/latest": "2\n",
        "worker.log": "not in a worker directory",
    }.items():
        (run / rel).parent.mkdir(parents=True, exist_ok=True)
        (run / rel).write_text(text)
    return run


def test_only_matching_files_of_worker_directories_are_packed(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    assert bundle.run_files(str(run), PATTERNS) == [
        "retry-1/worker-0/worker.log",
        "worker-0/exit.json",
        "worker-0/multiworker-complete.txt",
        "worker-0/worker.log",
    ]


def test_pack_then_unpack_keeps_paths_and_content_and_reports_changes(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    files = bundle.run_files(str(run), PATTERNS)
    archive = bundle.bundle(str(run), files)
    assert archive == str(run / ".collect.tar.gz") and oct(os.stat(archive).st_mode & 0o777) == "0o600"
    dest = tmp_path / "controller" / "node0"
    assert sorted(unpack.unpack(archive, str(dest), files)) == files
    for rel in files:
        assert (dest / rel).read_bytes() == (run / rel).read_bytes()
    # Unpacking the same archive again changes nothing.
    assert unpack.unpack(archive, str(dest), files) == []


def test_unpack_ignores_members_it_was_not_told_about_and_unsafe_paths(tmp_path: Path) -> None:
    archive = tmp_path / "evil.tar.gz"
    payload = tmp_path / "payload"
    payload.write_text("x")
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(payload, arcname="../escape.txt")
        tar.add(payload, arcname="/abs.txt")
        tar.add(payload, arcname="worker-0/worker.log")
        tar.add(payload, arcname="worker-0/extra.txt")
    dest = tmp_path / "dest"
    written = unpack.unpack(str(archive), str(dest), ["worker-0/worker.log", "../escape.txt", "/abs.txt"])
    assert written == ["worker-0/worker.log"]
    assert not (tmp_path / "escape.txt").exists() and not (dest / "worker-0" / "extra.txt").exists()


def run_module(path: str, args: dict[str, object], check_mode: bool = False) -> dict[str, object]:
    module_args = dict(args, _ansible_check_mode=check_mode)
    out = subprocess.run(
        [sys.executable, path], input=json.dumps({"ANSIBLE_MODULE_ARGS": module_args}),
        capture_output=True, text=True, check=False,
    )
    return json.loads(out.stdout)


def test_the_bundle_module_runs_as_ansible_runs_it(tmp_path: Path) -> None:
    make_run(tmp_path)
    result = run_module(bundle.__file__, {"base_dir": str(tmp_path), "run_id": "r1", "patterns": PATTERNS})
    assert result["bundle"].endswith("runs/r1/.collect.tar.gz") and len(result["files"]) == 4
    missing = run_module(bundle.__file__, {"base_dir": str(tmp_path), "run_id": "nope", "patterns": PATTERNS})
    assert missing["files"] == [] and missing["bundle"] == ""


def run_dir_args(base: Path, **more: object) -> dict[str, object]:
    return {"base_dir": str(base), "run_id": "r1", "indices": [0], **more}


def test_run_dir_writes_job_and_configs_once_reads_back_and_is_idempotent(tmp_path: Path) -> None:
    args = run_dir_args(
        tmp_path,
        job_files=[{"name": "train.py", "content": "print('{{ not a template }}')\n"}],
        configs=[{"index": 0, "content": '{"task": {"index": 0}}\n'}],
    )
    first = run_module(tf_run_dir.__file__, args)
    job = tmp_path / "runs" / "r1" / "job" / "train.py"
    assert first["changed"] is True and len(first["written"]) == 2
    assert first["read_back"] == [{"index": 0, "content": '{"task": {"index": 0}}\n'}]
    assert job.read_text() == "print('{{ not a template }}')\n"
    assert oct(job.stat().st_mode & 0o777) == "0o600"
    again = run_module(tf_run_dir.__file__, args)
    assert again["changed"] is False and again["written"] == []
    # A file changed on the host is put back, and check mode only reports it.
    job.write_text("tampered")
    checked = run_module(tf_run_dir.__file__, args, check_mode=True)
    assert checked["changed"] is True and job.read_text() == "tampered"
    fixed = run_module(tf_run_dir.__file__, args)
    assert fixed["written"] == [str(job)]


def test_run_dir_refuses_unsafe_job_names_and_configs_of_other_hosts_workers(tmp_path: Path) -> None:
    unsafe = run_module(tf_run_dir.__file__, run_dir_args(tmp_path, job_files=[{"name": "../x.py", "content": ""}]))
    assert unsafe["failed"] and "'../x.py' is not one path component" in unsafe["msg"]
    other = run_module(tf_run_dir.__file__, run_dir_args(tmp_path, configs=[{"index": 3, "content": "{}"}]))
    assert other["failed"] and "worker 3, which does not run on this host" in other["msg"]


def test_run_dir_in_check_mode_on_a_fresh_host_reports_without_writing(tmp_path: Path) -> None:
    args = run_dir_args(tmp_path / "fresh", job_files=[{"name": "train.py", "content": "x"}])
    result = run_module(tf_run_dir.__file__, args, check_mode=True)
    assert result["changed"] is True and result["written"][0].endswith("runs/r1/job/train.py")
    assert not (tmp_path / "fresh").exists()
