"""The restart decision (plugins/filter/tf_attempts.py): by the culprit's cause, with why."""

from __future__ import annotations

from typing import Any

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.tf_runbook.multiworker.plugins.filter import tf_attempts
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_causes import CAUSES, RESTARTABLE_CAUSES



def decide(outcome: dict[str, Any], attempt: int, attempts: int, now: float, deadline: float,
           restart_on: Any = RESTARTABLE_CAUSES, host_lost_wait: int = 0) -> dict[str, Any]:
    """The decision with tf_restart_on's default unless given."""
    return tf_attempts.tf_attempts_decision(outcome, attempt, attempts, now, deadline, list(restart_on)
                                            if isinstance(restart_on, tuple) else restart_on, None, host_lost_wait)

JOB_ERROR = {"kind": "job-error", "detail": "ModuleNotFoundError: No module named 'x'",
             "exception": "ModuleNotFoundError", "message": "No module named 'x'"}  # fmt: skip


def worker(index: int, kind: str | None, stopped_by: str | None = None, returncode: int = 1,
           **cause: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"index": index, "host": f"h{index}", "returncode": returncode,
                             "stopped_by": stopped_by, "reason": "", "log_tail": []}
    if kind is not None:
        entry["cause"] = {"kind": kind, "detail": f"{kind} detail", **cause}
    return entry


def outcome(*failed: dict[str, Any], **more: Any) -> dict[str, Any]:
    base = {"ok": False, "failed_workers": list(failed), "lost_hosts": [], "deadline_hosts": [],
            "status_problems": [], "stopped_by_operator": False, "stalled": None}  # fmt: skip
    base.update(more)
    return base


def test_a_job_error_is_not_restarted_and_the_output_says_why_and_how() -> None:
    failed = outcome(worker(0, "runbook", stopped_by="runbook", returncode=143),
                     {**worker(1, None), "cause": JOB_ERROR})
    decision = decide(failed, 0, 2, 100, 0)
    assert decision.pop("failure")["culprit"] == 1
    assert decision.pop("decided_at") == 100
    assert decision == {
        "restart": False, "cause": "job-error", "culprit": 1,
        "why": "worker 1 on h1 failed with job-error (ModuleNotFoundError: No module named 'x'): a restart cannot "
               "fix the job's own error; to restart it anyway add job-error to tf_restart_on",
    }  # fmt: skip


def test_a_job_error_listed_in_tf_restart_on_is_restarted() -> None:
    decision = decide(outcome({**worker(1, None), "cause": JOB_ERROR}), 0, 2, 100, 0, ["job-error"])
    assert decision["restart"] is True
    assert decision["why"].endswith("restarting it, attempt 1 of at most 2 restarts")


@pytest.mark.parametrize("kind", sorted(set(RESTARTABLE_CAUSES) - {"host-lost"}))
def test_every_default_restartable_cause_of_a_worker_is_restarted(kind: str) -> None:
    decision = decide(outcome(worker(1, kind)), 0, 1, 100, 200)
    assert (decision["restart"], decision["cause"]) == (True, kind)


@pytest.mark.parametrize("kind", sorted(set(CAUSES) - set(RESTARTABLE_CAUSES) - {"operator", "runbook"}))
def test_every_other_cause_is_not_restarted_by_default_and_named(kind: str) -> None:
    decision = decide(outcome(worker(1, kind)), 0, 1, 100, 200)
    assert decision["restart"] is False
    assert f"add {kind} to tf_restart_on" in decision["why"]


def test_the_victim_is_never_the_cause_whatever_its_index() -> None:
    """Worker 0 was stopped by the runbook after worker 1 was killed: killed decides."""
    failed = outcome(worker(0, "job-error", stopped_by="runbook", returncode=143), worker(1, "killed", returncode=137))
    decision = decide(failed, 0, 1, 100, 0)
    assert (decision["restart"], decision["cause"], decision["culprit"]) == (True, "killed", 1)


def test_a_worker_that_only_lost_its_peer_is_not_the_cause() -> None:
    """Worker 0's TensorFlow failed (peer-lost) because worker 1 was killed: killed decides,
    whatever their order."""
    failed = outcome(worker(0, "peer-lost", returncode=1), worker(1, "job-error", **{"exception": "ValueError"}))
    decision = decide(failed, 0, 1, 100, 0)
    assert (decision["cause"], decision["culprit"], decision["restart"]) == ("job-error", 1, False)
    only_peers = decide(outcome(worker(0, "peer-lost"), worker(1, "peer-lost")), 0, 1, 100, 0)
    assert (only_peers["cause"], only_peers["culprit"], only_peers["restart"]) == ("peer-lost", 0, True)


