"""The controller side of the wait (action tf_worker_wait) and of the status (action tf_worker_status): deadlines and what reaches
the operator's terminal.

The action is driven with a stand-in for the host module, so that a host whose clock is
far ahead of the controller's, and a worker whose log holds escape sequences, can be
played without a host.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from ansible.errors import AnsibleError, AnsibleFilterError
from ansible.plugins.action import ActionBase

import tf_wait
import tf_worker_status_action
import tf_worker_wait_action as action
from ansible_collections.tf_runbook.multiworker.plugins.module_utils import tf_bundle
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import printable
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_status_lines import log_lines, progress_lines
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_wait_control import deadline_passed


def worker(**fields: Any) -> dict[str, Any]:
    return {"index": 0, "state": "running", "returncode": None, "reason": None, "last_line": None, **fields}


class FastHost:
    """The host module, on a host whose clock runs ``offset`` seconds ahead: it judges any
    epoch time it is sent with its own clock, as the module does."""

    def __init__(self, offset: float, done_after: int = 2) -> None:
        self.offset = offset
        self.calls: list[dict[str, Any]] = []
        self.done_after = done_after

    def __call__(self, module_name: str, module_args: dict[str, Any], task_vars: Any) -> dict[str, Any]:
        self.calls.append(dict(module_args))
        host_now = time.time() + self.offset
        done = len(self.calls) >= self.done_after
        deadline = float(module_args.get("deadline") or 0)
        return {
            "workers": [worker(state="exited" if done else "running", returncode=0 if done else None)],
            "done": done,
            "failed_workers": [],
            "deadline_passed": bool(deadline) and host_now > deadline,
        }


def run_action(monkeypatch: pytest.MonkeyPatch, tmp_path: Any, execute: Any, plugin_of: Any = action,
               hostname: str = "node1", shown: list[str] | None = None, **args: Any) -> tuple[dict[str, Any], list[str]]:  # fmt: skip
    """The wait's action (or, with plugin_of, the status's) with execute for the host's module;
    what it displays goes to ``shown`` (a new list unless given)."""
    shown = [] if shown is None else shown
    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    monkeypatch.setattr(plugin_of.display, "display", lambda msg, *a, **k: shown.append(msg))
    plugin = object.__new__(plugin_of.ActionModule)
    wait_args = {"controller_dir": str(tmp_path), "attempt": 0, "workers": [], "wait": 0}
    plugin._task = SimpleNamespace(args={**wait_args, **args} if plugin_of is action else args)
    plugin._execute_module = execute
    return plugin.run(task_vars={"inventory_hostname": hostname}), shown


def test_a_host_31_minutes_fast_does_not_end_the_wait(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """The deadline is the controller's: a host whose clock is 31 minutes ahead must not
    see it as passed at the first poll (issue 11, point 13)."""
    host = FastHost(offset=31 * 60)
    result, _ = run_action(monkeypatch, tmp_path, host, deadline=time.time() + 30 * 60)
    assert len(host.calls) == 2, "the wait ended at the first poll"
    assert result["done"] and not result["deadline_passed"]
    # No controller time goes to the host.
    assert all("deadline" not in call for call in host.calls)


def test_a_passed_deadline_is_seen_on_the_controller(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    host = FastHost(offset=-3600, done_after=1000)
    result, _ = run_action(monkeypatch, tmp_path, host, deadline=time.time() - 1)
    assert len(host.calls) == 1
    assert result["deadline_passed"]


def test_the_wait_stops_renewing_the_heartbeat_once_ansible_playbook_is_gone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """A worker process outlives a SIGKILLed ansible-playbook (its own session): once its
    parent is no longer the process it started under, it calls the host no more (each call
    renews the heartbeat) and ends, so that the supervisors see the controller go."""
    parents = iter([4242, 4242, 4242] + [1] * 10)
    monkeypatch.setattr(action.os, "getppid", lambda: next(parents))
    host = FastHost(offset=0, done_after=1000)
    result, _ = run_action(monkeypatch, tmp_path, host)
    assert len(host.calls) == 2
    assert result["failed"] and result["controller_gone"]
    assert "ansible-playbook (pid 4242) ended" in result["msg"]


@pytest.mark.parametrize(
    ("deadline", "now", "passed"),
    [(0, 10**10, False), ("", 5, False), (None, 5, False), (100, 99.5, False), (100, 100.5, True), ("100", 101, True), ("x", 1, False)],
)
def test_deadline_passed_on_the_controller_clock(deadline: Any, now: float, passed: bool) -> None:
    assert deadline_passed(deadline, now) is passed


def test_escape_sequences_of_a_log_line_do_not_reach_the_terminal(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """Point 14: a worker's raw log line is shown with its control characters escaped."""
    line = "worker=0 epoch=1 loss=0.5\x1b]0;owned\x07\x1b[2J\r\x9b31m"

    def host(module_name: str, module_args: dict[str, Any], task_vars: Any) -> dict[str, Any]:
        return {
            "workers": [worker(state="exited", returncode=1, reason="died\x1b[8m", last_line=line)],
            "done": True,
            "failed_workers": [0],
            "deadline_passed": False,
        }

    _, shown = run_action(monkeypatch, tmp_path, host)
    assert shown, "nothing was shown"
    for text in shown:
        assert not any(ord(c) < 32 or 127 <= ord(c) < 160 for c in text), repr(text)
    assert "epoch=1 loss=0.5\\x1b]0;owned\\x07\\x1b[2J\\r\\x9b31m" in shown[0]
    assert "died\\x1b[8m" in shown[0]


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("plain epoch=1 loss=0.3", "plain epoch=1 loss=0.3"),
        ("tab\there", "tab\\there"),
        ("\x1b[31mred", "\\x1b[31mred"),
        ("nul\x00del\x7f", "nul\\x00del\\x7f"),
        ("unicode é ✓", "unicode é ✓"),
        (None, "None"),
    ],
)
def test_printable(raw: Any, shown: str) -> None:
    assert printable(raw) == shown


