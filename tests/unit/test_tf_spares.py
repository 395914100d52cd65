"""Spare hosts and a smaller cluster: the spec's spares (tf_cluster), the takeover's new
cluster (tf_cluster_takeover), the decision after a host stayed lost (tf_attempts_takeover),
its record, and the preflight's refusal of a tf_min_workers above the cluster."""

from __future__ import annotations

from typing import Any

import pytest

import tf_cluster
from ansible_collections.tf_runbook.multiworker.plugins.filter import tf_attempts, tf_preflight
from tf_cluster import AnsibleFilterError, tf_cluster_spec, tf_cluster_takeover


def host(name: str, address: str, port: int = 2222, slots: int = 1, spare: bool = False) -> dict[str, Any]:
    return {"host": name, "address": address, "port": port, "slots": slots, "spare": spare}


def three_and_spares() -> dict[str, Any]:
    return tf_cluster_spec([
        host("h0", "10.0.0.1"), host("h1", "10.0.0.2", 2300, 2), host("h2", "10.0.0.3"),
        host("s0", "10.0.0.9", 2222, 1, True), host("s1", "10.0.0.8", 2400, 2, True),
    ])


def test_spares_get_no_index_and_leave_the_cluster_and_its_checksum_as_without_them() -> None:
    spec = three_and_spares()
    alone = tf_cluster_spec([host("h0", "10.0.0.1"), host("h1", "10.0.0.2", 2300, 2), host("h2", "10.0.0.3")])
    assert spec["cluster"] == alone["cluster"] and spec["checksum"] == alone["checksum"]
    assert [w["host"] for w in spec["workers"]] == ["h0", "h1", "h1", "h2"]
    assert [(s["host"], s["endpoints"]) for s in spec["spares"]] == [
        ("s0", ["10.0.0.9:2222"]), ("s1", ["10.0.0.8:2400", "10.0.0.8:2401"])]
    assert tf_cluster.tf_ports_on(spec, "s1") == [2400, 2401]
    assert tf_cluster.tf_ports_on(spec, "h1") == [2300, 2301]
    assert [e["index"] for e in tf_cluster.tf_cluster_endpoints(spec)] == [0, 1, 2, 3, "spare", "spare", "spare"]


def test_a_spare_that_is_also_a_worker_or_shares_a_workers_endpoint_is_refused() -> None:
    with pytest.raises(AnsibleFilterError, match=r"host h1: listed twice .*a worker or a spare, not both"):
        tf_cluster_spec([host("h0", "10.0.0.1"), host("h1", "10.0.0.2"), host("h1", "10.0.0.2", spare=True)])
    with pytest.raises(AnsibleFilterError, match=r"host s0: endpoint 10.0.0.1:2222 is also used by host h0"):
        tf_cluster_spec([host("h0", "10.0.0.1"), host("s0", "10.0.0.1", spare=True)])
    with pytest.raises(AnsibleFilterError, match="no worker hosts in the play"):
        tf_cluster_spec([host("s0", "10.0.0.9", spare=True)])


def test_a_spare_takes_the_lost_hosts_workers_with_their_indices() -> None:
    spec = tf_cluster_takeover(three_and_spares(), {"h1": "s1"}, [])
    assert [(w["index"], w["host"], w["endpoint"]) for w in spec["workers"]] == [
        (0, "h0", "10.0.0.1:2222"), (1, "s1", "10.0.0.8:2400"), (2, "s1", "10.0.0.8:2401"), (3, "h2", "10.0.0.3:2222")]
    assert [s["host"] for s in spec["spares"]] == ["s0"]
    assert spec["checksum"] != three_and_spares()["checksum"]
    # The chief's host replaced: the spare is the chief.
    assert tf_cluster_takeover(three_and_spares(), {"h0": "s0"}, [])["chief"] == "s0"


def test_a_spare_with_too_few_slots_or_not_a_spare_is_refused() -> None:
    with pytest.raises(AnsibleFilterError, match=r"host s0: a spare with tf_worker_slots=1 cannot take the place of h1"):
        tf_cluster_takeover(three_and_spares(), {"h1": "s0"}, [])
    with pytest.raises(AnsibleFilterError, match=r"host h2: not a spare of this cluster"):
        tf_cluster_takeover(three_and_spares(), {"h1": "h2"}, [])


