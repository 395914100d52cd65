"""Why each worker ended, a stall's culprits, an operator's stop, the console verdict of a
long run, summary.json's modes, and collect.yml alone keeping the earlier judgement
(issue 23, points 1-2; issue 24, points 7 and 14; issue 25's newcomer points)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_causes import CAUSES, cause_of
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_verdict_summary import table, verdict
from report_runs import MARKER, T0, build, endpoints, write_worker

JOB_ERROR = {
    "kind": "job-error",
    "detail": "the job raised ModuleNotFoundError",
    "exception": "ModuleNotFoundError",
    "message": "No module named 'x'",
}
STACKS = {
    "file": "stacks.txt",
    "captured_at": 1_764_000_050.0,
    "where": "own-code",
    "frames": ["train.py:80 in main", "data.py:12 in next_batch", "train.py:41 in load_batch"],
}


STOPPED = {"exit_status": 143, "stopped_by": "runbook", "reason": "stopped by the runbook"}


def pair(run: Path, attempt: int = 0, **per_worker: dict[str, Any]) -> None:
    hosts, cluster = endpoints(2, hosts=2)
    for index in range(2):
        fields = {"epochs": range(1, 4), "total": 3, **per_worker.get(f"w{index}", {})}
        write_worker(run, hosts[index], index, cluster, attempt=attempt, **fields)


def test_the_culprits_cause_leads_the_failure_message(tmp_path: Path) -> None:
    run = tmp_path / "error"
    pair(run, w0={"exit_status": 143, "stopped_by": "runbook", "complete": False,
                  "exit_extra": {"cause": {"kind": "runbook", "detail": "stopped after worker 1 failed"}}},
         w1={"epochs": [], "exit_status": 1, "complete": False, "exit_extra": {"cause": JOB_ERROR}})  # fmt: skip
    summary = build(run, 2)
    assert summary["reason"].startswith(
        "worker 1 on host node1 failed first: job-error (ModuleNotFoundError: No module named 'x'); exit status 1 (exited)"
    )
    assert [w["cause"] for w in summary["workers"]] == [
        {"kind": "runbook", "detail": "stopped after worker 1 failed"},
        JOB_ERROR,
    ]
    rows = summary["timeline"][0]["workers"]
    assert [row["cause"]["kind"] for row in rows] == ["runbook", "job-error"]
    assert [row["culprit"] for row in rows] == [False, True]
    assert summary["attempts"][0]["workers"][1]["cause"] == JOB_ERROR


@pytest.mark.parametrize(
    ("record", "kind"),
    [
        ({"returncode": 0, "stopped_by": None}, "completed"),
        ({"returncode": 1, "stopped_by": None}, "job-error"),
        ({"returncode": 42, "stopped_by": None}, "preempted"),
        ({"returncode": 137, "signal": "SIGKILL", "stopped_by": None}, "killed"),
        ({"returncode": 143, "signal": "SIGTERM", "stopped_by": "signal"}, "preempted"),
        ({"returncode": 143, "stopped_by": "operator"}, "operator"),
        ({"returncode": 143, "stopped_by": "runbook"}, "runbook"),
        ({"returncode": 143, "stopped_by": "peer"}, "runbook"),
        ({"returncode": 137, "stopped_by": "job-deadline"}, "deadline"),
        ({"returncode": 137, "stopped_by": "startup-deadline"}, "startup"),
        ({"returncode": 137, "stopped_by": "controller"}, "controller-lost"),
        ({"returncode": 137, "stopped_by": None}, "killed"),
        ({"returncode": 143, "stopped_by": None}, "preempted"),
        ({"returncode": 3, "stopped_by": None, "cause": {"kind": "no such kind"}}, "job-error"),
        (None, "unknown"),
    ],
)
def test_a_record_without_a_cause_gets_one_from_its_structured_fields(record: dict[str, Any] | None, kind: str) -> None:
    cause = cause_of(record)
    assert cause["kind"] == kind and kind in CAUSES and cause["detail"]


def stalled(stacks: dict[str, Any] | None) -> dict[str, Any]:
    extra: dict[str, Any] = {"cause": {"kind": "stalled", "detail": "no progress for 20 s"}}
    if stacks is not None:
        extra["stacks"] = stacks
    return {"epochs": [1], "exit_status": 143, "stopped_by": "runbook", "complete": False, "exit_extra": extra}


def test_a_stall_names_the_worker_stuck_in_its_own_code(tmp_path: Path) -> None:
    run = tmp_path / "stall"
    collective = {**STACKS, "where": "tensorflow", "frames": ["train.py:50 in train_step"]}
    pair(run, w0=stalled(collective), w1=stalled(STACKS))
    summary = build(run, 2, {"wait": {"stalled": {"seconds": 20, "detail": "no progress line for 20 s"}}})
    assert summary["status"] == "failed"
    assert summary["stall"] == {
        "culprits": [1],
        "detail": "worker 1 on host node1 stuck in load_batch (train.py:41) (no progress on any worker for 20 s)",
    }
    assert summary["reason"] == f"stalled: {summary['stall']['detail']}"
    assert [w["stacks"] for w in summary["workers"]] == [collective, STACKS]
    assert [w["cause"]["kind"] for w in summary["workers"]] == ["stalled", "stalled"]


def test_a_stall_without_own_code_on_any_stack_says_every_worker_stalled(tmp_path: Path) -> None:
    run = tmp_path / "everyone"
    pair(run, w0=stalled(None), w1=stalled({**STACKS, "where": "unknown", "frames": []}))
    summary = build(run, 2)
    assert summary["stall"] == {"culprits": [], "detail": "every worker stalled"}
    assert summary["reason"] == "stalled: every worker stalled"


def test_a_run_without_a_stall_has_none(tmp_path: Path) -> None:
    run = tmp_path / "fine"
    pair(run)
    summary = build(run, 2)
    assert (summary["status"], summary["stall"], summary["stopped"]) == ("succeeded", None, None)


def test_a_run_stopped_by_the_operator_is_reported_as_stopped_at_epoch_n_of_t(tmp_path: Path) -> None:
    """Issue 25: the operator stopped during epoch 3 of 5: worker 0 printed it, worker 1 did
    not. One epoch count (2), no metrics_agree failure for epoch 3, no culprit (not even the
    worker the wait listed first)."""
    run = tmp_path / "opstop"
    stop = {"exit_status": 143, "stopped_by": "operator", "complete": False, "total": 5}
    pair(run, w0={**stop, "epochs": [1, 2, 3]}, w1={**stop, "epochs": [1, 2]})
    wait = {"failed_workers": [{"index": 0, "host": "node0", "returncode": 143, "stopped_by": "operator"}]}
    summary = build(run, 2, {"wait": wait})
    # Issue 39: a stop is a stop, not a failure; the checks it made moot say so.
    assert summary["status"] == "stopped"
    assert summary["stopped"] == {"by": "operator", "epoch": 2, "of": 5}
    assert summary["reason"] == "stopped by the operator at epoch 2 of 5"
    checks = {c["name"]: c for c in summary["checks"]}
    assert checks["metrics_agree"]["ok"] is True and checks["metrics_agree"]["detail"].startswith("2 epoch(s)")
    for name in ("exit_status", "epochs_complete", "training_complete", "chief_marker"):
        assert checks[name]["ok"] is None and checks[name]["detail"].startswith(
            "moot: the operator stopped the run at epoch 2 of 5 ("), checks[name]
    assert checks["epochs_complete"]["detail"].endswith("(stopped by the operator at epoch 2 of 5)")
    assert not [c for c in summary["checks"] if c["ok"] is False]
    assert sorted(summary["metrics"]) == ["1", "2"]
    assert summary["timeline"][0]["culprit"] is None
    assert not any(row["culprit"] for row in summary["timeline"][0]["workers"])


def test_the_console_verdict_of_a_long_run_shows_its_ends_and_its_failures(tmp_path: Path) -> None:
    run = tmp_path / "long"
    hosts, cluster = endpoints(2, hosts=2)
    write_worker(run, hosts[0], 0, cluster, epochs=range(1, 401))
    write_worker(run, hosts[1], 1, cluster, epochs=range(1, 401), metrics={200: {"loss": "0.5", "binary_accuracy": "0.9"}})
    summary = build(run, 2)
    lines = table(summary)
    shown = [line.split(":")[0] for line in lines if line.startswith("epoch ")]
    assert shown == ["epoch 1", "epoch 2", "epoch 3", "epoch 200", "epoch 398", "epoch 399", "epoch 400"]
    assert "... 196 epoch(s) not shown (every epoch is in summary.json)" in lines
    assert "... 197 epoch(s) not shown (every epoch is in summary.json)" in lines
    assert len(summary["metrics"]) == 400


def run_verdict(run: Path, **options: Any) -> dict[str, Any]:
    params = {"run_dir": str(run), "run_id": run.name, "marker": MARKER, "expected_size": 0, "context": {},
              "wait_outcome": None, "attempts": None, "devices": None, "left_out": None, **options}  # fmt: skip
    return verdict(params, check_mode=False)


def test_summary_json_is_the_owners_alone(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "modes"
    pair(run)
    os.chmod(run, 0o755)
    old = os.umask(0o022)
    try:
        run_verdict(run)
    finally:
        os.umask(old)
    assert stat.S_IMODE((run / "summary.json").stat().st_mode) == 0o600
    assert stat.S_IMODE(run.stat().st_mode) == 0o700
    assert sorted(p.name for p in run.iterdir()) == ["node0", "node1", "summary.json"]  # no temporary left


def test_collect_alone_keeps_what_the_earlier_judgement_recorded(tmp_path: Path) -> None:
    """Issue 24, point 7: train.yml judged with the wait's outcome, attempts and devices;
    collect.yml alone (none of them given) keeps them, and says what it judged again."""
    run = tmp_path / "again"
    hosts, cluster = endpoints(2, hosts=2)
    # node1 was lost: nothing of worker 1 was collected; the wait knew why it failed.
    write_worker(run, hosts[0], 0, cluster, exit_status=143, stopped_by="runbook", complete=False)
    wait = {"failed_workers": [{"index": 1, "host": "node1", "returncode": -1, "reason": "host lost",
                                "cause": {"kind": "host-lost", "detail": "node1 stopped answering"}}]}  # fmt: skip
    attempts = [{"attempt": 0, "ok": False, "outcome": wait}]
    first = run_verdict(run, wait_outcome=wait, attempts=attempts, devices={"0": "0", "1": "1"}, expected_size=2)
    assert first["reason"].startswith("worker 1 on host node1 failed: host-lost (node1 stopped answering)")
    assert first["summary"]["judged_again"] is None

    again = run_verdict(run)
    summary = json.loads((run / "summary.json").read_text())
    assert again["reason"] == first["reason"]
    assert summary["context"] == {"wait": wait, "attempts": attempts, "devices": {"0": "0", "1": "1"}}
    assert summary["cluster"]["size"] == 2  # the size it was launched with, kept too
    assert summary["judged_again"]["kept"] == ["wait", "attempts", "devices"]
    assert summary["timeline"][0]["culprit"] == 1
    assert any(line.startswith("judged again from the collected files; kept from the earlier judgement")
               for line in again["table"])  # fmt: skip

    # What a caller gives wins over what was recorded.
    given = run_verdict(run, wait_outcome={})
    assert given["summary"]["judged_again"]["kept"] == ["attempts", "devices"]
    assert not given["reason"].startswith("worker 1 on host node1 failed: host-lost")


def test_collect_alone_keeps_a_wait_outcome_only_for_its_own_attempt(tmp_path: Path) -> None:
    """Issue 38, point 10: attempt 0 stalled and was judged; the run was resumed (attempt 1)
    and trained to the end; collect.yml alone must not judge it by attempt 0's stall."""
    run = tmp_path / "resumed"
    stalled = {"ok": False, "failed_workers": [], "lost_hosts": [], "stalled": {"seconds": 20, "detail": "no progress"}}
    pair(run, w0={"epochs": [1], "complete": False, **STOPPED}, w1={"epochs": [1], "complete": False, **STOPPED})
    first = run_verdict(run, wait_outcome=stalled, attempts=[{"attempt": 0, "ok": False, "outcome": stalled}],
                        expected_size=2)  # fmt: skip
    assert first["status"] == "failed" and first["reason"].startswith("stalled")
    pair(run, attempt=1, w0={"epochs": [2, 3], "resumed_from": 1}, w1={"epochs": [2, 3], "resumed_from": 1})
    again = run_verdict(run)
    assert again["status"] == "succeeded", again["reason"]
    assert again["summary"]["judged_again"]["kept"] == ["attempts"]
    assert again["summary"]["judged_again"]["not_kept"].startswith("the wait's outcome of attempt 0")
    # The same attempt judged again keeps it.
    assert run_verdict(run)["status"] == "succeeded"


