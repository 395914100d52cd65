"""Filters of the wait and launch phases: tf_wait_outcome and tf_launched_workers; the run's
facts the launch and the reattach publish (issue 25: one role publishes them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run_files import reattach_facts, run_facts
from ansible.errors import AnsibleFilterError
from tf_launch import tf_launch_facts, tf_launched_workers
from tf_wait import tf_wait_outcome

HOSTS = ["node-a", "node-b", "node-c"]


def status(*workers: dict[str, Any], done: bool = True, deadline_passed: bool = False) -> dict[str, Any]:
    """A registered tf_worker_status result, as the wait's task passes it per host."""
    return {
        "changed": False,
        "attempts": 3,
        "workers": list(workers),
        "done": done,
        "failed_workers": [w["index"] for w in workers if w["state"] == "exited" and w["returncode"] != 0],
        "deadline_passed": deadline_passed,
    }


def exited(index: int, returncode: int = 0, reason: str = "exited") -> dict[str, Any]:
    return {
        "index": index,
        "dir": f"/r/worker-{index}",
        "pid": 100 + index,
        "state": "exited",
        "returncode": returncode,
        "reason": reason,
        "last_line": f"worker={index} epoch=3 loss=0.4",
        "log_tail": [f"worker={index} training_complete"],
    }


def running(index: int) -> dict[str, Any]:
    entry = exited(index)
    entry.update(state="running", returncode=None, reason=None, log_tail=[f"worker={index} epoch=1 loss=0.6"])
    return entry


def all_ok() -> dict[str, Any]:
    return {
        "node-a": status(exited(0), exited(1)),
        "node-b": status(exited(2)),
        "node-c": status(exited(3)),
    }


def test_outcome_ok_when_every_worker_exited_zero() -> None:
    outcome = tf_wait_outcome(HOSTS, HOSTS, all_ok())
    assert outcome == {
        "ok": True,
        "detached": False,
        "stopped_by_operator": False,
        "failed_workers": [],
        "running_workers": [],
        "frozen_workers": [],
        "lost_hosts": [],
        "evaluator_lost": [],
        "deadline_hosts": [],
        "status_problems": [],
        "stalled": None,
        "causes": [],
    }


def test_outcome_names_a_failed_worker() -> None:
    statuses = all_ok()
    failed = exited(2, 1, "exited")
    failed["log_tail"] = ["Traceback (most recent call last):", "ValueError: boom"]
    statuses["node-b"] = status(failed)
    outcome = tf_wait_outcome(HOSTS, HOSTS, statuses)
    assert outcome["ok"] is False
    assert outcome["failed_workers"] == [
        {
            "index": 2,
            "host": "node-b",
            "returncode": 1,
            "reason": "exited",
            "stopped_by": None,
            "finished_at": None,
            "log_tail": ["Traceback (most recent call last):", "ValueError: boom"],
            # A status without a cause is told from its exit fields, never from its log.
            "cause": {"kind": "job-error", "detail": "the job exited with status 1 and no traceback in its log"},
        }
    ]
    assert outcome["running_workers"] == [] and outcome["lost_hosts"] == []


def test_a_host_the_wait_could_not_reach_is_lost_though_still_in_the_play() -> None:
    """The wait ignores a host's unreachability (it stays in the play, to be waited for and
    brought back): its result says unreachable, and the outcome counts it lost."""
    statuses = all_ok()
    statuses["node-b"] = {"unreachable": True, "msg": "Data could not be sent to remote host"}
    outcome = tf_wait_outcome(HOSTS, HOSTS, statuses)
    assert outcome["ok"] is False
    assert outcome["lost_hosts"] == ["node-b"] and outcome["status_problems"] == []


def test_outcome_failed_workers_sorted_by_index_across_hosts() -> None:
    statuses = {
        "node-a": status(exited(3, 137, "job deadline of 5 s passed")),
        "node-b": status(exited(0, -1, "the worker could not be launched: boom"), exited(1)),
        "node-c": status(exited(2, 2)),
    }
    outcome = tf_wait_outcome(HOSTS, HOSTS, statuses)
    assert [(w["index"], w["host"], w["returncode"]) for w in outcome["failed_workers"]] == [
        (0, "node-b", -1),
        (2, "node-c", 2),
        (3, "node-a", 137),
    ]
    assert outcome["ok"] is False


