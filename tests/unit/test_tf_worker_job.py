"""A user's project directory, worker environment and GPUs: checked, packed, handed over."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import pytest

import tf_job_archive as archive
import tf_supervisor
import tf_verdict
import tf_worker_job as job
from ansible_collections.tf_runbook.multiworker.plugins.module_utils import tf_bundle as bundle
from ansible_collections.tf_runbook.multiworker.plugins.module_utils import tf_run_files

SECRET = "s3cr3t-value-42"


# -- tf_worker_env ------------------------------------------------------------------------


def test_a_valid_environment_has_no_problem() -> None:
    envs = {"w0": {"DATA_BUCKET": "gs://b", "TF_USE_LEGACY_KERAS": 1, "_X2": 0.5}, "w1": {}, "w2": None}
    assert job.tf_worker_env_problems(envs) == []


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({"1BAD": SECRET}, "host w1: tf_worker_env name '1BAD' is not a valid environment variable name"),
        ({"A-B": SECRET}, "name 'A-B' is not a valid"),
        ({"TF_CONFIG": SECRET}, "host w1: tf_worker_env cannot set TF_CONFIG: the runbook sets it"),
        ({"TF_RUNBOOK_ATTEMPT": SECRET}, "host w1: tf_worker_env cannot set TF_RUNBOOK_ATTEMPT"),
        ({"FLAG": True}, "host w1: tf_worker_env FLAG must be a string or a number, got a boolean"),
        ({"LIST": [SECRET]}, "host w1: tf_worker_env LIST must be a string or a number, got a list"),
        ([SECRET], "host w1: tf_worker_env must be a mapping of names to values, got a list"),
    ],
)
def test_bad_environments_are_named_without_their_values(env: object, fragment: str) -> None:
    problems = job.tf_worker_env_problems({"w0": {"OK": "1"}, "w1": env})
    assert len(problems) == 1
    assert fragment in problems[0]
    assert SECRET not in problems[0]


# -- GPUs per slot -------------------------------------------------------------------------


def spec(slots: dict[str, int]) -> dict[str, object]:
    workers, index = [], 0
    for host, count in slots.items():
        for slot in range(count):
            workers.append({"index": index, "host": host, "slot": slot})
            index += 1
    return {"workers": workers}


def test_auto_splits_each_hosts_gpus_evenly_and_disjointly() -> None:
    plan = job.tf_gpu_assignment(spec({"a": 2, "b": 2}), {"a": 4, "b": 4}, {"a": "auto", "b": "auto"})
    assert plan == {"problems": [], "devices": {"a": {"0": "0,1", "1": "2,3"}, "b": {"2": "0,1", "3": "2,3"}}}


def test_auto_leaves_the_remainder_unused_and_a_host_without_gpus_alone() -> None:
    plan = job.tf_gpu_assignment(spec({"a": 3, "b": 1}), {"a": 4, "b": 0}, {})
    assert plan["devices"] == {"a": {"0": "0", "1": "1", "2": "2"}, "b": {"3": None}}


def test_zero_hides_every_gpu_and_n_gives_n_each() -> None:
    plan = job.tf_gpu_assignment(spec({"a": 2, "b": 2}), {"a": 8, "b": 8}, {"a": 0, "b": "3"})
    assert plan["devices"] == {"a": {"0": "", "1": ""}, "b": {"2": "0,1,2", "3": "3,4,5"}}


@pytest.mark.parametrize(
    ("gpus", "per_slot", "message"),
    [
        (3, 2, "host a: 2 slot(s) x tf_worker_gpus_per_slot=2 need 4 GPU(s), the host shows 3"),
        (1, "auto", "host a: 2 slot(s) need at least 2 GPU(s) (tf_worker_gpus_per_slot=auto, one or more each), the host shows 1"),
        (0, 1, "host a: 2 slot(s) x tf_worker_gpus_per_slot=1 need 2 GPU(s), the host shows 0"),
        (4, "two", "host a: tf_worker_gpus_per_slot must be auto or a whole number >= 0, got 'two'"),
        (4, -1, "got -1"),
        (4, True, "got True"),
    ],
)
def test_too_few_gpus_or_a_bad_value_is_refused(gpus: int, per_slot: object, message: str) -> None:
    plan = job.tf_gpu_assignment(spec({"a": 2}), {"a": gpus}, {"a": per_slot})
    assert len(plan["problems"]) == 1 and message in plan["problems"][0]
    assert "a" not in plan["devices"]


# -- the project directory ------------------------------------------------------------------


def project(root: Path) -> Path:
    files = {
        "train.py": "from mypkg.model import build\nprint(build())\n",
        "mypkg/__init__.py": "",
        "mypkg/model.py": "def build():\n    return 1\n",
        "configs/run.json": '{"epochs": 2}\n',
        ".git/HEAD": "ref\n",
        "mypkg/__pycache__/model.cpython-312.pyc": "x",
        "runs/old/summary.json": "{}",
        "notes.pyc": "x",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


EXCLUDE = [".git", "__pycache__", "*.pyc", ".venv", "runs"]


def test_the_walk_leaves_out_the_excluded_entries(tmp_path: Path) -> None:
    seen = archive.inspect(str(project(tmp_path)), "train.py", EXCLUDE, 200)
    assert seen["problems"] == []
    assert seen["entries"] == [
        ("configs", "dir"), ("configs/run.json", "file"), ("mypkg", "dir"), ("mypkg/__init__.py", "file"),
        ("mypkg/model.py", "file"), ("train.py", "file"),
    ]
    assert seen["script"] == "train.py" and seen["files"] == 4


def test_the_archive_depends_on_content_only(tmp_path: Path) -> None:
    root = project(tmp_path / "p")
    entries = archive.inspect(str(root), "train.py", EXCLUDE, 200)["entries"]
    first = archive.pack(str(root), entries)
    os.utime(root / "train.py", (1, 1))
    assert archive.pack(str(root), entries) == first
    (root / "configs" / "run.json").write_text('{"epochs": 3}\n')
    assert archive.pack(str(root), entries) != first
    with tarfile.open(fileobj=io.BytesIO(first), mode="r:gz") as tar:
        assert {m.name: (m.mtime, m.uid) for m in tar.getmembers()}["train.py"] == (0, 0)


def test_the_archive_is_stored_once_under_its_hash(tmp_path: Path) -> None:
    root = project(tmp_path / "p")
    data = archive.pack(str(root), archive.inspect(str(root), "train.py", EXCLUDE, 200)["entries"])
    path, digest, written = archive.write_archive(str(tmp_path / "cache"), data)
    assert written and path.endswith(f"{digest}.tar.gz") and Path(path).read_bytes() == data
    assert archive.write_archive(str(tmp_path / "cache"), data) == (path, digest, False)
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"


def test_tools_script_and_an_absolute_script_inside_are_accepted(tmp_path: Path) -> None:
    root = project(tmp_path)
    (root / "tools").mkdir()
    (root / "tools" / "train.py").write_text("print(1)\n")
    assert archive.inspect(str(root), "tools/train.py", EXCLUDE, 200)["script"] == "tools/train.py"
    assert archive.inspect(str(root), str(root / "tools" / "train.py"), EXCLUDE, 200)["script"] == "tools/train.py"


@pytest.mark.parametrize(
    ("change", "script", "fragment"),
    [
        (lambda r: None, "missing.py", "tf_train_script missing.py: no such file in tf_train_dir"),
        (lambda r: (r / "train.py").write_text("def broken(:\n"), "train.py", "tf_train_script train.py in tf_train_dir: line 1:"),
        (lambda r: None, "/etc/hostname", "tf_train_script /etc/hostname: not inside tf_train_dir"),
        (lambda r: None, "../train.py", "tf_train_script ../train.py: not inside tf_train_dir"),
        (lambda r: None, "notes.pyc", "tf_train_script notes.pyc: left out of tf_train_dir by tf_train_dir_exclude"),
        (lambda r: (r / "data").symlink_to("/etc"), "train.py", "symlink data points outside the directory, to /etc"),
        (lambda r: (r / "cfg.json").symlink_to(r.parent / "outside.json"), "train.py", "symlink cfg.json points outside"),
        (lambda r: (r / "big.bin").write_bytes(b"0" * (2 * 1024 * 1024 + 1)), "train.py", "2.0 MB after tf_train_dir_exclude, over tf_train_dir_max_mb=2"),
    ],
)
def test_a_bad_project_directory_is_refused_naming_path_and_figure(tmp_path: Path, change, script: str, fragment: str) -> None:  # type: ignore[no-untyped-def]
    root = project(tmp_path / "p")
    change(root)
    problems = archive.inspect(str(root), script, EXCLUDE, 2)["problems"]
    assert len(problems) == 1 and fragment in problems[0], problems


def test_a_missing_directory_is_refused(tmp_path: Path) -> None:
    assert archive.inspect(str(tmp_path / "nope"), "train.py", EXCLUDE, 2)["problems"] == [
        f"tf_train_dir {tmp_path / 'nope'}: not a directory on the controller"
    ]


def test_a_symlink_inside_is_kept_relative_and_unpacked(tmp_path: Path) -> None:
    root = project(tmp_path / "p")
    (root / "current.json").symlink_to(root / "configs" / "run.json")  # absolute, but inside
    seen = archive.inspect(str(root), "train.py", EXCLUDE, 200)
    assert seen["problems"] == []
    tar = tmp_path / "a.tar.gz"
    tar.write_bytes(archive.pack(str(root), seen["entries"]))
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    written = tf_run_files.unpack_job_archive(str(tar), str(job_dir), check=False)
    assert os.readlink(job_dir / "current.json") == "configs/run.json"
    assert (job_dir / "current.json").read_text() == '{"epochs": 2}\n'
    assert (job_dir / "mypkg" / "model.py").read_text() == "def build():\n    return 1\n"
    assert not (job_dir / ".git").exists() and len(written) == 7
    assert oct(os.stat(job_dir / "train.py").st_mode & 0o777) == "0o600"
    # Unpacking again (a restart attempt, a second deploy) changes nothing.
    assert tf_run_files.unpack_job_archive(str(tar), str(job_dir), check=False) == []


@pytest.mark.parametrize(
    ("name", "kind", "link"),
    [("../escape.py", tarfile.REGTYPE, ""), ("/abs.py", tarfile.REGTYPE, ""), ("x", tarfile.SYMTYPE, "../../etc"),
     ("dev", tarfile.CHRTYPE, "")],
)
def test_an_archive_member_outside_the_job_directory_is_refused(tmp_path: Path, name: str, kind: bytes, link: str) -> None:
    tar_path = tmp_path / "bad.tar.gz"
    with tarfile.open(tar_path, "w:gz") as tar:
        info = tarfile.TarInfo(name)
        info.type = kind
        info.linkname = link
        tar.addfile(info, io.BytesIO(b""))
    (tmp_path / "job").mkdir()
    with pytest.raises(ValueError, match="archive"):
        tf_run_files.unpack_job_archive(str(tar_path), str(tmp_path / "job"), check=False)
    assert list((tmp_path / "job").iterdir()) == []


# -- handing the environment to the job ---------------------------------------------------


def test_each_worker_gets_the_hosts_env_its_own_gpus_and_the_job_dir_on_pythonpath() -> None:
    files = tf_run_files.job_env_files(
        {"2": "/r/worker-2", "3": "/r/worker-3"}, {"MARK": SECRET, "PYTHONPATH": "/opt/lib", "N": 1},
        {"2": "0,1", "3": "2,3"}, "/r/job", True,
    )
    assert [json.loads(str(f["content"])) for f in files] == [
        {"MARK": SECRET, "N": "1", "PYTHONPATH": "/r/job:/opt/lib", "CUDA_VISIBLE_DEVICES": "0,1"},
        {"MARK": SECRET, "N": "1", "PYTHONPATH": "/r/job:/opt/lib", "CUDA_VISIBLE_DEVICES": "2,3"},
    ]


def test_nothing_is_written_for_todays_users() -> None:
    assert tf_run_files.job_env_files({"0": "/r/worker-0"}, {}, {"0": None}, "/r/job", False) == []
    hidden = tf_run_files.job_env_files({"0": "/r/worker-0"}, {}, {"0": ""}, "/r/job", False)
    assert json.loads(str(hidden[0]["content"])) == {"CUDA_VISIBLE_DEVICES": ""}


def test_the_supervisor_lays_the_env_file_over_its_environment(tmp_path: Path) -> None:
    assert tf_supervisor.job_environment(tmp_path, {"HOME": "/h"}) == {"HOME": "/h"}
    (tmp_path / "job_env.json").write_text(
        json.dumps({"MARK": SECRET, "HOME": "/x", "TF_CONFIG": "{}", "TF_RUNBOOK_ATTEMPT": "9"})
    )
    assert tf_supervisor.job_environment(tmp_path, {"HOME": "/h"}) == {"HOME": "/x", "MARK": SECRET}


@pytest.mark.parametrize(
    ("current", "given"),
    [("", "grpc.initial_reconnect_backoff_ms=50"),
     ("grpc.keepalive_time_ms=60000", "grpc.keepalive_time_ms=60000,grpc.initial_reconnect_backoff_ms=50"),
     ("grpc.keepalive_time_ms=60000,, ", "grpc.keepalive_time_ms=60000,grpc.initial_reconnect_backoff_ms=50"),
     # The user's own first backoff (tf_worker_env, or the host's environment) stays as it is.
     ("grpc.initial_reconnect_backoff_ms=1000", "grpc.initial_reconnect_backoff_ms=1000"),
     ("a=1, grpc.initial_reconnect_backoff_ms =5", "a=1, grpc.initial_reconnect_backoff_ms =5")],
)  # fmt: skip
def test_the_job_gets_a_short_first_grpc_reconnect_unless_it_sets_one(current: str, given: str) -> None:
    assert tf_supervisor.grpc_default_options(current) == given


# -- artifacts back ---------------------------------------------------------------------------


def make_artifacts(run: Path) -> None:
    for rel, size in {
        "worker-0/worker.log": 10, "worker-0/job_env.json": 5, "worker-0/model/model.keras": 300,
        "worker-0/tb/train/events.1": 200, "worker-0/other.bin": 50, "worker-1/model/model.keras": 400,
        "retry-1/worker-0/model/model.keras": 100, "job/model/model.keras": 7,
    }.items():
        (run / rel).parent.mkdir(parents=True, exist_ok=True)
        (run / rel).write_bytes(b"x" * size)


def test_artifacts_match_paths_in_worker_directories_and_whole_directories(tmp_path: Path) -> None:
    make_artifacts(tmp_path)
    assert bundle.artifact_files(str(tmp_path), ["model/*.keras", "tb"]) == [
        "retry-1/worker-0/model/model.keras", "worker-0/model/model.keras", "worker-0/tb/train/events.1",
        "worker-1/model/model.keras",
    ]
    assert bundle.artifact_files(str(tmp_path), []) == []
    # The environment file never leaves the host, whatever the patterns say.
    assert "worker-0/job_env.json" not in bundle.artifact_files(str(tmp_path), ["*"])
    assert "worker-0/job_env.json" not in bundle.run_files(str(tmp_path), ["*"])


def test_the_cap_keeps_the_logs_and_lists_what_was_left_out(tmp_path: Path) -> None:
    make_artifacts(tmp_path)
    bundle.MB = 1000  # max_mb=1 is 1000 bytes here
    try:
        kept, left_out, cuts = bundle.within_cap(
            str(tmp_path), ["worker-0/worker.log"], bundle.artifact_files(str(tmp_path), ["model", "tb", "*.bin"]), 1
        )
    finally:
        bundle.MB = 1024 * 1024
    assert kept == ["worker-0/worker.log", "retry-1/worker-0/model/model.keras", "worker-0/model/model.keras",
                    "worker-0/other.bin", "worker-0/tb/train/events.1"]
    assert left_out == [{"path": "worker-1/model/model.keras", "bytes": 400}] and cuts == {}
    assert tf_verdict.left_out_lines({"node1": left_out}) == [
        "not collected (over tf_collect_max_mb): node1: worker-1/model/model.keras (400 bytes)"
    ]
