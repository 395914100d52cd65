"""Spare hosts (issue 37): a host lost for good is replaced by a spare of group tf_spares
inside the same playbook, the lost chief's host too, with the chief's checkpoint from a
host that holds a copy of it; the record names who took whose place."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable

import paramiko
from faults import remote_pid, wait_for_log, wait_until
from nshosts import NamespaceHosts
from test_long_runs import RUN, no_process_left, said, settings, train_through
from test_multihost import Runbook

# Six epochs of 40 steps of the default job: a few seconds each, time to cut a host mid-run.
ARGS = ["--epochs=6", "--steps-per-epoch=40"]


def attempt_record(book: Runbook, run_id: str, attempt: int) -> dict[str, Any]:
    return json.loads((book.runs / run_id / f"attempt-{attempt}.json").read_text())


def log_of(book: Runbook, host: int, path: str) -> str:
    rc, out, _ = book.hosts.run(host, f"cat {path} 2>/dev/null")
    return out if rc == 0 else ""


def ended_on(book: Runbook, host: int, run_id: str) -> bool:
    """No process of the run on ``host``; False while the host does not answer yet (its
    network was just plugged back in)."""
    try:
        return book.run_processes(host, run_id) == []
    except (OSError, paramiko.SSHException):
        return False


def spare_book(hosts: NamespaceHosts, tmp_path: Path, worker_python: str, port: int, spares: int = 1,
               args: list[str] | None = None) -> Runbook:  # fmt: skip
    """node0 and node1 train; the hosts after them are the spares."""
    extra = settings(worker_python, tf_restart_attempts=3, tf_peer_timeout=10, tf_controller_timeout=20,
                     tf_host_lost_wait=15, tf_train_args=args or ARGS)
    return Runbook(hosts, tmp_path, port=port, groupvars=extra, spares=spares)


def test_a_host_lost_for_good_is_replaced_by_a_spare_and_the_run_succeeds(
    make_ns_hosts: Callable[..., NamespaceHosts], tmp_path: Path, worker_python: str
) -> None:
    """node1 is cut off for good after epoch 2, and the first spare, node2, is down too;
    after tf_host_lost_wait the second spare, node3, takes node1's place as worker 1 in the
    same playbook, gets the chief's checkpoint and resumes from it; the run succeeds and
    the record names the takeover."""
    hosts = make_ns_hosts(count=4)
    book = spare_book(hosts, tmp_path, worker_python, 2510, spares=2)
    try:
        returncode, out = train_through(book, "spare", lambda: (
            wait_for_log(hosts, 1, f"{RUN}/spare/worker-1/worker.log", "epoch=2 "), hosts.cut_network(2),
            hosts.cut_network(1)))
        assert returncode == 0, said(out, "spare")
        assert re.search(r"spare node2 did not answer; node3 takes the place of node1 \(lost \d+ s ago\) as worker 1",
                         out), said(out, "spare")
        assert re.search(r"Copied the chief's checkpoint \(node0: \d+ files, [\d.]+ MB\) host to host to "
                         r"node3 \(sent once by node0", out), said(out, "spare")
        record = attempt_record(book, "spare", 0)
        assert (record["decision"], record["culprit"]["host"], record["culprit"]["cause"]["kind"]) == (
            "take-spare", "node1", "host-lost"), record
        assert record["takeover"]["replaced"] == {"node1": "node3"}
        # The spare ran worker 1 of attempt 1, resumed from the chief's copy.
        log = log_of(book, 3, f"{RUN}/spare/retry-1/worker-1/worker.log")
        assert re.search(r"^worker=1 resumed_from_epoch=[2-5]$", log, re.M), log[-3000:]
        assert not book.exists(0, f"{RUN}/spare/retry-2"), "more than one restart"
        summary = book.summary("spare")
        assert summary["status"] == "succeeded", summary["checks"]
        assert [w["host"] for w in summary["workers"]] == ["node0", "node3"]
        assert sorted(summary["metrics"], key=int) == [str(e) for e in range(1, 7)]
        timeline = summary["timeline"]
        assert [(a["attempt"], a["decision"]) for a in timeline[:1]] == [(0, "take-spare")], timeline
        assert [w["host"] for w in timeline[-1]["workers"]] == ["node0", "node3"], timeline[-1]
        for host in (0, 3):
            assert book.run_processes(host, "spare") == [], f"processes of the run left on node{host}"
    finally:
        hosts.restore_network(1)
        hosts.restore_network(2)
    # node1's worker of the lost attempt ends by itself (its peers and the controller went quiet).
    wait_until(lambda: ended_on(book, 1, "spare"), 120, "node1's worker of the lost attempt ending")
    wait_until(lambda: ended_on(book, 2, "spare"), 60, "node2 answering again, with nothing of the run")
    no_process_left(book, "spare")
    # status.yml shows the spare's worker and the recorded takeover; the spare that never
    # took a place shows nothing and is no error.
    status = book.play("playbooks/status.yml", extra={"tf_run_id": "spare"})
    assert status.returncode == 0, status.stdout[-4000:]
    assert "decided: take-spare (spare node2 did not answer; node3 takes the place of node1" in status.stdout, (
        status.stdout[-4000:])
    assert re.search(r"node3[^\n]*worker[- ]1", status.stdout), status.stdout[-4000:]


def test_the_lost_chiefs_host_is_replaced_with_the_checkpoint_another_host_holds(
    make_ns_hosts: Callable[..., NamespaceHosts], tmp_path: Path, worker_python: str
) -> None:
    """Worker 1 is killed after epoch 1 (a restart: the chief's checkpoint is copied to
    node1); then node0, the chief's host, is cut off for good during the restarted attempt.
    The spare node2 becomes worker 0 with the chief's checkpoint from node1's copy, and the
    run succeeds from it."""
    hosts = make_ns_hosts(count=3)
    # Ten epochs: a kill that lands late (a loaded machine) still leaves the restarted
    # attempt epochs to train when its chief's host is cut.
    book = spare_book(hosts, tmp_path, worker_python, 2520, args=["--epochs=10", "--steps-per-epoch=40"])

    def faults() -> None:
        wait_for_log(hosts, 1, f"{RUN}/chiefgone/worker-1/worker.log", "epoch=1 ")
        assert hosts.run(1, f"kill -9 {remote_pid(hosts, 1, f'{RUN}/chiefgone/worker-1')}")[0] == 0
        # The first epoch the restarted attempt trains, whichever it resumed from (under load
        # the kill can land an epoch or two after epoch 1, and the resume follows it).
        wait_for_log(hosts, 0, f"{RUN}/chiefgone/retry-1/worker-0/worker.log", "worker=0 epoch=")
        hosts.cut_network(0)

    try:
        returncode, out = train_through(book, "chiefgone", faults)
        assert returncode == 0, said(out, "chiefgone")
        assert re.search(r"node2 takes the place of node0 \(lost \d+ s ago\) as worker 0", out), said(out, "chiefgone")
        assert "the chief's host node0 is lost: its last checkpoint comes from the copy node1 holds" in out, said(
            out, "chiefgone")
        record = attempt_record(book, "chiefgone", 1)
        assert (record["decision"], record["culprit"]["host"]) == ("take-spare", "node0"), record
        log = log_of(book, 2, f"{RUN}/chiefgone/retry-2/worker-0/worker.log")
        assert re.search(r"^worker=0 resumed_from_epoch=[1-9]$", log, re.M), log[-3000:]
        summary = book.summary("chiefgone")
        assert summary["status"] == "succeeded", summary["checks"]
        assert [w["host"] for w in summary["workers"]] == ["node2", "node1"]
        for host in (1, 2):
            assert book.run_processes(host, "chiefgone") == [], f"processes of the run left on node{host}"
    finally:
        hosts.restore_network(0)
    wait_until(lambda: ended_on(book, 0, "chiefgone"), 120, "node0's worker of the lost attempt ending")


def test_without_a_spare_tf_min_workers_lets_the_cluster_shrink_and_the_run_succeed(
    make_ns_hosts: Callable[..., NamespaceHosts], tmp_path: Path, worker_python: str
) -> None:
    """Three workers, no spare, tf_min_workers 2: node1 is cut off for good after epoch 2;
    worker 2 on node2 becomes worker 1 of a two-worker cluster, the output says that the
    global batch shrinks, and the run succeeds."""
    hosts = make_ns_hosts(count=3)
    extra = settings(worker_python, tf_restart_attempts=2, tf_peer_timeout=10, tf_controller_timeout=20,
                     tf_host_lost_wait=15, tf_min_workers=2, tf_train_args=ARGS)
    book = Runbook(hosts, tmp_path, port=2530, groupvars=extra)
    try:
        returncode, out = train_through(book, "shrink", lambda: (
            wait_for_log(hosts, 1, f"{RUN}/shrink/worker-1/worker.log", "epoch=2 "), hosts.cut_network(1)))
        assert returncode == 0, said(out, "shrink")
        assert ("the cluster shrinks from 3 to 2 workers without node1 (no spare left; tf_min_workers 2): worker 2 on "
                "node2 becomes worker 1; the global batch shrinks with it") in out, said(out, "shrink")
        assert attempt_record(book, "shrink", 0)["decision"] == "shrink"
        log = log_of(book, 2, f"{RUN}/shrink/retry-1/worker-1/worker.log")
        assert re.search(r"^worker=1 resumed_from_epoch=[2-5]$", log, re.M), log[-3000:]
        summary = book.summary("shrink")
        assert summary["status"] == "succeeded", summary["checks"]
        assert [w["host"] for w in summary["workers"]] == ["node0", "node2"]
        for host in (0, 2):
            assert book.run_processes(host, "shrink") == [], f"processes of the run left on node{host}"
    finally:
        hosts.restore_network(1)
    wait_until(lambda: ended_on(book, 1, "shrink"), 120, "node1's worker of the lost attempt ending")