def test_outcome_lost_host() -> None:
    statuses = all_ok()
    del statuses["node-c"]  # unreachable: no result registered
    outcome = tf_wait_outcome(HOSTS, ["node-a", "node-b"], statuses)
    assert outcome["ok"] is False
    assert outcome["lost_hosts"] == ["node-c"]
    assert outcome["failed_workers"] == [] and outcome["running_workers"] == []


def test_outcome_host_past_the_deadline() -> None:
    statuses = all_ok()
    statuses["node-a"] = status(exited(0), running(1), done=False, deadline_passed=True)
    outcome = tf_wait_outcome(HOSTS, HOSTS, statuses)
    assert outcome["ok"] is False
    assert outcome["deadline_hosts"] == ["node-a"]
    assert [(w["index"], w["host"]) for w in outcome["running_workers"]] == [(1, "node-a")]


def test_outcome_deadline_passed_after_everything_finished_is_ok() -> None:
    statuses = all_ok()
    statuses["node-b"] = status(exited(2), done=True, deadline_passed=True)
    outcome = tf_wait_outcome(HOSTS, HOSTS, statuses)
    assert outcome["ok"] is True
    assert outcome["deadline_hosts"] == []


@pytest.mark.parametrize("state", ["running", "starting"])
def test_outcome_worker_still_running(state: str) -> None:
    statuses = all_ok()
    worker = running(3)
    worker["state"] = state
    statuses["node-c"] = status(worker, done=False)
    outcome = tf_wait_outcome(HOSTS, HOSTS, statuses)
    assert outcome["ok"] is False
    assert outcome["running_workers"] == [
        {"index": 3, "host": "node-c", "returncode": None, "reason": None, "stopped_by": None, "finished_at": None,
         "log_tail": ["worker=3 epoch=1 loss=0.6"], "joined": False}
    ]  # fmt: skip
    assert outcome["failed_workers"] == []


def test_outcome_reads_only_the_statuses_it_is_given() -> None:
    """The statuses come in as an argument: a mapping shaped like hostvars (the status
    under a register's name) is no status at all, and fails closed."""
    like_hostvars = {host: {"tf_wait_status": value} for host, value in all_ok().items()}
    outcome = tf_wait_outcome(HOSTS, HOSTS, like_hostvars)
    assert outcome["ok"] is False
    assert outcome["status_problems"] == [
        f"host {host}: the wait's status has no workers, done, deadline_passed" for host in HOSTS
    ]


@pytest.mark.parametrize(
    ("status_of_b", "problem"),
    [
        (None, "host node-b: the wait recorded no status"),
        ({}, "host node-b: the wait recorded no status"),
        ("skipped", "host node-b: the wait recorded no status"),
        ({"skipped": True, "changed": False}, "host node-b: the wait's status has no workers, done, deadline_passed"),
        ({"workers": [], "done": True}, "host node-b: the wait's status has no deadline_passed"),
        ({"workers": {}, "done": True, "deadline_passed": False},
         "host node-b: the wait's status gives workers as dict, not a list"),
        ({"workers": ["worker-2"], "done": True, "deadline_passed": False},
         "host node-b: worker entry 0 of the wait's status is not a mapping"),
        ({"workers": [{"index": 2}], "done": True, "deadline_passed": False},
         "host node-b: worker entry 0 of the wait's status has no state"),
        ({"workers": [{"index": 2, "state": "exited"}], "done": True, "deadline_passed": False},
         "host node-b: worker entry 0 of the wait's status has no returncode"),
        ({"workers": [{"state": "running"}], "done": False, "deadline_passed": False},
         "host node-b: worker entry 0 of the wait's status has no index"),
    ],
)  # fmt: skip
def test_outcome_fails_closed_on_a_missing_or_incomplete_status(status_of_b: Any, problem: str) -> None:
    statuses = all_ok()
    statuses["node-b"] = status_of_b
    outcome = tf_wait_outcome(HOSTS, HOSTS, statuses)
    assert outcome["ok"] is False and outcome["detached"] is False
    assert outcome["status_problems"] == [problem]