def test_a_dropped_host_leaves_and_the_workers_after_it_move_down() -> None:
    spec = tf_cluster_takeover(three_and_spares(), {}, ["h1"])
    assert [(w["index"], w["host"]) for w in spec["workers"]] == [(0, "h0"), (1, "h2")]
    assert spec["size"] == 2


def lost(spec_hosts: list[str]) -> dict[str, Any]:
    return {"restart": True, "cause": "host-lost", "culprit": 1, "wait_for_hosts": spec_hosts,
            "decided_at": 1000.0, "why": "waiting"}  # fmt: skip


def test_the_first_spare_with_slots_enough_takes_the_place_and_the_output_names_it() -> None:
    decision = tf_attempts.tf_attempts_takeover(lost(["h1"]), ["h1"], three_and_spares(), 0, 600, "r1", 1600.4)
    takeover = decision["takeover"]
    assert decision["restart"] is False and decision["wait_for_hosts"] == []
    assert takeover["replaced"] == {"h1": "s1"} and takeover["dropped"] == []
    assert takeover["hosts"] == ["h0", "s1", "h2"] and takeover["spares"] == ["s1"] and takeover["source"] == "h0"
    assert takeover["lines"] == ["s1 takes the place of h1 (lost 600 s ago) as workers 1, 2"]
    assert tf_attempts.decision_name(decision) == "take-spare"


def test_the_lost_chiefs_checkpoint_comes_from_the_first_host_left() -> None:
    decision = tf_attempts.tf_attempts_takeover(lost(["h0"]), ["h0"], three_and_spares(), 0, 60, "r1", 1060)
    takeover = decision["takeover"]
    assert takeover["replaced"] == {"h0": "s0"} and takeover["hosts"] == ["s0", "h1", "h2"]
    assert takeover["source"] == "h1"
    assert "s0 takes the place of h0 (lost 60 s ago) as worker 0" in takeover["lines"]
    assert any("chief's host h0 is lost: its last checkpoint comes from the copy h1 holds" in line
               for line in takeover["lines"])


def test_without_a_spare_the_cluster_shrinks_only_down_to_tf_min_workers() -> None:
    spec = tf_cluster_spec([host("h0", "10.0.0.1"), host("h1", "10.0.0.2"), host("h2", "10.0.0.3")])
    shrunk = tf_attempts.tf_attempts_takeover(lost(["h1"]), ["h1"], spec, 2, 600, "r1", 1600)
    assert shrunk["takeover"]["dropped"] == ["h1"] and shrunk["takeover"]["hosts"] == ["h0", "h2"]
    assert tf_attempts.decision_name(shrunk) == "shrink"
    assert ("the cluster shrinks from 3 to 2 workers without h1 (no spare left; tf_min_workers 2): worker 2 on h2 "
            "becomes worker 1; the global batch shrinks with it") in shrunk["why"]
    gave_up = tf_attempts.tf_attempts_takeover(lost(["h1"]), ["h1"], spec, 3, 600, "r1", 1600)
    assert "takeover" not in gave_up and gave_up["restart"] is False
    assert tf_attempts.decision_name(gave_up) == "give-up"
    assert "2 workers would be fewer than tf_min_workers 3" in gave_up["why"]
    assert "-e tf_run_id=r1 -e tf_resume=true" in gave_up["why"]
    never = tf_attempts.tf_attempts_takeover(lost(["h1"]), ["h1"], spec, 0, 600, "r1", 1600)
    assert "no spare host (tf_spares), and the cluster does not shrink (tf_min_workers 0)" in never["why"]


def test_two_lost_hosts_one_spare_the_other_dropped_when_allowed() -> None:
    spec = tf_cluster_spec([host("h0", "10.0.0.1"), host("h1", "10.0.0.2"), host("h2", "10.0.0.3"),
                            host("s0", "10.0.0.9", spare=True)])
    decision = tf_attempts.tf_attempts_takeover(lost(["h1", "h2"]), ["h1", "h2"], spec, 2, 600, "r1", 1600)
    assert decision["takeover"]["replaced"] == {"h1": "s0"} and decision["takeover"]["dropped"] == ["h2"]
    assert decision["takeover"]["hosts"] == ["h0", "s0"]
    new = tf_cluster_takeover(spec, decision["takeover"]["replaced"], decision["takeover"]["dropped"])
    assert [(w["index"], w["host"]) for w in new["workers"]] == [(0, "h0"), (1, "s0")]


