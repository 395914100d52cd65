"""Whether a failed attempt is followed by another one."""

from __future__ import annotations

from typing import Any

DOCUMENTATION = r"""
name: tf_attempts_restart
short_description: Decide whether to restart the run after a failed attempt
description:
  - Input is the wait's outcome (C(tf_wait_outcome)); arguments the attempt just run
    (0 first), C(tf_restart_attempts), the controller's time and the run's deadline
    (epoch seconds, 0 for none).
  - True only for a failed attempt with restarts left and time left, whose hosts are all
    reachable and whose failure is a worker's own. A lost host cannot rejoin, a passed
    deadline ends the run, an operator's stop (C(stopped_by) C(operator)) is never
    turned into a restart, and a host whose status the wait could not read
    (C(status_problems)) is no worker's failure either.
"""


def tf_attempts_restart(outcome: dict[str, Any], attempt: int, attempts: int, now: float, deadline: float) -> bool:
    """Restart after this attempt?"""
    if outcome.get("ok") or int(attempt) >= int(attempts):
        return False
    if outcome.get("lost_hosts") or outcome.get("deadline_hosts") or outcome.get("status_problems"):
        return False
    if outcome.get("stopped_by_operator") or any(
        w.get("stopped_by") == "operator" for w in outcome.get("failed_workers") or []
    ):
        return False
    return not (float(deadline) and float(now) >= float(deadline))


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Any]:
        return {"tf_attempts_restart": tf_attempts_restart}