def test_outcome_fails_closed_on_a_reachable_host_left_out_of_the_statuses() -> None:
    statuses = all_ok()
    del statuses["node-a"]
    outcome = tf_wait_outcome(HOSTS, HOSTS, statuses)
    assert outcome["ok"] is False
    assert outcome["status_problems"] == ["host node-a: the wait recorded no status"]
    assert outcome["lost_hosts"] == []


def test_outcome_detached_fails_closed_on_a_missing_status() -> None:
    """A detached run is left to itself only when every host's status says so."""
    statuses = {"node-a": status(running(0) | {"joined": True}, done=False), "node-b": None}
    outcome = tf_wait_outcome(["node-a", "node-b"], ["node-a", "node-b"], statuses, True)
    assert outcome["ok"] is False and outcome["detached"] is False


def test_outcome_refuses_statuses_that_are_not_a_mapping() -> None:
    with pytest.raises(TypeError, match="statuses must map host to status, not list"):
        tf_wait_outcome(HOSTS, HOSTS, [status(exited(0))])


# --- tf_launched_workers -------------------------------------------------------------


DIRS = {str(i): f"/home/u/tf/runs/r1/worker-{i}" for i in range(12)}


def launch_result(*workers: tuple[Any, int | None], error: str | None = None) -> dict[str, Any]:
    """A registered tf_worker_launch result: one worker per (index, supervisor pid); the
    error goes to each worker without a pid."""
    return {
        "changed": True,
        "workers": [
            {"index": index, "dir": DIRS[str(index)], "argv": ["python3", "tf_supervisor.py"],
             "supervisor_pid": pid, "recorded": True, "error": None if pid else error}
            for index, pid in workers
        ],
    }  # fmt: skip


def test_launched_workers_in_index_order_with_dirs_and_supervisor_pids() -> None:
    assert tf_launched_workers(launch_result((10, 110), (2, 102), (3, 103))) == [
        {"index": 2, "dir": DIRS["2"], "supervisor_pid": 102, "launch_error": None},
        {"index": 3, "dir": DIRS["3"], "supervisor_pid": 103, "launch_error": None},
        {"index": 10, "dir": DIRS["10"], "supervisor_pid": 110, "launch_error": None},
    ]


def test_a_worker_the_launch_could_not_start_is_listed_with_its_error() -> None:
    """The wait must see it, to report it failed and stop the others."""
    result = launch_result((0, 100), (1, None), error="the supervisor could not be started: no python")
    assert tf_launched_workers(result) == [
        {"index": 0, "dir": DIRS["0"], "supervisor_pid": 100, "launch_error": None},
        {"index": 1, "dir": DIRS["1"], "supervisor_pid": None,
         "launch_error": "the supervisor could not be started: no python"},
    ]  # fmt: skip


@pytest.mark.parametrize(
    "result",
    [None, {}, {"skipped": True, "changed": False}, launch_result((0, None), (1, None)), {"workers": None}],
    ids=["no-result", "empty", "skipped", "check-mode", "null-workers"],
)
def test_launched_workers_of_a_dry_run_or_no_launch_are_none(result: dict[str, Any] | None) -> None:
    assert tf_launched_workers(result) == []


def test_launched_workers_string_index_and_pid_become_numbers() -> None:
    result = launch_result((4, 44))
    result["workers"][0].update(index="4", supervisor_pid="44")
    assert tf_launched_workers(result) == [{"index": 4, "dir": DIRS["4"], "supervisor_pid": 44, "launch_error": None}]


# --- one place publishes the run's facts: the launch and the reattach ----------------------


