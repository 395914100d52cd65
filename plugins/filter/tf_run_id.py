"""Run ids: one per playbook run, the same on every host, safe as a directory name."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_contract import (
    RunIdError,
    checked_run_id,
    new_run_id,
)


def tf_run_id_new(
    _value: Any = None, now: datetime | None = None, token: str | None = None
) -> str:
    """A sortable, unique run id: UTC timestamp plus a short random part.

    ``_value`` is the filter's input and is ignored (``'' | tf_run_id_new``).
    """
    return new_run_id(now, token)


def tf_run_id_check(run_id: Any) -> str:
    """Return ``run_id`` when it is safe as one path component, else raise."""
    try:
        return checked_run_id(run_id)
    except RunIdError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Any]:
        return {"tf_run_id_new": tf_run_id_new, "tf_run_id_check": tf_run_id_check}
