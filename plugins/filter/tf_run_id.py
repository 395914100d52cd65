"""Run ids: one per playbook run, the same on every host, safe as a directory name."""

from __future__ import annotations

import secrets
from datetime import datetime, timezone
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import RUN_ID_RULE, run_id_is_safe


def tf_run_id_new(
    _value: Any = None, now: datetime | None = None, token: str | None = None
) -> str:
    """A sortable, unique run id: UTC timestamp plus a short random part.

    ``_value`` is the filter's input and is ignored (``'' | tf_run_id_new``).
    """
    now = now or datetime.now(timezone.utc)
    token = token or secrets.token_hex(3)
    return f"{now.strftime('%Y%m%dT%H%M%SZ')}-{token}"


def tf_run_id_check(run_id: Any) -> str:
    """Return ``run_id`` when it is safe as one path component, else raise."""
    text = "" if run_id is None else str(run_id)
    if not run_id_is_safe(text):
        raise AnsibleFilterError(f"tf_run_id {text!r} is not safe as a directory name: {RUN_ID_RULE}")
    return text


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Any]:
        return {"tf_run_id_new": tf_run_id_new, "tf_run_id_check": tf_run_id_check}