def found_on_host(deadline: float | None = 1796000300.0, attempt: int = 1) -> dict[str, Any]:
    """What the reattach's finder (tf_worker_status with run_dir) returns on a host."""
    return {
        "run_dir": "/h/runs/r1",
        "workers_found": [{"index": 3, "dir": "/h/runs/r1/retry-1/worker-3"},
                          {"index": 2, "dir": "/h/runs/r1/retry-1/worker-2"}],
        "launch": {"python": "/opt/py", "script": "/h/runs/r1/job/train.py", "checkpoint_dir": "/ck/r1",
                   "attempt": attempt, "deadline_at_controller": deadline},
    }  # fmt: skip


def test_a_reattach_publishes_the_names_and_values_the_launch_publishes() -> None:
    facts = reattach_facts(found_on_host())
    launched = run_facts(
        "/h/runs/r1", "/h/runs/r1/job", "/ck/r1",
        {"2": "/h/runs/r1/retry-1/worker-2", "3": "/h/runs/r1/retry-1/worker-3"}, "/opt/py",
        [{"index": 2, "dir": "/h/runs/r1/retry-1/worker-2"}, {"index": 3, "dir": "/h/runs/r1/retry-1/worker-3"}],
    )  # fmt: skip
    assert facts == {**launched, "tf_run_attempt": 1, "tf_launch_deadline": 1796000300}


def test_a_reattach_takes_one_attempt_and_deadline_for_the_run() -> None:
    first = found_on_host(deadline=1796000999.4, attempt=2)["launch"]
    facts = reattach_facts(found_on_host(), first)
    assert (facts["tf_run_attempt"], facts["tf_launch_deadline"]) == (2, 1796000999)
    assert reattach_facts(found_on_host(deadline=None))["tf_launch_deadline"] == 0


def test_a_reattach_without_a_launch_record_is_refused() -> None:
    with pytest.raises(ValueError, match="run directory /h/runs/r1 holds no launch record"):
        reattach_facts({**found_on_host(), "launch": {}})


def test_the_launch_role_publishes_either_source_through_one_filter() -> None:
    """tasks/publish.yml: a launch's result gives its facts, with what the go started; a
    reattach's finder result gives the same names; anything else is refused."""
    jobs = [{"index": 0, "dir": "/r/worker-0", "supervisor_pid": 7, "launch_error": None}]
    facts = run_facts("/r", "/r/job", "/r/checkpoints", {"0": "/r/worker-0"}, "/py", jobs)
    launched = {"facts": facts, "workers": [{"index": 0, "dir": "/r/worker-0", "supervisor_pid": 7, "error": None}]}
    assert tf_launch_facts(launched) == facts
    went = {"workers": [{"index": 0, "started": False, "error": "refused"}]}
    assert tf_launch_facts(launched, None, went)["tf_launch_jobs"] == [
        {**jobs[0], "launch_error": "the launch's go did not start it: refused"}
    ]
    assert facts["tf_launch_jobs"] == jobs, "the launch's own result is left as it was"
    assert tf_launch_facts(found_on_host(), {}) == reattach_facts(found_on_host())
    with pytest.raises(AnsibleFilterError, match="cannot publish the run's facts: neither a launch's result"):
        tf_launch_facts({"changed": False})
    with pytest.raises(AnsibleFilterError, match="holds no launch record"):
        tf_launch_facts({**found_on_host(), "launch": {}})


def test_the_launch_reads_the_controller_clock_once_per_attempt() -> None:
    """The attempt's start and the run's deadline come from one reading of the clock: two
    readings in one task could fall on either side of a second's turn, in either order,
    and gave the job tf_job_timeout - 1 s (seen once in the fault test of the deadline)."""
    tasks = Path(__file__).resolve().parents[2] / "roles" / "tf_launch" / "tasks" / "main.yml"
    text = tasks.read_text()
    assert text.count("now(") == 1
    check, note = yaml.safe_load(text)[:2]
    assert "now(" in check["tf_runbook.multiworker.tf_role_inputs"]["facts"]["tf_launch_started_at"]
    assert "tf_launch_started_at | int + tf_job_timeout" in note["ansible.builtin.set_fact"]["tf_launch_deadline"]