def test_a_deadline_stop_says_where_the_culprit_was_stuck(tmp_path: Path) -> None:
    run = tmp_path / "deadline"
    deadline = {"kind": "deadline", "detail": "job deadline of 60 s passed"}
    pair(run, w0={"exit_status": 137, "stopped_by": "job-deadline", "complete": False, "finished_at": 1_764_000_100.0,
                  "exit_extra": {"cause": deadline, "stacks": STACKS}},
         w1={"exit_status": 137, "stopped_by": "job-deadline", "complete": False, "finished_at": 1_764_000_101.0,
             "exit_extra": {"cause": deadline}})  # fmt: skip
    summary = build(run, 2)
    assert summary["reason"].startswith(
        "worker 0 on host node0 failed first: deadline (job deadline of 60 s passed); exit status 137 (exited); "
        "stuck in load_batch (train.py:41); last log lines: "
    )
    assert summary["stall"] is None


def test_a_job_a_signal_ended_on_its_own_says_so_in_the_failure_message(tmp_path: Path) -> None:
    """A SIGKILL nobody in the runbook sent: the status reads "killed by SIGKILL", not "exited"."""
    run = tmp_path / "killed"
    pair(run, w0={"exit_status": 143, "stopped_by": "runbook", "complete": False},
         w1={"epochs": [1], "exit_status": 137, "signal": "SIGKILL", "complete": False})  # fmt: skip
    summary = build(run, 2)
    assert "worker 1 on host node1 failed first: killed (SIGKILL" in summary["reason"]
    assert "exit status 137 (killed by SIGKILL)" in summary["reason"]


