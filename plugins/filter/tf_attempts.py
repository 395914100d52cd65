"""Whether a failed attempt is followed by another one."""

from __future__ import annotations

from typing import Any


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