@pytest.mark.parametrize(
    ("fields", "kind"),
    [
        ({"returncode": 42}, "preempted"),
        ({"returncode": 137}, "killed"),
        ({"returncode": -9}, "killed"),
        ({"returncode": 143}, "preempted"),
        # The job's own status, where no record says more: its own error.
        ({"returncode": 1}, "job-error"),
        ({"returncode": None}, "unknown"),
        ({"returncode": 143, "stopped_by": "job-deadline"}, "deadline"),
        ({"returncode": 1, "stopped_by": "startup-deadline"}, "startup"),
    ],
)
def test_a_status_without_a_cause_is_told_from_its_exit_fields(fields: dict[str, Any], kind: str) -> None:
    entry = {**worker(1, None), **fields}
    assert decide(outcome(entry), 0, 1, 100, 0)["cause"] == kind


def test_preemption_exit_42_is_restarted_by_default() -> None:
    assert decide(outcome({**worker(1, None), "returncode": 42}), 0, 1, 100, 0)["restart"] is True


def test_a_stall_is_restarted_and_decides_over_the_workers_the_stop_ended() -> None:
    stalled = outcome(worker(0, "stalled", stopped_by="runbook", returncode=143),
                      stalled={"seconds": 20, "detail": "no progress line for 20 s"})
    decision = decide(stalled, 0, 1, 100, 0)
    assert (decision["restart"], decision["cause"]) == (True, "stalled")
    assert "no progress line for 20 s" in decision["why"]


def test_a_stall_left_out_of_tf_restart_on_says_so() -> None:
    decision = decide(outcome(stalled={"seconds": 20, "detail": "no progress"}), 0, 1, 100, 0, ["preempted"])
    assert decision["restart"] is False
    assert "add stalled to tf_restart_on" in decision["why"]


def test_a_lost_host_is_resumed_later_without_a_wait() -> None:
    """tf_host_lost_wait 0: no restart here, and the output says how to go on."""
    decision = decide(outcome(worker(0, "peer-lost"), lost_hosts=["h1"]), 0, 1, 100, 0)
    assert (decision["restart"], decision["cause"]) == (False, "host-lost")
    assert "wait_for_hosts" not in decision
    assert decision["why"] == (
        "host h1 failed with host-lost (it stopped answering): a host that stopped answering cannot rejoin this "
        "playbook's cluster (tf_host_lost_wait 0); once it answers again, continue the run with -e tf_run_id=<id> "
        "-e tf_resume=true")


def test_a_lost_host_is_waited_for_and_restarted_with_it() -> None:
    """Issue 37, point 1: a host that answers again needs no person."""
    decision = decide(outcome(worker(0, "peer-lost"), lost_hosts=["h1"]), 0, 2, 100, 0, host_lost_wait=600)
    assert (decision["restart"], decision["cause"], decision["wait_for_hosts"]) == (True, "host-lost", ["h1"])
    assert decision["why"] == (
        "host h1 failed with host-lost (it stopped answering): waiting up to 600 s (tf_host_lost_wait) for it to "
        "answer again, then restarting it, attempt 1 of at most 2 restarts")
    assert tf_attempts.decision_name(decision) == "wait-for-host"
    # No restart left: no wait either.
    spent = decide(outcome(worker(0, "peer-lost"), lost_hosts=["h1"]), 2, 2, 100, 0, host_lost_wait=600)
    assert spent["restart"] is False and "wait_for_hosts" not in spent
    # Not in tf_restart_on: no wait.
    left_out = decide(outcome(worker(0, "peer-lost"), lost_hosts=["h1"]), 0, 2, 100, 0, ["killed"], 600)
    assert left_out["restart"] is False and "wait_for_hosts" not in left_out


def test_a_lost_host_decides_over_its_peers_peer_lost() -> None:
    decision = decide(outcome(worker(0, "peer-lost"), lost_hosts=["h1"]), 0, 1, 100, 0, ["peer-lost"])
    assert (decision["restart"], decision["cause"]) == (False, "host-lost")
    assert decision["why"].startswith("host h1 failed with host-lost")


