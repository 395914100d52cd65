"""Preflight refusals of a project directory, a worker environment and GPUs per slot.

Same pattern as test_preflight.py (whose LocalCluster these reuse): the real train.yml,
bad input, then the message, no worker started and an earlier run's files unchanged.
Problems found by one check are reported together, so one run asserts several.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from test_preflight import LocalCluster

SECRET = "never-shown-7f3a"


@pytest.fixture
def cluster(tmp_path: Path) -> LocalCluster:
    return LocalCluster(tmp_path)


def project(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "train.py").write_text("import pkg\nprint('worker=0 training_complete')\n")
    return root


def test_a_bad_project_directory_and_bad_environment_names_are_refused(cluster: LocalCluster, tmp_path: Path) -> None:
    root = project(tmp_path / "project")
    (root / "train.py").write_text("import pkg\ndef main(:\n")
    (root / "data").symlink_to("/etc")
    (root / "weights.bin").write_bytes(b"0" * (1024 * 1024 + 1))
    cluster.hosts["w0"]["tf_worker_env"] = {"1BAD": SECRET, "TF_CONFIG": SECRET, "GOOD": SECRET}
    cluster.hosts["w1"]["tf_worker_env"] = {"TF_RUNBOOK_ATTEMPT": SECRET}
    output = cluster.assert_refused(
        cluster.play(tf_train_dir=str(root), tf_train_script="train.py", tf_train_dir_max_mb=1),
        "Preflight refused the run:",
        f"tf_train_dir {root}: symlink data points outside the directory, to /etc",
        f"tf_train_dir {root}: 1.0 MB after tf_train_dir_exclude, over tf_train_dir_max_mb=1",
        "tf_train_script train.py in tf_train_dir: line 2:",
        "host w0: tf_worker_env name '1BAD' is not a valid environment variable name",
        "host w0: tf_worker_env cannot set TF_CONFIG: the runbook sets it for every worker",
        "host w1: tf_worker_env cannot set TF_RUNBOOK_ATTEMPT",
    )
    assert SECRET not in output


def test_an_entry_script_missing_from_the_project_directory_is_refused(cluster: LocalCluster, tmp_path: Path) -> None:
    root = project(tmp_path / "project")
    cluster.assert_refused(
        cluster.play(tf_train_dir=str(root), tf_train_script="tools/train.py"),
        f"tf_train_script tools/train.py: no such file in tf_train_dir {root}",
    )


def test_hosts_with_fewer_gpus_than_their_slots_need_are_refused(cluster: LocalCluster) -> None:
    cluster.hosts["w0"].update(tf_worker_slots=2, tf_worker_gpus_per_slot=1)
    cluster.hosts["w1"]["tf_worker_gpus_per_slot"] = "two"
    cluster.assert_refused(
        cluster.play(),
        "host w0: 2 slot(s) x tf_worker_gpus_per_slot=1 need 2 GPU(s), the host shows 0",
        "host w1: tf_worker_gpus_per_slot must be auto or a whole number >= 0, got 'two'",
    )
