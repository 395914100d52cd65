"""Cluster-wide outcome of the wait phase, from every host's last status."""

from __future__ import annotations

from typing import Any

DOCUMENTATION = r"""
name: tf_wait_outcome
short_description: Decide whether a run is still healthy after the wait phase
description:
  - Input is every host of the play; the first argument the hosts still reachable, the
    second C(hostvars). Returns C(ok), C(failed_workers) (index, host, returncode,
    reason, log_tail), C(running_workers) and C(lost_hosts).
"""


def tf_wait_outcome(all_hosts: list[str], live_hosts: list[str], hostvars: Any) -> dict[str, Any]:
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
                "log_tail": worker.get("log_tail", []),
            }
            if worker.get("state") == "exited" and worker.get("returncode") != 0:
                failed.append(entry)
            elif worker.get("state") != "exited":
                running.append(entry)
    failed.sort(key=lambda w: w["index"])
    return {
        "ok": not failed and not lost and not deadline_hosts and not running,
        "failed_workers": failed,
        "running_workers": running,
        "lost_hosts": lost,
        "deadline_hosts": deadline_hosts,
    }


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Any]:
        return {"tf_wait_outcome": tf_wait_outcome}
