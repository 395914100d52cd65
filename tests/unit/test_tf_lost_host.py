"""A lost host is blamed, not the survivors TensorFlow failed because of it (issue 24,
point 22, as tests/integration/test_faults.py's lost-host test saw it: worker 0 on node0,
whose collective ops aborted once node2 stopped sending heartbeats, was named the culprit)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from report_runs import build, endpoints, write_worker

PEER_LOST = {"kind": "peer-lost", "detail": "The following tasks are unhealthy (stopped sending heartbeats)"}
JOB_ERROR = {"kind": "job-error", "detail": "the job raised ValueError", "exception": "ValueError", "message": "bad"}


def lost_node2_run(run: Path, w0_cause: dict[str, Any]) -> None:
    """Three workers on three hosts; node2 was lost (nothing of it collected); worker 0
    ended with ``w0_cause`` first, worker 1 with peer-lost after it."""
    hosts, cluster = endpoints(3, hosts=3)
    write_worker(run, hosts[0], 0, cluster, epochs=range(1, 3), complete=False, exit_status=1,
                 finished_at=1_764_000_010.0, exit_extra={"cause": w0_cause})  # fmt: skip
    write_worker(run, hosts[1], 1, cluster, epochs=range(1, 3), complete=False, exit_status=1,
                 finished_at=1_764_000_011.0, exit_extra={"cause": PEER_LOST})  # fmt: skip


WAIT = {"ok": False, "failed_workers": [], "lost_hosts": ["node2"]}


def test_the_lost_host_is_blamed_not_the_survivors_whose_peer_was_lost(tmp_path: Path) -> None:
    run = tmp_path / "lost"
    lost_node2_run(run, PEER_LOST)
    summary = build(run, 3, {"wait": WAIT})
    assert summary["status"] == "failed"
    assert summary["reason"] == "host(s) node2 became unreachable during the run"
    [attempt] = summary["timeline"]
    assert attempt["culprit"] is None and not any(row["culprit"] for row in attempt["workers"])


def test_a_survivor_that_failed_by_itself_is_still_the_culprit(tmp_path: Path) -> None:
    run = tmp_path / "own"
    lost_node2_run(run, JOB_ERROR)
    summary = build(run, 3, {"wait": WAIT})
    assert summary["reason"].startswith("worker 0 on host node0 failed first: job-error")
    [attempt] = summary["timeline"]
    assert [row["culprit"] for row in attempt["workers"]] == [True, False]


@pytest.mark.parametrize("wait", [{}, {"ok": False, "failed_workers": [], "lost_hosts": []}])
def test_without_a_lost_host_a_peer_lost_worker_stays_the_culprit(tmp_path: Path, wait: dict[str, Any]) -> None:
    """Nothing else to blame: the first worker that failed is named, whatever its cause."""
    run = tmp_path / "nohost"
    lost_node2_run(run, PEER_LOST)
    summary = build(run, 3, {"wait": wait})
    assert summary["reason"].startswith("worker 0 on host node0 failed first: peer-lost")
