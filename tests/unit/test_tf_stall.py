"""The stall watchdog of the wait (issue 23, point 1), the host clock of a reattach (issue
24, point 4) and the private flag files (issue 24, point 14).

The action tf_worker_wait (tf_worker_status for the reattach's finder) is driven with a stand-in for the host module and a fake
controller clock, so that half an hour without a progress line takes no time.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import pytest
from ansible.errors import AnsibleFilterError
from ansible.plugins.action import ActionBase

import tf_wait
import tf_worker_status_action
import tf_worker_wait_action as action
from ansible_collections.tf_runbook.multiworker.plugins.module_utils import tf_activity, tf_proc, tf_wait_control, tf_worker_records

T0 = 1_800_000_000.0


class Clock:
    """The controller's clock: every module call lasts ``step`` seconds."""

    def __init__(self, step: float = 10.0) -> None:
        self.now = T0
        self.step = step

    def time(self) -> float:
        return self.now


class Host:
    """The host module: its workers' progress line counts at each call (the last one
    repeats), each call moving the controller clock on. With ``shares``, each worker's job
    used that share of a core during each call (the last one repeats): its cumulative
    ``cpu_seconds`` at ``cpu_at`` (the host's monotonic clock, T0 at the controller's T0);
    with ``states``, each job's ``process_state`` at each call (the last one repeats)."""

    def __init__(
        self, clock: Clock, counts: list[list[int]], rounds_to_done: int = 10**6,
        shares: list[list[float]] | None = None, states: list[list[str]] | None = None, **extra: Any,
    ) -> None:  # fmt: skip
        self.clock = clock
        self.counts = counts
        self.rounds_to_done = rounds_to_done
        self.shares = shares
        self.states = states
        self.cpu = [5.0] * len(counts[0])
        self.calls: list[dict[str, Any]] = []
        self.extra = extra

    def __call__(self, module_name: str, module_args: dict[str, Any], task_vars: Any) -> dict[str, Any]:
        self.calls.append(dict(module_args))
        self.clock.now += self.clock.step
        call = len(self.calls)
        counts = self.counts[min(call, len(self.counts)) - 1]
        done = call >= self.rounds_to_done
        workers = [
            {"index": i, "state": "exited" if done else "running", "returncode": 0 if done else None,
             "reason": None, "last_line": f"worker={i} epoch={n}" if n else None, "progress_lines": n,
             "cpu_seconds": None, "cpu_at": None, "process_state": None}
            for i, n in enumerate(counts)
        ]  # fmt: skip
        if self.shares is not None and not done:
            shares = self.shares[min(call, len(self.shares)) - 1]
            for worker, share in zip(workers, shares):
                self.cpu[worker["index"]] += share * self.clock.step
                worker.update(cpu_seconds=self.cpu[worker["index"]], cpu_at=self.clock.now - T0 + 1000.0)
        if self.states is not None and not done:
            for worker, state in zip(workers, self.states[min(call, len(self.states)) - 1]):
                worker["process_state"] = state
        return {
            "workers": workers,
            "done": done,
            "failed_workers": [],
            "deadline_passed": False,
            "now": self.clock.now,
            "progress_marks": {"m": len(self.calls)},
            **self.extra,
        }


def run_action(
    monkeypatch: pytest.MonkeyPatch, clock: Clock, execute: Any, host: str = "node1", plugin_of: Any = action, **args: Any
) -> tuple[dict[str, Any], list[str]]:
    """The wait's action (or, with ``plugin_of``, the status's), with ``execute`` for the
    host's module and ``clock`` for the controller's."""
    shown: list[str] = []
    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    monkeypatch.setattr(plugin_of.display, "display", lambda msg, *a, **k: shown.append(msg))
    monkeypatch.setattr(plugin_of.time, "time", clock.time)
    plugin = object.__new__(plugin_of.ActionModule)
    plugin._task = SimpleNamespace(args={"workers": [], "wait": 0, **args} if plugin_of is action else args)
    plugin._execute_module = execute
    return plugin.run(task_vars={"inventory_hostname": host}), shown


def stall_args(tmp_path: Path, timeout: int = 30) -> dict[str, Any]:
    return {"controller_dir": str(tmp_path / "runs" / "r1"), "attempt": 0, "stall_timeout": timeout}


def flag_of(args: dict[str, Any]) -> str:
    """The attempt's failure flag the action derives from the run's controller directory."""
    return str(Path(args["controller_dir"]) / ".attempt-0.failed")