def test_the_record_keeps_the_takeover_and_its_line_says_who_took_whose_place() -> None:
    spec = three_and_spares()
    decision = tf_attempts.tf_attempts_takeover(lost(["h1"]), ["h1"], spec, 0, 600, "r1", 1600)
    outcome = {"ok": False, "failed_workers": [], "lost_hosts": ["h1"]}
    written = tf_attempts.tf_attempts_record(decision, outcome, 2, spec["workers"], "/runs/r1", 1600.0)
    record = written["record"]
    assert written["path"] == "/runs/r1/attempt-2.json"
    assert record["decision"] == "take-spare" and record["takeover"]["replaced"] == {"h1": "s1"}
    line = tf_attempts.tf_attempts_record_lines([record])[0]
    assert "decided: take-spare (s1 takes the place of h1 (lost 600 s ago) as workers 1, 2)" in line


def test_a_min_workers_above_the_cluster_is_refused_before_launch() -> None:
    problems = tf_preflight.tf_preflight_input_problems({"tf_min_workers": 4}, "h0", {}, 3)
    assert problems == ["host h0: tf_min_workers 4 is more than the cluster's 3 worker(s): the cluster could only "
                        "ever shrink below it (0: it never shrinks)"]
    assert tf_preflight.tf_preflight_input_problems({"tf_min_workers": 3}, "h0", {}, 3) == []


def test_a_spare_that_cannot_be_reached_is_named_as_a_spare() -> None:
    failure = {"index": "spare", "host": "s0", "address": "10.0.0.9", "port": 2222, "reason": "refused"}
    assert tf_preflight.tf_preflight_unreachable({"h0": [failure]}) == [
        "host h0 cannot reach spare host s0 at 10.0.0.9:2222: refused"]


def test_an_attempt_whose_host_was_lost_for_good_is_judged_by_the_workers_collected() -> None:
    from ansible_collections.tf_runbook.multiworker.plugins.module_utils import tf_verdict_checks, tf_verdict_run

    def worker(index: int, epochs: dict[int, dict[str, str]]) -> dict[str, Any]:
        return {"index": index, "series": {"epochs": epochs}}

    metrics = {1: {"loss": "0.5"}, 2: {"loss": "0.4"}}
    record = {"takeover": {"replaced": {"h1": "s0"}, "dropped": []},
              "workers": [{"index": 0, "host": "h0"}, {"index": 1, "host": "h1"}, {"index": 2, "host": "h2"}]}
    marks = tf_verdict_run.taken_over(record)
    assert marks == {"size": 3, "lost_for_good": [1]}
    attempt = {"attempt": 0, "workers": [worker(0, metrics), worker(2, metrics)], **marks}
    assert tf_verdict_checks.agreed_epochs(attempt, 3) == metrics
    # Without the record, a missing worker's epochs are not agreed on.
    assert tf_verdict_checks.agreed_epochs({"attempt": 0, "workers": attempt["workers"]}, 3) == {}
    # Nor when a worker that was not lost is missing too.
    assert tf_verdict_checks.agreed_epochs({**attempt, "workers": [worker(0, metrics)]}, 3) == {}
    assert tf_verdict_run.taken_over({"decision": "restart", "workers": []}) == {}


def test_a_host_lost_for_good_later_leaves_its_earlier_attempts_uncollected_too() -> None:
    from ansible_collections.tf_runbook.multiworker.plugins.module_utils import tf_verdict_run

    rows = [{"index": 0, "host": "h0"}, {"index": 1, "host": "h1"}]
    restart = {"decision": "restart", "workers": rows}
    takeover = {"decision": "take-spare", "takeover": {"replaced": {"h0": "s0"}, "dropped": []}, "workers": rows}
    gone = tf_verdict_run.lost_for_good_hosts(restart) | tf_verdict_run.lost_for_good_hosts(takeover)
    assert gone == {"h0"}
    assert tf_verdict_run.taken_over(restart, gone) == {"size": 2, "lost_for_good": [0]}
    assert tf_verdict_run.taken_over(restart) == {}


