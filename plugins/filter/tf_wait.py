"""Cluster-wide outcome of the wait phase, from every host's last status."""

from __future__ import annotations

from typing import Any

DOCUMENTATION = r"""
name: tf_wait_outcome
short_description: Decide whether a run is still healthy after the wait phase
description:
  - Input is every host of the play; the first argument the hosts still reachable, the
    second C(hostvars). Returns C(ok), C(failed_workers) (index, host, returncode,
    reason, stopped_by, log_tail), C(running_workers), C(lost_hosts), C(stopped_by_operator)
    (a worker was stopped by an operator's stop.yml: never restarted) and C(detached).
  - With O(detached) true (the third argument), workers that still run are fine once
    every one of them has joined the cluster: the playbook then leaves the run to itself.
"""


def tf_wait_outcome(
    all_hosts: list[str], live_hosts: list[str], hostvars: Any, detached: bool = False
) -> dict[str, Any]:
    """Summarise the wait: a failed or lost worker anywhere makes the run not ok."""
    failed: list[dict[str, Any]] = []
    running: list[dict[str, Any]] = []
    deadline_hosts: list[str] = []
    lost = [host for host in all_hosts if host not in live_hosts]
    for host in live_hosts:
        status = hostvars[host].get("tf_wait_status") or {}
        if status.get("deadline_passed") and not status.get("done"):
            deadline_hosts.append(host)
        for worker in status.get("workers", []):
            entry = {
                "index": worker["index"],
                "host": host,
                "returncode": worker.get("returncode"),
                "reason": worker.get("reason"),
                "stopped_by": worker.get("stopped_by"),
                "log_tail": worker.get("log_tail", []),
            }
            if worker.get("state") == "exited" and worker.get("returncode") != 0:
                failed.append(entry)
            elif worker.get("state") != "exited":
                running.append({**entry, "joined": bool(worker.get("joined"))})
    failed.sort(key=lambda w: w["index"])
    left_running = detached and bool(running) and all(w["joined"] for w in running)
    ok = not failed and not lost and not deadline_hosts and (not running or left_running)
    return {
        "ok": ok,
        "detached": ok and left_running,
        "stopped_by_operator": any(w["stopped_by"] == "operator" for w in failed),
        "failed_workers": failed,
        "running_workers": running,
        "lost_hosts": lost,
        "deadline_hosts": deadline_hosts,
    }


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Any]:
        return {"tf_wait_outcome": tf_wait_outcome}