def stall_dir_of(args: dict[str, Any]) -> str:
    """The attempt's progress directory the action derives from the run's controller directory."""
    return str(Path(args["controller_dir"]) / ".attempt-0.progress")


# --- the watchdog, one host ---------------------------------------------------------------


def test_no_progress_line_for_the_timeout_stalls_the_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clock = Clock(step=10)
    host = Host(clock, [[1, 1]])
    args = stall_args(tmp_path, timeout=30)
    result, shown = run_action(monkeypatch, clock, host, **args)
    # Watched from the first check (T0 + 10): stalled at the check 30 s later.
    assert len(host.calls) == 4
    assert result["stalled"] == {
        "seconds": 30,
        "detail": "no worker printed a progress line for 30 s and no CPU use was measured (tf_stall_timeout 30 s)",
    }
    flag = json.loads(Path(flag_of(args)).read_text())
    assert flag == {"host": "node1", "cause": "stalled", "reason": result["stalled"]["detail"], "seconds": 30,
                    "workers": []}  # fmt: skip
    assert any("the run is stalled: no worker printed a progress line for 30 s" in line for line in shown)


# --- CPU use is progress too (issue 37 A) ---------------------------------------------------


def test_a_busy_silent_worker_is_never_stalled(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """One progress line, then an epoch of 3x the timeout that prints nothing while worker
    0 computes (a whole core) and worker 1 waits for it (0.2 %), then the end."""
    clock = Clock(step=10)
    host = Host(clock, [[1, 1]], rounds_to_done=10, shares=[[1.0, 0.002]])
    args = stall_args(tmp_path, timeout=30)
    result, _ = run_action(monkeypatch, clock, host, **args)
    assert len(host.calls) == 10 and result["done"]
    assert "stalled" not in result and not Path(flag_of(args)).exists()
    own = json.loads((Path(stall_dir_of(args)) / "node1.json").read_text())
    assert own["last_line_at"] == T0 + 10 and own["busy_at"] == T0 + 90
    assert own["cpu_share"] == {"0": 1.0, "1": 0.002}


def test_an_idle_silent_worker_is_a_stall_that_says_what_was_seen(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Deadlocked workers use 0.2 % of a core (FACTS.md): silent and idle, a stall,
    caught at the timeout; the detail says how little CPU, and whose."""
    clock = Clock(step=10)
    host = Host(clock, [[1, 1]], shares=[[0.002, 0.003]])
    result, shown = run_action(monkeypatch, clock, host, **stall_args(tmp_path, timeout=30))
    assert len(host.calls) == 4
    detail = ("no worker printed a progress line for 30 s and none used over 5% of a core "
              "(at most 0.3%, worker 1 on node1) (tf_stall_timeout 30 s)")  # fmt: skip
    assert result["stalled"] == {"seconds": 30, "detail": detail}
    assert any(f"the run is stalled: {detail}" in line for line in shown)


def test_a_worker_that_hangs_after_a_busy_silent_spell_stalls_a_timeout_after(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Busy without a line for 5 checks (50 s > the timeout), then idle: the stall comes
    a timeout after the last busy window, and says since when no line came."""
    clock = Clock(step=10)
    host = Host(clock, [[1]], shares=[[1.0]] * 5 + [[0.0]])
    result, _ = run_action(monkeypatch, clock, host, **stall_args(tmp_path, timeout=30))
    # Busy windows end at checks 2..5 (T0 + 50); stalled at check 8 (T0 + 80).
    assert len(host.calls) == 8
    assert result["stalled"]["seconds"] == 30
    assert result["stalled"]["detail"].startswith("no worker printed a progress line for 70 s and none used over 5%")


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        ({"seconds": 10.0, "at": 100.0}, {"seconds": 40.0, "at": 130.0}, 1.0),
        ({"seconds": 10.0, "at": 100.0}, {"seconds": 10.06, "at": 130.0}, 0.002),
        (None, {"seconds": 1.0, "at": 1.0}, None),
        ({"seconds": 10.0, "at": 100.0}, {"seconds": 11.0, "at": 100.0}, None),  # the clock did not move on
        ({"seconds": 10.0, "at": 100.0}, {"seconds": 9.0, "at": 110.0}, None),  # a process left the group
        ({"seconds": "x", "at": 100.0}, {"seconds": 9.0, "at": 110.0}, None),
    ],
)
def test_cpu_share(before: Any, after: dict[str, float], expected: float | None) -> None:
    share = tf_activity.cpu_share(before, after)
    assert share == (pytest.approx(expected) if expected is not None else None)