def test_the_timeline_keeps_the_workers_of_a_lost_host_as_the_record_names_them() -> None:
    from ansible_collections.tf_runbook.multiworker.plugins.module_utils import tf_verdict_summary

    lost = {"kind": "host-lost", "detail": "h1 stopped answering"}
    decided = {"culprit": {"index": 1, "host": "h1", "cause": lost}, "decision": "take-spare", "why": "s0 takes ...",
               "workers": [{"index": 0, "host": "h0", "cause": None}, {"index": 1, "host": "h1", "cause": lost}]}
    entry = tf_verdict_summary.attempt_timeline("/runs/r", {"attempt": 0, "workers": [], "source": None}, [], None,
                                                decided)
    assert entry["hosts"] == {"0": "h0", "1": "h1"}
    assert [(r["index"], r["host"], r["culprit"], r["has_log"]) for r in entry["workers"]] == [
        (0, "h0", False, False), (1, "h1", True, False)]
    assert entry["workers"][1]["cause"]["kind"] == "host-lost" and entry["decision"] == "take-spare"


def test_the_console_verdict_names_each_failed_attempts_recorded_culprit_and_decision() -> None:
    from ansible_collections.tf_runbook.multiworker.plugins.module_utils import tf_verdict_summary

    lost = {"kind": "host-lost", "detail": "node1 stopped answering"}
    summary = {
        "run_id": "r", "status": "succeeded", "attempt": 1, "workers": [], "metrics": {}, "checks": [],
        "attempts": [{"attempt": 0, "workers": [{"index": 0, "host": "node0", "exit_status": 1,
                                                  "cause": {"kind": "peer-lost"}, "exit_reason": ""}]},
                     {"attempt": 1, "workers": []}],
        "timeline": [{"attempt": 0, "culprit": 1, "culprit_host": "node1", "culprit_cause": lost,
                      "decision": "take-spare"}],
    }  # fmt: skip
    lines = tf_verdict_summary.table(summary)
    assert "attempt 0 failed: culprit worker 1 on node1: host-lost; decided: take-spare" in lines
    del summary["timeline"]
    assert "attempt 0 failed: worker 0 (node0) 1: peer-lost" in tf_verdict_summary.table(summary)


def test_a_spare_that_does_not_answer_is_passed_over_and_the_output_says_so() -> None:
    decision = tf_attempts.tf_attempts_takeover(lost(["h0"]), ["h0"], three_and_spares(), 0, 60, "r1", 1060, ["s1"])
    assert decision["takeover"]["replaced"] == {"h0": "s1"}
    assert decision["takeover"]["lines"][0] == "spare s0 did not answer"
    none = tf_attempts.tf_attempts_takeover(lost(["h0"]), ["h0"], three_and_spares(), 0, 60, "r1", 1060, [])
    assert "takeover" not in none
    assert "(spare s0, s1 did not answer; no spare left with enough slots" in none["why"]


def test_the_reports_attempt_card_says_stopped_for_an_operators_stop_and_shows_the_decision() -> None:
    from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils import tf_report_view

    def row(index: int, kind: str, status: int) -> dict[str, Any]:
        return {"index": index, "host": "h", "cause": {"kind": kind}, "exit_status": status, "launched_at": 1.0,
                "finished_at": 2.0, "epoch_at": {}}

    stopped = tf_report_view.timeline({"attempt": 0, "workers": [row(0, "operator", 137), row(1, "completed", 0)]},
                                      None, {})
    assert stopped["stopped"] is True and stopped["ok"] is False
    failed = tf_report_view.timeline({"attempt": 0, "workers": [row(0, "killed", 137)], "decision": "take-spare",
                                      "why": "s0 takes the place of h1"}, None, {})
    assert failed["stopped"] is False
    assert (failed["decision"], failed["why"]) == ("take-spare", "s0 takes the place of h1")