def test_progress_lines_escape_every_field() -> None:
    lines, _news = progress_lines("h", {"workers": [worker(last_line="a\x1bb")]}, 1.0)
    assert lines == ["  [    1s] h worker-0: running  a\\x1bb"]


# --- what the operator reads (issues 23 and 25) ----------------------------------------------


def test_a_single_check_shows_no_elapsed_time_and_says_no_progress_line_yet(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    def host(module_name: str, module_args: dict[str, Any], task_vars: Any) -> dict[str, Any]:
        return {"workers": [worker(), worker(index=1, last_line="Epoch 31/400")], "done": False, "failed_workers": [],
                "deadline_passed": False}  # fmt: skip

    for plugin_of, args in ((action, {"controller_dir": None}), (tf_worker_status_action, {})):
        result, shown = run_action(monkeypatch, tmp_path, host, plugin_of=plugin_of, run_dir="/r", **args)
        assert shown == ["  node1 worker-0: running  (no progress line yet)", "  node1 worker-1: running  Epoch 31/400"]


def test_a_failed_worker_shows_its_cause() -> None:
    failed = worker(state="exited", returncode=1, reason="exited 1", cause={"kind": "job-error", "detail": "x"})
    assert progress_lines("h", {"workers": [failed]}, 3.0)[0] == ["  [    3s] h worker-0: FAILED rc=1 (job-error, exited 1)  (no progress line yet)"]


def test_log_lines_prefix_escape_and_pick() -> None:
    result = {
        "workers": [
            worker(index=0, log_tail=["a", "b\x1b[2J"]),
            worker(index=2, state="exited", returncode=0, log_tail=["done"]),
        ]
    }
    assert log_lines("h1", result, None) == [
        "[0 h1] (running; 2 last line(s) of its log)",
        "[0 h1] a",
        "[0 h1] b\\x1b[2J",
        "[2 h1] (finished; 1 last line(s) of its log)",
        "[2 h1] done",
    ]
    assert log_lines("h1", result, [2]) == ["[2 h1] (finished; 1 last line(s) of its log)", "[2 h1] done"]
    assert log_lines("h1", result, [5]) == []


def test_the_logs_check_prints_the_logs_once_and_changes_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    calls: list[dict[str, Any]] = []

    def host(module_name: str, module_args: dict[str, Any], task_vars: Any) -> dict[str, Any]:
        calls.append(dict(module_args))
        return {"workers": [worker(index=1, log_tail=["x"])], "done": False, "failed_workers": [], "deadline_passed": False}

    logs = {"lines": 5, "filter": False, "workers": [1]}
    _, shown = run_action(monkeypatch, tmp_path, host, plugin_of=tf_worker_status_action, run_dir="/r", logs=logs)
    assert shown == ["[1 node1] (running; 1 last line(s) of its log)", "[1 node1] x"]
    assert len(calls) == 1
    # Only the module's own options reach the host: no heartbeat, nothing to write.
    assert calls[0] == {"run_dir": "/r", "logs": logs}
    assert list(tmp_path.iterdir()) == []


# --- the wait brings a healthy host's files (issue 26) -------------------------------------------


def packed_run(tmp_path: Path) -> dict[str, Any]:
    """A finished run on the "host" (a directory of tmp_path), packed by the shared code."""
    run = tmp_path / "host" / "runs" / "r1"
    for index in (0, 1):
        (run / f"worker-{index}").mkdir(parents=True)
        (run / f"worker-{index}" / "worker.log").write_text(f"worker={index} epoch=1 loss=0.5\n")
        (run / f"worker-{index}" / "exit.json").write_text('{"returncode": 0}')
    return tf_bundle.pack_run(str(run), ["worker.log", "exit.json"], [], 0)


class HealthyHost:
    """The host module: running at the first call, then every worker exited (0, or
    ``returncode``) with the bundle packed when the call was given the collect's options."""

    def __init__(self, packed: dict[str, Any], returncode: int = 0) -> None:
        self.packed = packed
        self.returncode = returncode
        self.calls: list[dict[str, Any]] = []

    def __call__(self, module_name: str, module_args: dict[str, Any], task_vars: Any) -> dict[str, Any]:
        self.calls.append(dict(module_args))
        done = len(self.calls) >= 2
        status = {
            "workers": [worker(state="exited" if done else "running", returncode=self.returncode if done else None)],
            "done": done, "failed_workers": [0] if done and self.returncode else [], "deadline_passed": False,
        }  # fmt: skip
        if done and not self.returncode and "collect" in module_args:
            status["bundle"] = self.packed
        return status


def with_connection(monkeypatch: pytest.MonkeyPatch, fetched: list[str], fail: bool = False) -> None:
    """The host's connection: its fetch_file copies the file (or fails), noting the path."""

    def fetch_file(remote: str, local: str) -> None:
        fetched.append(remote)
        if fail:
            raise AnsibleError("connection reset while fetching")
        shutil.copyfile(remote, local)

    monkeypatch.setattr(action.ActionModule, "_connection", SimpleNamespace(fetch_file=fetch_file), raising=False)


COLLECT = {"patterns": ["worker.log", "exit.json"], "artifacts": [], "max_mb": 0}


def test_the_last_call_of_a_healthy_host_brings_its_files_as_the_collect_would(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    packed = packed_run(tmp_path)
    fetched: list[str] = []
    with_connection(monkeypatch, fetched)
    controller = tmp_path / "controller" / "r1"
    host = HealthyHost(packed)
    result, _ = run_action(monkeypatch, tmp_path, host, controller_dir=str(controller), collect=COLLECT)
    assert len(host.calls) == 2 and all(call["collect"] == COLLECT for call in host.calls)
    assert fetched == [packed["bundle"]]
    assert result["collected"] == {
        "files": packed["files"], "left_out": [], "truncated": [], "updated": packed["files"],
        "dest": str(controller / "node1"),
    }  # fmt: skip
    assert "bundle" not in result
    for rel in packed["files"]:
        assert (controller / "node1" / rel).read_bytes() == (Path(packed["run_dir"]) / rel).read_bytes()
    # Private on the controller, as the collect's unpack makes them.
    assert oct((controller / "node1").stat().st_mode & 0o777) == "0o700"
    assert oct((controller / "node1" / packed["files"][0]).stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize("why", ["peer-failed", "own-failure", "detached", "single-check"])
def test_a_failing_detached_or_single_check_brings_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, why: str
) -> None:
    packed = packed_run(tmp_path)
    fetched: list[str] = []
    with_connection(monkeypatch, fetched)
    controller = tmp_path / "controller" / "r1"
    args: dict[str, Any] = {"controller_dir": str(controller), "collect": COLLECT, "attempt": 2}
    host = HealthyHost(packed, returncode=1 if why == "own-failure" else 0)
    if why == "peer-failed":
        # Another host flagged this attempt's failure while this one finished.
        flag = controller / ".attempt-2.failed"

        def flagging(module_name: str, module_args: dict[str, Any], task_vars: Any) -> dict[str, Any]:
            status = host(module_name, module_args, task_vars)
            if status["done"]:
                controller.mkdir(parents=True, exist_ok=True)
                flag.write_text(json.dumps({"host": "node2", "reason": "worker failed"}))
            return status

        execute: Any = flagging
    else:
        execute = host
    if why == "detached":
        args["until_joined"] = True
    if why == "single-check":
        args["controller_dir"] = None
    result, _ = run_action(monkeypatch, tmp_path, execute, **args)
    assert fetched == [] and "collected" not in result and "bundle" not in result
    # A detached wait or a single check does not even ask the host to pack.
    assert all(("collect" in call) is (why in ("peer-failed", "own-failure")) for call in host.calls)
    if why == "own-failure":
        # The attempt's flag, named by the contract in the run's controller directory.
        assert json.loads((controller / ".attempt-2.failed").read_text())["host"] == "node1"


def test_files_that_cannot_be_brought_are_left_to_the_collect(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    packed = packed_run(tmp_path)
    fetched: list[str] = []
    with_connection(monkeypatch, fetched, fail=True)
    warned: list[str] = []
    monkeypatch.setattr(action.display, "warning", lambda msg, *a, **k: warned.append(msg))
    result, _ = run_action(monkeypatch, tmp_path, HealthyHost(packed), controller_dir=str(tmp_path / "c"), collect=COLLECT)
    assert fetched == [packed["bundle"]] and "collected" not in result
    assert result["bundle_error"] == f"cannot bring the collect bundle {packed['bundle']}: connection reset while fetching"
    assert warned and "the collect fetches them" in warned[0]


def test_a_host_whose_workers_matched_no_file_is_collected_without_a_fetch(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    empty = {"run_dir": "/r", "files": [], "left_out": [{"path": "worker-0/model.bin", "bytes": 9}], "truncated": [],
             "bundle": ""}  # fmt: skip
    fetched: list[str] = []
    with_connection(monkeypatch, fetched)
    result, _ = run_action(monkeypatch, tmp_path, HealthyHost(empty), controller_dir=str(tmp_path / "c"), collect=COLLECT)
    assert fetched == []
    assert result["collected"] == {"files": [], "left_out": empty["left_out"], "truncated": [], "updated": [],
                                   "dest": str(tmp_path / "c" / "node1")}  # fmt: skip


# --- which hosts the collect leaves out (filter tf_wait_collected) --------------------------------


def brought(host_files: list[str], **extra: Any) -> dict[str, Any]:
    return {"files": host_files, "left_out": [], "truncated": [], "updated": host_files, "dest": "/c/h", **extra}


@pytest.mark.parametrize(
    ("outcome", "expected"),
    [
        ({"ok": True, "detached": False}, {"a": {"files": ["worker-0/worker.log"], "left_out": [], "truncated": []}}),
        ({"ok": False, "detached": False}, {}),
        ({"ok": True, "detached": True}, {}),
        (None, {}),
    ],
)
def test_only_an_ok_outcome_leaves_hosts_out_of_the_collect(outcome: Any, expected: dict[str, Any]) -> None:
    statuses = {
        "a": {"collected": brought(["worker-0/worker.log"])},
        # The bundle could not be brought, or the host's status is incomplete: fetched.
        "b": {"bundle_error": "cannot bring"},
        "c": {"collected": {"files": ["worker-1/worker.log"]}},
        "d": None,
    }
    assert tf_wait.tf_wait_collected(statuses, outcome) == expected


def test_the_collected_filter_refuses_statuses_that_are_not_a_mapping() -> None:
    with pytest.raises(AnsibleFilterError, match="statuses must map host to status, not list"):
        tf_wait.tf_wait_collected([], {"ok": True})


# --- progress a person can plan with (issue 39) ----------------------------------------------


def epoch_progress(epoch: int, last_at: float) -> dict[str, Any]:
    return {"format": "keras", "epoch": epoch, "total": 6, "metrics": [["loss", "0.5"]], "epochs": epoch,
            "joined_at": 1000.0, "first_at": 1004.0, "prev_at": last_at - 4.0, "last_at": last_at,
            "completed_at": None}  # fmt: skip


def test_workers_that_agree_show_one_line_with_epoch_times_and_time_left(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """Times of the host's clock (its ``now``, however far from the controller's) give the
    durations; the controller's clock gives the finishing time."""
    def host(module_name: str, module_args: dict[str, Any], task_vars: Any) -> dict[str, Any]:
        workers = [worker(index=i, started_at=990.0, progress=epoch_progress(3, 1012.0)) for i in (0, 1)]
        return {"workers": workers, "done": False, "failed_workers": [], "deadline_passed": False, "now": 1013.0}

    result, shown = run_action(monkeypatch, tmp_path, host, controller_dir=None, run_dir="/r")
    [line] = shown
    assert line.startswith(
        "  node1 workers 0,1: running  epoch 3 of 6 (loss 0.5); 4.0 s/epoch last, 4.0 s mean; elapsed 23 s; "
        "about 11 s left, done by "
    ), line
    assert line.endswith(" UTC")


def test_a_worker_after_its_last_epoch_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    def host(module_name: str, module_args: dict[str, Any], task_vars: Any) -> dict[str, Any]:
        last = {**epoch_progress(6, 1024.0), "epochs": 6}
        return {"workers": [worker(progress=last), worker(index=1, last_line="Epoch 6/6")], "done": False,
                "failed_workers": [], "deadline_passed": False, "now": 1036.0}  # fmt: skip

    result, shown = run_action(monkeypatch, tmp_path, host, controller_dir=None, run_dir="/r")
    assert shown[0].startswith("  node1 worker-0: running  epoch 6 of 6 done 12 s ago; saving and exiting (loss 0.5)")
    assert shown[1] == "  node1 worker-1: running  Epoch 6/6"


def test_the_wait_prints_a_new_epoch_at_once_and_the_same_one_again_only_after_a_while(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    epochs = iter([1, 1, 2, 2])

    def host(module_name: str, module_args: dict[str, Any], task_vars: Any) -> dict[str, Any]:
        epoch = next(epochs)
        return {"workers": [worker(progress=epoch_progress(epoch, 1000.0 + 4 * epoch))], "done": False,
                "failed_workers": [], "deadline_passed": False, "now": 1000.0 + 4 * epoch + 1}  # fmt: skip

    _result, shown = run_action(monkeypatch, tmp_path, host, rounds=4)
    assert [line.split("worker-0: ")[1].split(";")[0] for line in shown] == ["running  epoch 1 of 6 (loss 0.5)",
                                                                          "running  epoch 2 of 6 (loss 0.5)"]


# --- ParameterServerStrategy: the chief's end ends the run, and the wait stops the servers --


class ServerHost:
    """A host whose one worker (index 3, a ParameterServerStrategy server) serves until the
    runbook's stop (tf_worker_stop) comes, then has exited 0 with the cause it named."""

    def __init__(self, fails_first: bool = False) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.stopped = False
        self.fails_first = fails_first

    def __call__(self, module_name: str, module_args: dict[str, Any], task_vars: Any) -> dict[str, Any]:
        self.calls.append((module_name, dict(module_args)))
        if module_name.endswith("tf_worker_stop"):
            self.stopped = True
            return {"changed": True, "stopped": [{"dir": "/r/worker-3", "pids": [42]}]}
        if self.fails_first:
            entry = worker(index=3, state="exited", returncode=137, cause={"kind": "killed", "detail": "SIGKILL"})
            return {"workers": [entry], "done": True, "failed_workers": [3], "deadline_passed": False}
        if self.stopped:
            cause = {"kind": "stopped", "detail": "the coordinator ended: servers are stopped by the runbook"}
            entry = worker(index=3, state="exited", returncode=0, stopped_by="runbook", cause=cause)
            return {"workers": [entry], "done": True, "failed_workers": [], "deadline_passed": False}
        return {"workers": [worker(index=3)], "done": False, "failed_workers": [], "deadline_passed": False}


def chief_host(module_name: str, module_args: dict[str, Any], task_vars: Any) -> dict[str, Any]:
    """The chief's host: the coordinator (index 0) exited 0."""
    return {"workers": [worker(index=0, state="exited", returncode=0)], "done": True, "failed_workers": [],
            "deadline_passed": False}  # fmt: skip


def test_the_chiefs_end_makes_the_wait_stop_the_servers_recorded_as_stopped_by_the_runbook(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The chief's host first: its wait records the coordinator's end.
    chief, _ = run_action(monkeypatch, tmp_path, chief_host, hostname="node0", coordinator=True, run_dir="/r")
    assert chief["done"] and "servers_stopped" not in chief
    assert json.loads((tmp_path / ".attempt-0.coordinator-ended").read_text())["host"] == "node0"
    # A server's host: one window with its server running, then the stop, then its exit.
    host = ServerHost()
    result, shown = run_action(monkeypatch, tmp_path, host, coordinator=True, run_dir="/r",
                               task_types=["chief", "worker", "worker", "ps"])
    names = [name.rsplit(".", 1)[-1] for name, _args in host.calls]
    assert names == ["tf_worker_wait", "tf_worker_stop", "tf_worker_wait"]
    stop = host.calls[1][1]
    assert stop == {"run_dir": "/r", "grace": 10.0, "stopped_by": "runbook", "cause": "stopped",
                    "reason": "the coordinator ended: servers are stopped by the runbook"}  # fmt: skip
    assert result["done"] and result["failed_workers"] == [] and result["servers_stopped"]["workers"] == [3]
    assert not (tmp_path / ".attempt-0.failed").exists()
    assert "  node1: the coordinator ended: stopping the servers worker-3" in shown
    # The lines name each worker's task where the inventory gave types.
    assert any("node1 worker-3 (ps:0): stopped (by the runbook: the coordinator ended)" in line for line in shown), shown


def test_a_server_that_died_before_the_chief_ended_is_a_failure_not_a_stop(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    host = ServerHost(fails_first=True)
    result, _ = run_action(monkeypatch, tmp_path, host, hostname="node3", coordinator=True, run_dir="/r")
    assert result["failed_workers"] == [3] and "servers_stopped" not in result
    assert json.loads((tmp_path / ".attempt-0.failed").read_text())["workers"] == [3]
    # The chief's end that comes after the failure ends nothing well: no coordinator record,
    # and no host stops its servers as if the run had ended.
    run_action(monkeypatch, tmp_path, chief_host, hostname="node0", coordinator=True, run_dir="/r")
    assert not (tmp_path / ".attempt-0.coordinator-ended").exists()
    later = ServerHost()
    result, _ = run_action(monkeypatch, tmp_path, later, coordinator=True, run_dir="/r")
    assert [name.rsplit(".", 1)[-1] for name, _args in later.calls] == ["tf_worker_wait"]
    assert result["peer_failed"]["workers"] == [3]


def test_without_the_ps_shape_the_wait_stops_nothing_when_worker_0_ends(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    run_action(monkeypatch, tmp_path, chief_host, run_dir="/r")
    assert not (tmp_path / ".attempt-0.coordinator-ended").exists()
    # Nor a detached wait, which leaves the run running.
    run_action(monkeypatch, tmp_path, chief_host, coordinator=True, until_joined=True, run_dir="/r")
    assert not (tmp_path / ".attempt-0.coordinator-ended").exists()


@pytest.mark.parametrize(
    ("types", "labels"),
    [
        (["chief", "worker", "worker", "ps"], {0: "chief:0", 1: "worker:0", 2: "worker:1", 3: "ps:0"}),
        (["chief", "worker", "evaluator"], {0: "chief:0", 1: "worker:0", 2: "evaluator:0"}),
        # The first shape: every worker a worker, the lines as they were.
        (["worker", "worker"], {}),
        ([], {}),
        (None, {}),
    ],
)
def test_the_lines_name_each_workers_task_only_where_the_inventory_gave_types(types: Any, labels: dict[int, str]) -> None:
    from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_status_lines import task_labels

    assert task_labels(types) == labels


def lost_host(module_name: str, module_args: dict[str, Any], task_vars: Any) -> dict[str, Any]:
    from ansible.errors import AnsibleConnectionFailure

    raise AnsibleConnectionFailure("ssh: connect to host node2: Connection timed out")


@pytest.mark.parametrize(
    ("workers", "required", "flagged"),
    [
        # The sidecar evaluator alone, not required: reported, no flag, the training goes on.
        ([{"index": 2, "dir": "/r/worker-2"}], False, False),
        ([{"index": 2, "dir": "/r/worker-2"}], True, True),
        # A training worker's host: the attempt fails, as before.
        ([{"index": 1, "dir": "/r/worker-1"}], False, True),
    ],
)
def test_a_lost_host_flags_the_attempt_unless_it_runs_only_an_optional_evaluator(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, workers: list[dict[str, Any]], required: bool, flagged: bool
) -> None:
    from ansible.errors import AnsibleConnectionFailure

    shown: list[str] = []
    with pytest.raises(AnsibleConnectionFailure):
        run_action(monkeypatch, tmp_path, lost_host, hostname="node2", shown=shown, workers=workers,
                   task_types=["chief", "worker", "evaluator"], evaluator_required=required)
    flag = tmp_path / ".attempt-0.failed"
    assert flag.exists() is flagged
    said = "  node2 (the sidecar evaluator) stopped answering: the training goes on without it"
    assert (said in shown) is not flagged, shown
    if flagged:
        assert json.loads(flag.read_text())["cause"] == "host-lost"
