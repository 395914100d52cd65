"""Every attempt's record (issue 37, "one record of every attempt"; issue 38, point 17):
the live decision writes the culprit and the causes when it is made (tf_attempts_record),
and the verdict's timeline reads them back, the same whether the run is judged with its
whole history or as collect.yml alone (a resume's collect) sees it.

The run: three workers on node0..node2 and five attempts, each ended by another fault, as
the wait reported them and as the collect later finds the files:
  0. worker 1 killed (SIGKILL) at t+1; worker 2's TensorFlow raised UnavailableError
     (peer-lost) a second earlier, in list order first; worker 0 stopped by the runbook.
  1. worker 0's supervisor killed: no exit.json is ever collected for it.
  2. node2 cut off: its supervisor stopped its job when the controller's heartbeat went
     stale (controller-lost); the others lost their peer.
  3. worker 1 preempted (SIGTERM from outside).
  4. every worker completed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from report_runs import T0, build, endpoints, write_worker

from ansible_collections.tf_runbook.multiworker.plugins.filter.tf_attempts import (
    tf_attempts_decision,
    tf_attempts_record,
)
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_causes import RESTARTABLE_CAUSES

HOSTS, CLUSTER = endpoints(3, hosts=3)
SPEC = [{"index": i, "host": HOSTS[i]} for i in range(3)]
TF_UNAVAILABLE = {"kind": "peer-lost", "detail": "UnavailableError: Collective ops is aborted",
                  "exception": "UnavailableError", "message": "Collective ops is aborted"}  # fmt: skip
SUPERVISOR_DIED = "the supervisor (pid 4242) died without recording an exit (killed, or out of memory)"
STOPPED = {"exit_status": 143, "stopped_by": "runbook", "complete": False, "reason": "stopped by the runbook"}


def failed(index: int, cause: dict[str, Any] | None, finished_at: float | None = None, **fields: Any) -> dict[str, Any]:
    return {"index": index, "host": HOSTS[index], "returncode": fields.pop("returncode", 1), "reason": "exited",
            "stopped_by": fields.pop("stopped_by", None), "finished_at": finished_at, "log_tail": [], "cause": cause,
            **fields}  # fmt: skip


def outcome(*failed_workers: dict[str, Any], lost: list[str] | None = None) -> dict[str, Any]:
    return {"ok": False, "failed_workers": list(failed_workers), "lost_hosts": lost or [], "deadline_hosts": [],
            "status_problems": [], "stopped_by_operator": False, "stalled": None}  # fmt: skip


# Each attempt: the wait's outcome, and the files the collect brings of each worker.
ATTEMPTS: list[tuple[dict[str, Any], dict[int, dict[str, Any]]]] = [
    (
        outcome(failed(2, TF_UNAVAILABLE, T0 + 99), failed(1, {"kind": "killed", "detail": "SIGKILL that the runbook "
                "did not send"}, T0 + 100, returncode=137, signal="SIGKILL")),  # fmt: skip
        {0: STOPPED, 1: {"exit_status": 137, "signal": "SIGKILL", "complete": False, "finished_at": T0 + 100},
         2: {"exit_status": 1, "complete": False, "finished_at": T0 + 99, "exit_extra": {"cause": TF_UNAVAILABLE}}},
    ),
    (
        outcome(failed(0, {"kind": "killed", "detail": SUPERVISOR_DIED, "signal": "SIGKILL"}, T0 + 200, returncode=-1)),
        {0: {"no_exit": True, "complete": False}, 1: STOPPED, 2: STOPPED},
    ),
    (
        outcome(failed(0, TF_UNAVAILABLE, T0 + 300), lost=["node2"]),
        {0: {"exit_status": 1, "complete": False, "exit_extra": {"cause": TF_UNAVAILABLE}}, 1: STOPPED,
         2: {"exit_status": 143, "stopped_by": "controller", "complete": False, "reason": "lost the controller"}},
    ),
    (
        outcome(failed(1, None, T0 + 400, returncode=143, signal="SIGTERM", stopped_by="signal")),
        {0: STOPPED, 1: {"exit_status": 143, "signal": "SIGTERM", "stopped_by": "signal", "complete": False,
                         "reason": "stopped by signal SIGTERM"}, 2: STOPPED},
    ),
]
# Per attempt: the culprit's index, host and cause, and each worker's cause in the timeline.
EXPECTED = [
    (1, "node1", "killed", ["runbook", "killed", "peer-lost"]),
    (0, "node0", "killed", ["killed", "runbook", "runbook"]),
    (2, "node2", "host-lost", ["peer-lost", "runbook", "host-lost"]),
    (1, "node1", "preempted", ["runbook", "preempted", "runbook"]),
    (None, None, None, ["completed", "completed", "completed"]),
]


def write_run(run: Path) -> list[dict[str, Any]]:
    """The collected files of every attempt and, as the attempts role does when it decides,
    each failed attempt's record; returns the attempts' history (tf_attempts_history)."""
    history = []
    for attempt, (wait, files) in enumerate(ATTEMPTS):
        for index in range(3):
            fields = dict(files[index])
            no_exit = fields.pop("no_exit", False)
            epochs = [attempt + 1] if attempt < 2 else [attempt]
            wdir = write_worker(run, HOSTS[index], index, CLUSTER, attempt=attempt, epochs=epochs, total=3,
                                resumed_from=attempt or None, **fields)  # fmt: skip
            if no_exit:
                (wdir / "exit.json").unlink()
        decision = tf_attempts_decision(wait, attempt, 8, T0, 0, list(RESTARTABLE_CAUSES), SPEC, 600)
        written = tf_attempts_record(decision, wait, attempt, SPEC, str(run), T0 + 100 * attempt + 5)
        Path(written["path"]).write_text(json.dumps(written["record"]))
        history.append({"attempt": attempt, "ok": False, "outcome": wait})
    for index in range(3):
        write_worker(run, HOSTS[index], index, CLUSTER, attempt=4, epochs=[3], total=3, resumed_from=2)
    return history


@pytest.mark.parametrize("seen_by", ["whole history", "collect alone"])
def test_every_attempts_culprit_and_causes_come_from_its_record(tmp_path: Path, seen_by: str) -> None:
    run = tmp_path / "faults"
    history = write_run(run)
    context = {"attempts": history, "wait": {"ok": True, "failed_workers": []}} if seen_by == "whole history" else {}
    timeline = build(run, 3, context)["timeline"]
    assert [entry["attempt"] for entry in timeline] == [0, 1, 2, 3, 4]
    for entry, (index, host, kind, causes) in zip(timeline, EXPECTED):
        where = f"attempt {entry['attempt']}"
        assert (entry["culprit"], entry["culprit_host"]) == (index, host), where
        assert (entry["culprit_cause"] or {}).get("kind") == kind, where
        assert [row["cause"]["kind"] for row in entry["workers"]] == causes, where
        assert [row["culprit"] for row in entry["workers"]] == [i == index for i in range(3)], where
        assert entry["hosts"] == {"0": "node0", "1": "node1", "2": "node2"}, where
    assert [entry["decision"] for entry in timeline] == ["restart", "restart", "wait-for-host", "restart", None]
    assert timeline[1]["workers"][0]["cause"]["detail"] == SUPERVISOR_DIED
    assert timeline[2]["lost_hosts"] == ["node2"]


def test_the_record_says_what_was_decided_and_names_the_culprit(tmp_path: Path) -> None:
    write_run(tmp_path / "faults")
    record = json.loads((tmp_path / "faults" / "attempt-0.json").read_text())
    assert record["culprit"] == {"index": 1, "host": "node1",
                                 "cause": {"kind": "killed", "detail": "SIGKILL that the runbook did not send"}}  # fmt: skip
    assert record["decision"] == "restart" and record["why"].startswith("worker 1 on node1 failed with killed (")
    assert [w["host"] for w in record["workers"]] == HOSTS
    lost = json.loads((tmp_path / "faults" / "attempt-2.json").read_text())
    assert lost["lost_hosts"] == ["node2"] and lost["workers"][2]["lost"] is True
    assert lost["culprit"]["host"] == "node2" and lost["culprit"]["index"] == 2


def test_status_shows_which_host_ran_which_worker_and_the_culprit_of_each_attempt(tmp_path: Path) -> None:
    from ansible_collections.tf_runbook.multiworker.plugins.filter.tf_attempts import tf_attempts_record_lines

    write_run(tmp_path / "faults")
    texts = [path.read_text() for path in sorted((tmp_path / "faults").glob("attempt-*.json"), reverse=True)]
    lines = tf_attempts_record_lines([*texts, "not json\x1b[2J"])
    assert lines[0] == ("attempt 0: worker 0 on node0, worker 1 on node1, worker 2 on node2; culprit worker 1 on "
                        "node1: killed (SIGKILL that the runbook did not send); decided: restart")  # fmt: skip
    assert lines[2].startswith("attempt 2: ") and "culprit worker 2 on node2: host-lost" in lines[2]
    assert lines[2].endswith("decided: wait-for-host")
    assert lines[-1] == "an attempt record that cannot be read" and len(lines) == 5
