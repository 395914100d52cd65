"""What `--check --diff` shows of a run: tf_run_dir's diff of a host's part of the run."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

import tf_run_dir
from ansible_collections.tf_runbook.multiworker.plugins.module_utils import tf_run_files
from helpers import run_module

CLUSTER = ["10.0.0.1:2222", "10.0.0.1:2223", "10.0.0.2:2222"]


def config(index: int, cluster: list[str] = CLUSTER) -> str:
    return json.dumps({"cluster": {"worker": cluster}, "task": {"type": "worker", "index": index}}) + "\n"


def test_the_layout_names_the_cluster_once_then_each_workers_index_and_port() -> None:
    text = tf_run_files.describe_layout(
        "/opt/py/bin/python",
        ["/r/job", "/r/worker-0", "/r/worker-1"],
        [("/r/job/train.py", "ab" * 32)],
        [("/r/worker-0/tf_config.json", config(0)), ("/r/worker-1/tf_config.json", config(1))],
    )
    lines = text.splitlines()
    assert lines[0] == "interpreter: /opt/py/bin/python"
    assert [line for line in lines if "10.0.0.2:2222" in line] == [
        "TF_CONFIG cluster (3 workers): 10.0.0.1:2222, 10.0.0.1:2223, 10.0.0.2:2222"
    ]
    assert "directory /r/worker-1/ (mode 0700)" in lines
    assert f"file /r/job/train.py sha256 {'ab' * 32}" in lines
    assert lines[-2:] == [
        "TF_CONFIG /r/worker-0/tf_config.json: index 0, port 2222",
        "TF_CONFIG /r/worker-1/tf_config.json: index 1, port 2223",
    ]


@pytest.mark.parametrize(
    ("second", "expected"),
    [
        (config(1, CLUSTER[:2]), "TF_CONFIG /r/w1: index 1, port 2223, cluster 10.0.0.1:2222, 10.0.0.1:2223"),
        ("{not json", "TF_CONFIG /r/w1: unreadable TF_CONFIG"),
    ],
)
def test_a_worker_whose_cluster_differs_or_is_unreadable_is_shown_on_its_own(second: str, expected: str) -> None:
    text = tf_run_files.describe_layout("", [], [], [("/r/w0", config(0)), ("/r/w1", second)])
    assert expected in text.splitlines()
    assert not text.startswith("interpreter")


def diff_args(base: Path) -> dict[str, object]:
    return {
        "base_dir": str(base),
        "run_id": "r1",
        "indices": [0, 1],
        "job_files": [{"name": "train.py", "content": "print(1)\n"}],
        "configs": [{"index": 0, "content": config(0)}, {"index": 1, "content": config(1)}],
        "interpreter": "~/venv/bin/python",
        "_ansible_diff": True,
    }


def test_check_diff_on_a_fresh_host_shows_the_whole_run_and_writes_nothing(tmp_path: Path) -> None:
    base = tmp_path / "fresh"
    result = run_module(tf_run_dir.__file__, diff_args(base), check_mode=True)
    assert result["changed"] is True and not base.exists()
    diff = result["diff"]
    run = f"{base}/runs/r1"
    assert diff["after_header"] == run
    assert diff["before"] == f"interpreter: {Path.home()}/venv/bin/python\n"
    after = diff["after"].splitlines()
    assert f"TF_CONFIG cluster (3 workers): {', '.join(CLUSTER)}" in after
    assert f"TF_CONFIG {run}/worker-1/tf_config.json: index 1, port 2223" in after
    assert f"file {run}/job/train.py sha256 {hashlib.sha256(b'print(1)\n').hexdigest()}" in after
    assert f"directory {run}/checkpoints/ (mode 0700)" in after


def test_the_diff_of_a_deployed_run_is_empty_and_shows_a_changed_file(tmp_path: Path) -> None:
    args = diff_args(tmp_path)
    run_module(tf_run_dir.__file__, args)
    again = run_module(tf_run_dir.__file__, args, check_mode=True)
    assert again["changed"] is False and again["diff"]["before"] == again["diff"]["after"]
    (tmp_path / "runs" / "r1" / "job" / "train.py").write_text("tampered")
    tampered = run_module(tf_run_dir.__file__, args, check_mode=True)
    before = set(tampered["diff"]["before"].splitlines())
    after = set(tampered["diff"]["after"].splitlines())
    assert [line.split()[-1] for line in before - after] == [hashlib.sha256(b"tampered").hexdigest()]
    assert len(after - before) == 1


def test_no_diff_is_returned_unless_asked(tmp_path: Path) -> None:
    args = dict(diff_args(tmp_path), _ansible_diff=False)
    assert "diff" not in run_module(tf_run_dir.__file__, args, check_mode=True)


def test_the_launch_shows_the_same_diff_and_starts_nothing_in_check_mode(tmp_path: Path) -> None:
    """The deploy's diff comes from the launch's module run now (tf_worker_launch with
    deploy): the same lines as tf_run_dir's, nothing written, nothing started."""
    import tf_worker_launch

    args = diff_args(tmp_path / "fresh")
    deploy = {k: v for k, v in args.items() if not k.startswith("_")}
    launch = {"deploy": deploy, "host": "node-a", "_ansible_diff": True,
              "launch": {"workers": [{"index": 0}, {"index": 1}], "python": "~/venv/bin/python",
                         "script": "train.py", "cluster": CLUSTER}}  # fmt: skip
    launched = run_module(tf_worker_launch.__file__, launch, check_mode=True)
    alone = run_module(tf_run_dir.__file__, args, check_mode=True)
    assert launched.get("failed") is not True, launched
    assert launched["diff"] == alone["diff"] and not (tmp_path / "fresh").exists()
    assert launched["msg"] == "host node-a: would start 2 supervisor(s)"
    assert [w["supervisor_pid"] for w in launched["workers"]] == [None, None]
