"""The parts the wait and the status are made of (issue 40): the wait's window on the host
(module_utils/tf_worker_watch.py), what a reading says of a host (tf_worker_records.report),
what the wait decides on the controller (tf_wait_control.py), and the two modules, which
only dispatch to them: tf_worker_wait (the wait, which also collects) and tf_worker_status
(one reading: the status, the logs and the reattach's finder)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import helpers
from ansible_collections.tf_runbook.multiworker.plugins.module_utils import tf_wait_control, tf_worker_records, tf_worker_watch

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"
ANY_LINE = tf_worker_records.progress_regex("")


def worker_dir(run: Path, index: int, exit_record: dict[str, Any] | None = None, log: str = "") -> dict[str, Any]:
    """A worker directory of ``run`` with its log and, when given, its exit record."""
    wdir = run / f"worker-{index}"
    wdir.mkdir(parents=True, exist_ok=True)
    (wdir / "worker.log").write_text(log)
    if exit_record is not None:
        (wdir / "exit.json").write_text(json.dumps(exit_record))
    return {"index": index, "dir": str(wdir)}


def entry(index: int, state: str, returncode: int | None = None, joined: bool = False) -> dict[str, Any]:
    return {"index": index, "state": state, "returncode": returncode, "joined": joined}


@pytest.mark.parametrize(
    ("current", "expected"),
    [
        ([], {"done": True, "joined": False, "failed_workers": []}),
        ([entry(0, "running", joined=True), entry(1, "starting")], {"done": False, "joined": False, "failed_workers": []}),
        ([entry(0, "exited", 0, True), entry(1, "exited", 3, True)], {"done": True, "joined": True, "failed_workers": [1]}),
        ([entry(0, "exited", -1), entry(1, "running", joined=True)], {"done": False, "joined": False, "failed_workers": [0]}),
    ],
)
def test_report_says_what_a_reading_means_for_the_host(current: list[dict[str, Any]], expected: dict[str, Any]) -> None:
    assert tf_worker_records.report(current) == expected


def test_the_window_returns_at_once_when_every_worker_exited(tmp_path: Path) -> None:
    workers = [worker_dir(tmp_path, i, {"returncode": 0}, "Epoch 1/1\n") for i in (0, 1)]
    beats: list[float] = []
    start = time.monotonic()
    current = tf_worker_watch.watch(workers, ANY_LINE, 8, {}, 30, False, lambda: beats.append(time.monotonic()))
    assert time.monotonic() - start < 5
    assert [w["state"] for w in current] == ["exited", "exited"]
    assert [w["progress_lines"] for w in current] == [1, 1]
    assert len(beats) == 1


def test_the_window_lasts_its_length_and_beats_at_every_reading(tmp_path: Path) -> None:
    workers = [worker_dir(tmp_path, 0)]
    # A supervisor alive in the worker's directory: the worker runs.
    supervisor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], cwd=workers[0]["dir"])
    try:
        (Path(workers[0]["dir"]) / "state.json").write_text(json.dumps({"pid": None, "supervisor_pid": supervisor.pid}))
        beats: list[float] = []
        start = time.monotonic()
        current = tf_worker_watch.watch(workers, ANY_LINE, 8, {}, 0.6, False, lambda: beats.append(time.monotonic()))
        assert 0.6 <= time.monotonic() - start < 5
    finally:
        supervisor.kill()
        supervisor.wait()
    assert current[0]["state"] == "running"
    # Every POLL_SECONDS a reading, each after a beat.
    assert len(beats) >= 0.6 / tf_worker_watch.POLL_SECONDS


@pytest.mark.parametrize(
    ("status", "flag", "detached", "brought"),
    [
        ({"bundle": {}, "done": True, "failed_workers": []}, None, False, True),
        ({"bundle": {}, "done": True, "failed_workers": []}, None, True, False),
        ({"bundle": {}, "done": True, "failed_workers": []}, {"host": "other"}, False, False),
        ({"bundle": {}, "done": True, "failed_workers": [1]}, None, False, False),
        ({"bundle": {}, "done": False, "failed_workers": []}, None, False, False),
        ({"done": True, "failed_workers": []}, None, False, False),
        ({"bundle": {}, "done": True, "failed_workers": [], "stalled": {"seconds": 30}}, None, False, False),
    ],
)
def test_the_files_come_with_the_wait_only_while_the_run_is_healthy(
    status: dict[str, Any], flag: dict[str, Any] | None, detached: bool, brought: bool
) -> None:
    assert tf_wait_control.bring_bundle(status, flag, detached) is brought


def test_the_attempts_flag_and_progress_directory_are_the_contracts(tmp_path: Path) -> None:
    flag, progress = tf_wait_control.attempt_paths(str(tmp_path), 2)
    assert (Path(flag).name, Path(progress).name) == (".attempt-2.failed", ".attempt-2.progress")
    assert tf_wait_control.read_flag(flag) is None
    assert tf_wait_control.write_flag(flag, {"host": "a"}) is True
    assert tf_wait_control.read_flag(flag) == {"host": "a"}


def test_the_status_module_finds_the_latest_attempt_and_reads_it_once(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "r1"
    worker_dir(run, 0, {"returncode": 1})
    retry = run / "retry-1"
    for index in (0, 1):
        worker_dir(retry, index, {"returncode": 0}, "worker=0 epoch=1/1 loss=0.5\n" + "".join(f"line {n}\n" for n in range(30)))
    result = helpers.run_module(PLUGINS / "modules" / "tf_worker_status.py", {"run_dir": str(run)})
    assert [w["dir"] for w in result["workers_found"]] == [str(retry / "worker-0"), str(retry / "worker-1")]
    assert result["launch"] == {"attempt": 1}
    assert [(w["state"], w["returncode"]) for w in result["workers"]] == [("exited", 0)] * 2
    assert [len(w["log_tail"]) for w in result["workers"]] == [tf_worker_records.TAIL_LINES] * 2
    # Nothing written: no heartbeat, no bundle.
    assert not (run / "controller.heartbeat").exists() and not list(run.glob(".collect*"))
    logs = helpers.run_module(PLUGINS / "modules" / "tf_worker_status.py", {"run_dir": str(run), "logs": {"lines": 3}})
    assert [w["log_tail"] for w in logs["workers"]] == [["line 27", "line 28", "line 29"]] * 2


def test_the_wait_module_renews_the_heartbeat_and_packs_when_all_succeeded(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "r1"
    workers = [worker_dir(run, i, {"returncode": 0}, "Epoch 1/1\n") for i in (0, 1)]
    collect = {"patterns": ["worker.log"], "artifacts": [], "max_mb": 10}
    result = helpers.run_module(
        PLUGINS / "modules" / "tf_worker_wait.py", {"workers": workers, "run_dir": str(run), "wait": 30, "collect": collect}
    )
    assert result["done"] is True and result["failed_workers"] == []
    assert result["bundle"]["files"] == ["worker-0/worker.log", "worker-1/worker.log"]
    assert (run / "controller.heartbeat").is_file()
    assert set(result["progress_marks"]) == {w["dir"] for w in workers}


def test_a_status_names_each_workers_task_from_its_own_tf_config(tmp_path: Path) -> None:
    """status.yml has no cluster spec: each worker's task comes from the TF_CONFIG in its
    directory, named only where the cluster has task types (issue 41)."""
    from ansible_collections.tf_runbook.multiworker.plugins.module_utils import tf_worker_records as records
    from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_status_lines import progress_lines

    cluster = {"chief": ["a:1"], "worker": ["b:1"], "ps": ["c:1"]}
    configs = {
        0: {"cluster": cluster, "task": {"type": "chief", "index": 0}},
        1: {"cluster": cluster, "task": {"type": "ps", "index": 0}},
        2: {"cluster": cluster, "task": {"type": "evaluator", "index": 0}},
        3: {"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}},
        4: {"cluster": cluster, "task": {"type": "worker", "index": True}},
    }
    current = []
    for index, config in configs.items():
        wdir = tmp_path / f"worker-{index}"
        wdir.mkdir()
        (wdir / "tf_config.json").write_text(json.dumps(config))
        current.append({"index": index, "dir": str(wdir), "state": "running"})
    current.append({"index": 5, "dir": str(tmp_path / "missing"), "state": "running"})
    tasks = {w["index"]: w.get("task") for w in records.with_tasks(current)}
    assert tasks == {0: "chief:0", 1: "ps:0", 2: "evaluator:0", 3: None, 4: None, 5: None}
    lines, _keys = progress_lines("node0", {"workers": current[:2], "now": 0.0}, None, 0.0)
    assert any("chief:0" in line for line in lines) and any("ps:0" in line for line in lines), lines