def test_an_operator_stop_is_never_restarted_even_when_listed() -> None:
    decision = decide(outcome(worker(0, "operator", stopped_by="operator", returncode=143)), 0, 3, 100, 0,
                      list(CAUSES))
    assert (decision["restart"], decision["cause"]) == (False, "operator")
    assert "was stopped by an operator (stop.yml): no restart" in decision["why"]
    assert "tf_resume=true" in decision["why"]


def test_no_restart_left_names_the_setting() -> None:
    decision = decide(outcome(worker(1, "killed")), 2, 2, 100, 0)
    assert decision["restart"] is False
    assert "no restart is left (tf_restart_attempts=2)" in decision["why"]


def test_a_passed_deadline_leaves_no_time_for_a_restart() -> None:
    decision = decide(outcome(worker(1, "killed")), 0, 2, 300, 200)
    assert decision["restart"] is False
    assert "deadline (tf_job_timeout) has passed" in decision["why"]


def test_an_unread_status_is_no_workers_failure() -> None:
    decision = decide(outcome(status_problems=["host h1: the wait recorded no status"]), 0, 2, 100, 0)
    assert decision["restart"] is False
    assert "host h1: the wait recorded no status" in decision["why"]


def test_a_successful_attempt_is_not_restarted() -> None:
    assert decide({"ok": True}, 0, 2, 100, 0) == {
        "restart": False, "why": "the attempt succeeded", "cause": "completed", "culprit": None}


@pytest.mark.parametrize(("restart_on", "match"), [
    (["preempted", "flaky"], r"'flaky' is no cause"),
    ("preempted", r"must be a list"),
])  # fmt: skip
def test_an_unknown_cause_in_tf_restart_on_is_refused_by_name(restart_on: Any, match: str) -> None:
    with pytest.raises(AnsibleFilterError, match=match):
        decide(outcome(worker(1, "killed")), 0, 1, 100, 0, restart_on)


def test_the_default_of_tf_restart_on_is_the_contracts() -> None:
    import yaml

    from helpers import REPO

    defaults = yaml.safe_load((REPO / "roles/tf/defaults/main.yml").read_text())
    assert defaults["tf_restart_on"] == list(RESTARTABLE_CAUSES)
    assert defaults["tf_resume"] is False
    specs = yaml.safe_load((REPO / "roles/tf/meta/argument_specs.yml").read_text())["argument_specs"]
    option = specs["contract"]["options"]["tf_restart_on"]
    assert option["choices"] == list(CAUSES)
    assert option["default"] == list(RESTARTABLE_CAUSES)


def test_the_role_inputs_refuse_an_unknown_cause_naming_host_and_value() -> None:
    """tf_restart_on is checked against the contract's causes before anything runs."""
    import yaml

    from helpers import REPO
    from ansible_collections.tf_runbook.multiworker.plugins.action.tf_role_inputs import input_errors

    options = yaml.safe_load((REPO / "roles/tf/meta/argument_specs.yml").read_text())["argument_specs"]
    spec = {"tf_restart_on": options["contract"]["options"]["tf_restart_on"]}
    assert input_errors(spec, "h0", {"tf_restart_on": ["preempted", "job-error"]}, {}) == []
    errors = input_errors(spec, "h0", {"tf_restart_on": ["preempted"]}, {"h1": {"tf_restart_on": ["flaky"]}})
    assert len(errors) == 1 and errors[0].startswith("host h1: ") and "tf_restart_on" in errors[0]
    assert "flaky" in errors[0]


def test_a_lost_host_still_silent_after_the_wait_ends_the_run_with_the_resume_command() -> None:
    waited = decide(outcome(worker(0, "peer-lost"), lost_hosts=["h1"]), 0, 2, 100, 0, host_lost_wait=15)
    gave_up = tf_attempts.tf_attempts_gave_up(waited, ["h1"], 15, "lostgood")
    assert (gave_up["restart"], gave_up["wait_for_hosts"], gave_up["cause"]) == (False, [], "host-lost")
    assert gave_up["why"] == ("host h1 did not answer within 15 s (tf_host_lost_wait): no restart without it; once it "
                              "answers again, continue the run with -e tf_run_id=lostgood -e tf_resume=true")
    assert tf_attempts.decision_name(gave_up) == "give-up"
    with pytest.raises(AnsibleFilterError, match="hosts that stayed silent"):
        tf_attempts.tf_attempts_gave_up(waited, [], 15, "lostgood")
