"""The controller side of the wait (action tf_worker_status): deadlines and what reaches
the operator's terminal.

The action is driven with a stand-in for the host module, so that a host whose clock is
far ahead of the controller's, and a worker whose log holds escape sequences, can be
played without a host.
"""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest
from ansible.plugins.action import ActionBase

import tf_worker_status_action as action
from tf_worker_status_action import deadline_passed, printable, progress_lines


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


def run_action(monkeypatch: pytest.MonkeyPatch, tmp_path: Any, execute: Any, **args: Any) -> tuple[dict[str, Any], list[str]]:
    shown: list[str] = []
    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    monkeypatch.setattr(action.display, "display", lambda msg, *a, **k: shown.append(msg))
    plugin = object.__new__(action.ActionModule)
    plugin._task = SimpleNamespace(args={"controller_dir": str(tmp_path), "attempt": 0, "workers": [], "wait": 0, **args})
    plugin._execute_module = execute
    return plugin.run(task_vars={"inventory_hostname": "node1"}), shown


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
    lines = progress_lines("h", {"workers": [worker(last_line="a\x1bb")]}, 1.0)
    assert lines == ["  [    1s] h worker-0: running  a\\x1bb"]


# --- what the operator reads (issues 23 and 25) ----------------------------------------------


def test_a_single_check_shows_no_elapsed_time_and_says_no_progress_line_yet(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    def host(module_name: str, module_args: dict[str, Any], task_vars: Any) -> dict[str, Any]:
        return {"workers": [worker(), worker(index=1, last_line="Epoch 31/400")], "done": False, "failed_workers": [],
                "deadline_passed": False}  # fmt: skip

    result, shown = run_action(monkeypatch, tmp_path, host, controller_dir=None, run_dir="/r")
    assert shown == ["  node1 worker-0: running  (no progress line yet)", "  node1 worker-1: running  Epoch 31/400"]


def test_a_failed_worker_shows_its_cause() -> None:
    failed = worker(state="exited", returncode=1, reason="exited 1", cause={"kind": "job-error", "detail": "x"})
    assert progress_lines("h", {"workers": [failed]}, 3.0) == ["  [    3s] h worker-0: FAILED rc=1 (job-error, exited 1)  (no progress line yet)"]


def test_log_lines_prefix_escape_and_pick() -> None:
    result = {
        "workers": [
            worker(index=0, log_tail=["a", "b\x1b[2J"]),
            worker(index=2, state="exited", returncode=0, log_tail=["done"]),
        ]
    }
    assert action.log_lines("h1", result, None) == [
        "[0 h1] (running; 2 last line(s) of its log)",
        "[0 h1] a",
        "[0 h1] b\\x1b[2J",
        "[2 h1] (finished; 1 last line(s) of its log)",
        "[2 h1] done",
    ]
    assert action.log_lines("h1", result, [2]) == ["[2 h1] (finished; 1 last line(s) of its log)", "[2 h1] done"]
    assert action.log_lines("h1", result, [5]) == []


def test_the_logs_check_prints_the_logs_once_and_changes_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    calls: list[dict[str, Any]] = []

    def host(module_name: str, module_args: dict[str, Any], task_vars: Any) -> dict[str, Any]:
        calls.append(dict(module_args))
        return {"workers": [worker(index=1, log_tail=["x"])], "done": False, "failed_workers": [], "deadline_passed": False}

    _, shown = run_action(
        monkeypatch, tmp_path, host, controller_dir=None, run_dir="/r", show_logs=True, log_workers=[1], tail_lines=5
    )
    assert shown == ["[1 node1] (running; 1 last line(s) of its log)", "[1 node1] x"]
    assert len(calls) == 1
    # Only the module's own options reach the host: no heartbeat, nothing to write.
    assert calls[0] == {"workers": [], "wait": 0, "run_dir": "/r", "tail_lines": 5}
    assert list(tmp_path.iterdir()) == []