def test_a_short_window_keeps_its_base_until_it_is_long_enough() -> None:
    base = {"0": {"seconds": 1.0, "at": 100.0}, "1": {"seconds": 1.0, "at": 100.0}}
    # Two ticks in a second would be 2 % (or 20 % in a tenth): too short to judge.
    bases, shares = tf_activity.cpu_windows(base, {"0": {"seconds": 1.02, "at": 101.0}, "2": {"seconds": 3.0, "at": 101.0}})
    assert bases == {"0": base["0"], "2": {"seconds": 3.0, "at": 101.0}} and shares == {}
    bases, shares = tf_activity.cpu_windows(bases, {"0": {"seconds": 1.04, "at": 110.0}})
    assert bases == {"0": {"seconds": 1.04, "at": 110.0}} and shares == {"0": 0.004}


def test_the_busy_threshold_separates_facts_measurements() -> None:
    """FACTS.md: a hung worker 0.2 % of a core, a computing one about 100 %."""
    assert 0.002 < tf_activity.BUSY_CPU_SHARE < 1.0
    assert tf_activity.BUSY_CPU_SHARE / 0.002 >= 10 and 1.0 / tf_activity.BUSY_CPU_SHARE >= 10


def test_progress_keeps_the_run_going(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clock = Clock(step=10)
    # A new progress line on one worker every second check, for 12 checks, then done.
    counts = [[1 + n // 2, 0] for n in range(12)]
    host = Host(clock, counts, rounds_to_done=12)
    result, _ = run_action(monkeypatch, clock, host, **stall_args(tmp_path, timeout=25))
    assert len(host.calls) == 12 and result["done"]
    assert "stalled" not in result
    assert not Path(flag_of(stall_args(tmp_path))).exists()


def test_a_timeout_of_zero_turns_the_watchdog_off(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clock = Clock(step=600)
    host = Host(clock, [[1]], rounds_to_done=8)
    args = stall_args(tmp_path, timeout=0)
    result, _ = run_action(monkeypatch, clock, host, **args)
    assert len(host.calls) == 8 and "stalled" not in result
    assert not Path(stall_dir_of(args)).exists()


def test_the_time_since_the_last_progress_counts_not_since_the_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clock = Clock(step=10)
    # Progress at the 2nd and 5th checks, then none.
    counts = [[0], [1], [1], [1], [2], [2], [2], [2], [2], [2], [2]]
    host = Host(clock, counts)
    result, _ = run_action(monkeypatch, clock, host, **stall_args(tmp_path, timeout=40))
    # Last progress seen at check 5 (T0 + 50): stalled at check 9 (T0 + 90).
    assert len(host.calls) == 9
    assert result["stalled"]["seconds"] == 40


# --- the watchdog, cluster-wide -----------------------------------------------------------


def node2_prints(previous: Any, calls: int, now: float) -> dict[str, Any]:
    """node2's record when its worker prints a progress line at every check."""
    return {"host": "node2", "progress_lines": {"1": calls}, "last_progress_at": now}


def node2_computes(previous: Any, calls: int, now: float) -> dict[str, Any]:
    """node2's record when its worker prints nothing but keeps a core busy."""
    busy = [{"index": 1, "progress_lines": 1, "cpu_seconds": 3.0 + now - T0, "cpu_at": now}]
    return tf_activity.progress_record(previous, "node2", busy, now)


@pytest.mark.parametrize("node2", [node2_prints, node2_computes])
def test_progress_on_another_host_keeps_a_silent_host_going(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, node2: Callable[[Any, int, float], dict[str, Any]]
) -> None:
    """The run is stalled only when no worker anywhere made progress: a host whose own
    workers are silent (blocked in the all-reduce behind a slow peer) goes on while
    another host's record shows recent progress, a line or CPU use (issue 37)."""
    clock = Clock(step=10)
    args = stall_args(tmp_path, timeout=30)
    stall_dir = Path(stall_dir_of(args))

    class Busy(Host):
        def __call__(self, *a: Any, **k: Any) -> dict[str, Any]:
            status = super().__call__(*a, **k)
            # The other host's wait records progress on every check.
            path = stall_dir / "node2.json"
            previous = json.loads(path.read_text()) if path.exists() else None
            tf_wait_control.write_private_json(str(path), node2(previous, len(self.calls), self.clock.now))
            return status

    host = Busy(clock, [[3]], rounds_to_done=10)
    result, _ = run_action(monkeypatch, clock, host, **args)
    assert len(host.calls) == 10 and result["done"] and "stalled" not in result
    own = json.loads((stall_dir / "node1.json").read_text())
    assert own == {"host": "node1", "progress_lines": {"0": 3}, "last_line_at": T0 + 10, "busy_at": None, "cpu": {},
                   "cpu_share": {}, "last_progress_at": T0 + 10}  # fmt: skip


def test_a_host_stops_for_a_stall_another_host_flagged(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clock = Clock(step=10)
    args = stall_args(tmp_path, timeout=1000)
    flag = {"host": "node2", "cause": "stalled", "reason": "no worker printed a progress line for 1000 s", "seconds": 1000}
    Path(flag_of(args)).parent.mkdir(parents=True)
    Path(flag_of(args)).write_text(json.dumps(flag))
    host = Host(clock, [[2]])
    result, _ = run_action(monkeypatch, clock, host, **args)
    assert len(host.calls) == 1
    assert result["peer_failed"] == flag
    outcome = tf_wait.tf_wait_outcome(["node1", "node2"], ["node1", "node2"], {"node1": result, "node2": {}})
    assert outcome["stalled"] == {"seconds": 1000, "detail": "no worker printed a progress line for 1000 s"}
    assert outcome["ok"] is False


def test_a_reattached_wait_goes_on_from_the_hosts_record(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A detached run watched again: the record of the earlier wait counts; the same
    counts an hour later are an hour without progress."""
    clock = Clock(step=10)
    args = stall_args(tmp_path, timeout=1800)
    record = {"host": "node1", "progress_lines": {"0": 7}, "last_progress_at": T0 - 3600}
    tf_wait_control.write_private_json(str(Path(stall_dir_of(args)) / "node1.json"), record)
    host = Host(clock, [[7]])
    result, _ = run_action(monkeypatch, clock, host, **args)
    assert len(host.calls) == 1
    assert result["stalled"]["seconds"] == 3610
    # Counts that moved meanwhile are progress, now.
    clock2 = Clock(step=10)
    args2 = stall_args(tmp_path / "other", timeout=1800)
    tf_wait_control.write_private_json(str(Path(stall_dir_of(args2)) / "node1.json"), record)
    host2 = Host(clock2, [[9]], rounds_to_done=3)
    result2, _ = run_action(monkeypatch, clock2, host2, **args2)
    assert len(host2.calls) == 3 and "stalled" not in result2


@pytest.mark.parametrize(
    ("previous", "counts", "expected_at"),
    [
        (None, [0, 0], 500.0),
        # A record of an earlier version: its last_progress_at is its lines' time.
        ({"last_progress_at": 100.0, "progress_lines": {"0": 2, "1": 2}}, [2, 2], 100.0),
        ({"last_progress_at": 100.0, "progress_lines": {"0": 2, "1": 2}}, [2, 3], 500.0),
        # A log read again from its start (replaced) counts as activity too.
        ({"last_progress_at": 100.0, "progress_lines": {"0": 2}}, [1], 500.0),
        ({"last_progress_at": "garbage"}, [1], 500.0),
    ],
)
def test_progress_record(previous: Any, counts: list[int], expected_at: float) -> None:
    workers = [{"index": i, "progress_lines": n} for i, n in enumerate(counts)]
    record = tf_activity.progress_record(previous, "h", workers, 500.0)
    assert record == {"host": "h", "progress_lines": {str(i): n for i, n in enumerate(counts)}, "last_line_at": expected_at,
                      "busy_at": None, "cpu": {}, "cpu_share": {}, "last_progress_at": expected_at}  # fmt: skip


@pytest.mark.parametrize(
    ("share", "busy_at", "last_progress_at"),
    [(1.0, 500.0, 500.0), (0.06, 500.0, 500.0), (0.04, 300.0, 300.0), (0.002, None, 100.0)],
)
def test_progress_record_counts_a_busy_window(share: float, busy_at: float | None, last_progress_at: float) -> None:
    previous = {"last_line_at": 100.0, "last_progress_at": 100.0, "progress_lines": {"0": 2},
                "busy_at": 300.0 if share == 0.04 else None, "cpu": {"0": {"seconds": 7.0, "at": 40.0}}}  # fmt: skip
    workers = [{"index": 0, "progress_lines": 2, "cpu_seconds": 7.0 + share * 20, "cpu_at": 60.0}]
    record = tf_activity.progress_record(previous, "h", workers, 500.0)
    assert (record["busy_at"], record["last_progress_at"], record["last_line_at"]) == (busy_at, last_progress_at, 100.0)
    assert record["cpu"] == {"0": {"seconds": 7.0 + share * 20, "at": 60.0}}
    assert record["cpu_share"] == {"0": pytest.approx(share)}


@pytest.mark.parametrize(("runnable", "busy_at"), [(0.97, 500.0), (0.5, 500.0), (0.16, None)])
def test_progress_record_counts_a_thread_runnable_through_the_window_as_busy(runnable: float, busy_at: float | None) -> None:
    """A job on a host loaded past its CPUs: 2 % of a core over its CPU window (idle by
    BUSY_CPU_SHARE), but a thread runnable for most of the module call is busy."""
    previous = {"last_line_at": 100.0, "last_progress_at": 100.0, "progress_lines": {"0": 2},
                "busy_at": None, "cpu": {"0": {"seconds": 7.0, "at": 40.0}}}  # fmt: skip
    workers = [{"index": 0, "progress_lines": 2, "cpu_seconds": 7.4, "cpu_at": 60.0, "runnable_share": runnable}]
    record = tf_activity.progress_record(previous, "h", workers, 500.0)
    assert record["cpu_share"] == {"0": pytest.approx(0.02)}
    assert record["runnable_share"] == {"0": runnable}
    assert (record["busy_at"], record["last_progress_at"]) == (busy_at, busy_at or 100.0)


def test_a_stall_says_how_long_a_thread_was_runnable_where_a_host_measured_it() -> None:
    records = [
        {"host": "node1", "last_line_at": 100.0, "last_progress_at": 100.0, "cpu_share": {"0": 0.002},
         "runnable_share": {"0": 0.03, "1": 0.16}},
        {"host": "node2", "last_line_at": 90.0, "last_progress_at": 90.0, "cpu_share": {"2": 0.001}},
    ]  # fmt: skip
    assert tf_activity.stall_detail(records, 130.0, 30) == (
        "no worker printed a progress line for 30 s and none used over 5% of a core (at most 0.2%, worker 0 on node1), "
        "nor had a thread runnable over 50% of a check (at most 16.0%, worker 1 on node1) (tf_stall_timeout 30 s)"
    )


def test_the_host_module_measures_each_jobs_busiest_thread_over_its_window(tmp_path: Path) -> None:
    """tf_worker_records.thread_sample at a window's start, with_activity at its end: the
    share of the window the busiest thread of each running job was runnable; none for a
    job not sampled at the start, nor without a start."""
    root = tmp_path / "proc"
    rest = " ".join(["0"] * 36)
    for pid, pgid in ((300, 300), (400, 400)):
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "stat").write_text(f"{pid} (job) R 1 {pgid} {pgid} 0 0 0 0 0 0 0 5 0 0 0 {rest}\n")
    schedstat = {"300/300": 10**9, "300/301": 0, "400/400": 0}
    for thread, ns in schedstat.items():
        pid, tid = thread.split("/")
        (root / pid / "task" / tid).mkdir(parents=True)
        (root / pid / "task" / tid / "schedstat").write_text(f"{ns} 0 1\n")
    workers = []
    for index, pid in enumerate((300, 400)):
        wdir = tmp_path / f"worker-{index}"
        wdir.mkdir()
        (wdir / "state.json").write_text(json.dumps({"pid": pid, "pgid": pid}))
        workers.append({"index": index, "dir": str(wdir), "state": "running"})
    started = tf_worker_records.thread_sample(workers, str(root))
    assert started["threads"] == {0: {"300/300": 10**9, "300/301": 0}, 1: {"400/400": 0}}
    del started["threads"][1]
    started["at"] -= 2.0  # the window began 2 s ago
    # Over the window: thread 301 was runnable 1.8 s, thread 300 0.2 s.
    (root / "300" / "task" / "300" / "schedstat").write_text(f"{12 * 10**8} 0 9\n")
    (root / "300" / "task" / "301" / "schedstat").write_text(f"{10**9} {8 * 10**8} 9\n")
    current = tf_worker_records.with_activity(workers, str(root), "", before=started)
    assert 0.85 < current[0]["runnable_share"] <= 0.9
    assert current[1]["runnable_share"] is None
    assert tf_worker_records.with_activity(workers, str(root), "")[0]["runnable_share"] is None


def test_seconds_without_progress_takes_the_latest_host(tmp_path: Path) -> None:
    for host, at in (("a", 100.0), ("b", 250.0)):
        tf_wait_control.write_private_json(str(tmp_path / f"{host}.json"), {"host": host, "last_progress_at": at})
    (tmp_path / "broken.json").write_text("{")
    records = tf_wait_control.read_records(str(tmp_path))
    assert sorted(r["host"] for r in records) == ["a", "b"]
    assert tf_activity.seconds_without_progress(records, 300.0) == 50.0
    assert tf_activity.seconds_without_progress([], 300.0) is None


# --- the outcome --------------------------------------------------------------------------


def _status(*workers: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"workers": list(workers), "done": all(w["state"] == "exited" for w in workers), "deadline_passed": False,
            **extra}  # fmt: skip


def _failed(index: int, kind: str | None) -> dict[str, Any]:
    cause = {"kind": kind, "detail": f"{kind} detail"} if kind else None
    return {"index": index, "state": "exited", "returncode": 1, "cause": cause}


def test_outcome_of_a_stalled_run() -> None:
    running = {"index": 0, "state": "running", "returncode": None, "joined": True}
    stalled = {"seconds": 1800, "detail": "no worker printed a progress line for 1800 s (tf_stall_timeout 1800 s)"}
    outcome = tf_wait.tf_wait_outcome(["a"], ["a"], {"a": _status(running, stalled=stalled)}, True)
    # Even a detached wait whose workers all joined is not ok once the run stalled.
    assert outcome["ok"] is False and outcome["detached"] is False
    assert outcome["stalled"] == stalled
    assert outcome["causes"] == []


def test_outcome_carries_each_failed_workers_cause_and_the_kinds() -> None:
    statuses = {
        "a": _status(_failed(2, "job-error"), _failed(0, "runbook")),
        "b": _status(_failed(1, "job-error"), _failed(3, None)),
    }
    outcome = tf_wait.tf_wait_outcome(["a", "b"], ["a", "b"], statuses)
    assert [w["cause"] and w["cause"]["kind"] for w in outcome["failed_workers"]] == ["runbook", "job-error", "job-error", "job-error"]
    assert outcome["failed_workers"][1]["cause"] == {"kind": "job-error", "detail": "job-error detail"}
    assert outcome["causes"] == ["job-error", "runbook"]
    assert outcome["stalled"] is None


# --- a reattach takes the host's deadline on the controller's clock -------------------------


@pytest.mark.parametrize(
    ("host_time", "host_now", "controller_now", "expected"),
    [
        (T0 - 600 + 3600, T0 - 600, T0, T0 + 3600),  # host 10 minutes behind
        (T0 + 600 + 60, T0 + 600, T0, T0 + 60),  # host 10 minutes ahead
        (0, T0, T0, 0.0),  # no deadline
        (None, T0, T0, 0.0),
        ("x", T0, T0, 0.0),
    ],
)
def test_to_controller_clock(host_time: Any, host_now: Any, controller_now: float, expected: float) -> None:
    assert tf_wait_control.to_controller_clock(host_time, host_now, controller_now) == pytest.approx(expected)


def test_a_reattach_to_a_host_10_minutes_behind_keeps_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 24 point 4: the supervisors' deadline_at is a host time. A host 10 minutes
    behind recorded a deadline 5 minutes ahead of its clock: on the controller's clock it
    is 5 minutes ahead too, not 5 minutes past."""
    clock = Clock(step=0)
    host_now = T0 - 600
    found = Host(clock, [[0]], launch={"attempt": 0, "deadline_at": host_now + 300}, now=host_now)
    found.clock.step = 0

    def execute(module_name: str, module_args: dict[str, Any], task_vars: Any) -> dict[str, Any]:
        status = found(module_name, module_args, task_vars)
        status["now"] = host_now
        return status

    result, _ = run_action(monkeypatch, clock, execute, plugin_of=tf_worker_status_action, run_dir="/runs/r1")
    assert result["launch"]["deadline_at_controller"] == pytest.approx(T0 + 300)
    assert result["clock_offset"] == pytest.approx(600)
    assert not tf_wait_control.deadline_passed(result["launch"]["deadline_at_controller"], T0 + 1)


# --- private files (issue 24, point 14) -----------------------------------------------------


def test_the_flag_the_records_and_the_directories_are_private_whatever_the_umask(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    old = os.umask(0o000)
    try:
        clock = Clock(step=10)
        args = stall_args(tmp_path, timeout=10)
        run_action(monkeypatch, clock, Host(clock, [[1]]), **args)
    finally:
        os.umask(old)
    mode = lambda path: stat.S_IMODE(os.stat(path).st_mode)  # noqa: E731
    assert mode(tmp_path / "runs") == 0o700
    assert mode(tmp_path / "runs" / "r1") == 0o700
    assert mode(stall_dir_of(args)) == 0o700
    assert mode(flag_of(args)) == 0o600
    assert mode(Path(stall_dir_of(args)) / "node1.json") == 0o600


def test_an_existing_directory_keeps_its_mode(tmp_path: Path) -> None:
    shared = tmp_path / "runs"
    shared.mkdir()
    shared.chmod(0o755)
    assert tf_wait_control.write_flag(str(shared / "r1" / ".attempt-0.failed"), {"host": "h"}) is True
    assert stat.S_IMODE(shared.stat().st_mode) == 0o755
    assert stat.S_IMODE((shared / "r1").stat().st_mode) == 0o700
    # The first failure wins.
    assert tf_wait_control.write_flag(str(shared / "r1" / ".attempt-0.failed"), {"host": "other"}) is False
    assert json.loads((shared / "r1" / ".attempt-0.failed").read_text()) == {"host": "h"}


# --- inputs -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [("", None), (None, None), ([], None), ("0,2", [0, 2]), ("2, 0,2", [0, 2]), ("1", [1]), (3, [3]), ([1, "0"], [0, 1])],
)
def test_log_workers(value: Any, expected: list[int] | None) -> None:
    assert tf_wait.tf_log_workers(value) == expected


@pytest.mark.parametrize("value", ["a", "0;2", "-1", "1.5", [True], "0,,2"])
def test_log_workers_refuses_what_is_not_an_index(value: Any) -> None:
    with pytest.raises(AnsibleFilterError, match=r"tf_logs_workers must be worker indices separated by commas \(0,2\), got"):
        tf_wait.tf_log_workers(value)


def test_pattern_problem_names_host_variable_and_value() -> None:
    assert tf_wait.tf_pattern_problem("step=\\d+", "tf_stall_pattern", "w1") == ""
    assert tf_wait.tf_pattern_problem("", "tf_stall_pattern", "w1") == ""
    message = tf_wait.tf_pattern_problem("step=(", "tf_stall_pattern", "w1")
    assert message.startswith("host w1: tf_stall_pattern 'step=(' is not a regular expression: missing ), unterminated")


# --- a frozen worker is visible (issue 37 B) ------------------------------------------------


def test_the_wait_says_since_when_a_worker_is_frozen(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Worker 0 stopped (SIGSTOP) from the 2nd check on, worker 1 in uninterruptible sleep
    at the 3rd only, then sleeping again: at the wait's end (the deadline) worker 0 has
    been seen stopped for 40 s, worker 1 was seen uninterruptible for 10 s, and is not now."""
    clock = Clock(step=10)
    states = [["S", "S"], ["T", "S"], ["T", "D"], ["t", "S"], ["T", "S"], ["T", "S"]]
    host = Host(clock, [[1, 1]], states=states)
    args = {**stall_args(tmp_path, timeout=0), "deadline": T0 + 55}
    result, shown = run_action(monkeypatch, clock, host, **args)
    assert len(host.calls) == 6 and result["deadline_passed"]
    frozen = [w["frozen"] for w in result["workers"]]
    assert frozen == [{"state": "stopped", "since": T0 + 20, "seconds": 40.0, "until": None},
                      {"state": "uninterruptible", "since": T0 + 30, "seconds": 10.0, "until": T0 + 40}]
    # Shown once when it froze, and again when worker 1 slept uninterruptibly and woke.
    stopped = [line for line in shown if "node1 worker-0: running (stopped)" in line]
    assert len(stopped) == 3 and any("node1 worker-1: running (uninterruptible)" in line for line in shown)
    outcome = tf_wait.tf_wait_outcome(["node1"], ["node1"], {"node1": result})
    assert outcome["frozen_workers"] == [{"index": 0, "host": "node1", "state": "stopped", "seconds": 40.0},
                                         {"index": 1, "host": "node1", "state": "uninterruptible", "seconds": 10.0}]


@pytest.mark.parametrize(
    ("previous", "state", "expected"),
    [
        ({}, "T", {"state": "stopped", "since": 500.0}),
        ({}, "t", {"state": "stopped", "since": 500.0}),
        ({}, "D", {"state": "uninterruptible", "since": 500.0}),
        ({"0": {"state": "stopped", "since": 300.0}}, "T", {"state": "stopped", "since": 300.0}),
        # Another kind of frozen starts anew; so does a check that saw it otherwise.
        ({"0": {"state": "stopped", "since": 300.0}}, "D", {"state": "uninterruptible", "since": 500.0}),
        # Seen otherwise: the freeze ended, and is told with its end.
        ({"0": {"state": "stopped", "since": 300.0}}, "R", {"state": "stopped", "since": 300.0, "until": 500.0}),
        ({}, "S", None),
        ({}, "Z", None),
        ({}, None, None),
    ],
)
def test_frozen_since(previous: dict[str, Any], state: str | None, expected: dict[str, Any] | None) -> None:
    workers = [{"index": 0, "state": "running", "process_state": state}]
    assert tf_activity.frozen_since(previous, workers, 500.0).get("0") == expected


def test_an_exited_worker_is_not_frozen() -> None:
    workers = [{"index": 0, "state": "exited", "process_state": "T"}]
    assert tf_activity.frozen_since({}, workers, 500.0) == {}


def test_a_freeze_that_ended_is_told_for_a_while() -> None:
    """The frozen job's peers fail for lack of it, and the stop that follows continues it
    (SIGCONT) before it ends it: its last checks no longer see it stopped."""
    frozen = tf_activity.frozen_since({}, [{"index": 0, "state": "running", "process_state": "T"}], 500.0)
    ended = [{"index": 0, "state": "exited", "process_state": None}]
    frozen = tf_activity.frozen_since(frozen, ended, 508.0)
    assert frozen == {"0": {"state": "stopped", "since": 500.0, "until": 508.0}}
    assert tf_activity.frozen_entry(frozen, ended[0], 530.0) == {"state": "stopped", "since": 500.0, "seconds": 8.0,
                                                                  "until": 508.0}  # fmt: skip
    assert tf_activity.frozen_since(frozen, ended, 530.0)["0"]["until"] == 508.0
    assert tf_activity.frozen_since(frozen, ended, 508.0 + tf_activity.FROZEN_KEPT_SECONDS + 1) == {}
    # Frozen again: a new freeze.
    again = tf_activity.frozen_since(frozen, [{"index": 0, "state": "running", "process_state": "T"}], 540.0)
    assert again == {"0": {"state": "stopped", "since": 540.0}}


def test_outcome_lists_the_workers_alive_and_frozen_at_the_end() -> None:
    stopped = {"state": "stopped", "since": T0, "seconds": 21.5}
    statuses = {
        "a": _status({"index": 2, "state": "running", "returncode": None, "frozen": stopped},
                     {"index": 0, "state": "running", "returncode": None, "frozen": None}),
        "b": _status({"index": 1, "state": "running", "returncode": None,
                      "frozen": {"state": "uninterruptible", "since": T0, "seconds": 3}},
                     # Exited after it was seen frozen (its stop continued it): still told.
                     {"index": 3, "state": "exited", "returncode": 1, "frozen": {**stopped, "until": T0 + 21.5}},
                     # An older action's status: no frozen at all.
                     {"index": 4, "state": "running", "returncode": None}),
    }  # fmt: skip
    outcome = tf_wait.tf_wait_outcome(["a", "b"], ["a", "b"], statuses)
    assert outcome["frozen_workers"] == [
        {"index": 1, "host": "b", "state": "uninterruptible", "seconds": 3.0},
        {"index": 2, "host": "a", "state": "stopped", "seconds": 21.5},
        {"index": 3, "host": "b", "state": "stopped", "seconds": 21.5},
    ]
    assert tf_wait.tf_wait_outcome(["a"], ["a"], {"a": _status(_failed(0, None))})["frozen_workers"] == []


def test_the_host_module_reads_each_running_jobs_cpu_and_state(tmp_path: Path) -> None:
    """tf_worker_records.with_activity: the group and the pid of each running worker's
    state.json, read in one pass over a /proc tree; a worker whose job does not run (or
    whose pid is no longer in its group) has none."""
    root = tmp_path / "proc"
    rest = " ".join(["0"] * 36)
    for pid, state, pgid, utime in ((300, "T", 300, 200), (301, "R", 300, 100), (400, "S", 999, 7)):
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "stat").write_text(f"{pid} (job) {state} 1 {pgid} {pgid} 0 0 0 0 0 0 0 {utime} 0 0 0 {rest}\n")
    workers = []
    for index, record in enumerate(({"pid": 300, "pgid": 300}, {"pid": 400, "pgid": 400}, {"pid": 300, "pgid": 300})):
        wdir = tmp_path / f"worker-{index}"
        wdir.mkdir()
        (wdir / "state.json").write_text(json.dumps(record))
        workers.append({"index": index, "dir": str(wdir), "state": "exited" if index == 2 else "running"})
    current = tf_worker_records.with_activity(workers, str(root))
    ticks = tf_proc.clock_ticks()
    assert (current[0]["cpu_seconds"], current[0]["process_state"]) == (round(300 / ticks, 2), "T")
    assert isinstance(current[0]["cpu_at"], float)
    assert [(w["cpu_seconds"], w["cpu_at"], w["process_state"]) for w in current[1:]] == [(None, None, None)] * 2