def test_a_stop_that_reached_a_job_after_it_finished_is_no_stop(tmp_path: Path) -> None:
    """Issue 38, point 23: both jobs printed training_complete and exited 0, and an
    operator's stop reached them during their shutdown. The verdict agrees with the resume
    ("succeeded: there is nothing to resume"): the run succeeded."""
    run = tmp_path / "late-stop"
    # The stop came after training_complete (printed 0.2 s after the last epoch, at T0 + 6.7).
    late = {"stopped_by": "operator", "reason": "stopped by the operator", "exit_extra": {"stopped_at": T0 + 6.8}}
    pair(run, w0=late, w1=late)
    summary = build(run, 2)
    assert summary["status"] == "succeeded", summary["reason"]
    assert summary["stopped"] is None
    # A job the stop did end (no training_complete) is still a stop.
    cut = tmp_path / "cut"
    pair(cut, w0={**late, "complete": False}, w1={**late, "complete": False})
    assert build(cut, 2)["status"] == "stopped"
    # One that printed training_complete only after the stop's SIGTERM did not finish by
    # itself: the operator stopped it.
    caught = tmp_path / "caught"
    early = {**late, "exit_extra": {"stopped_at": T0 + 5.0}}
    pair(caught, w0=early, w1=early)
    assert build(caught, 2)["status"] == "stopped"


def test_a_stopped_run_that_failed_a_check_the_stop_does_not_explain_failed(tmp_path: Path) -> None:
    """The stop makes moot only what it ended: workers that disagree on an epoch they both
    printed before it still fail the run."""
    run = tmp_path / "opstop-disagree"
    stop = {"exit_status": 143, "stopped_by": "operator", "complete": False, "total": 5, "epochs": [1, 2]}
    pair(run, w0=stop, w1={**stop, "metrics": {2: {"loss": "0.9", "binary_accuracy": "0.1"}}})
    summary = build(run, 2)
    assert summary["status"] == "failed"
    assert [c["name"] for c in summary["checks"] if c["ok"] is False] == ["metrics_agree"]
