"""Run ids: one per playbook run, the same on every host, safe as a directory name."""

from __future__ import annotations

import re
import secrets
from datetime import datetime, timezone
from typing import Any

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - lets the unit tests run without ansible
    class AnsibleFilterError(Exception):  # type: ignore[no-redef]
        """Stand-in when ansible is not importable."""


DOCUMENTATION = r"""
name: tf_run_id_new
short_description: Make or check a run id
description:
  - C(tf_run_id_new) returns a sortable UTC timestamp plus a short random part; its input
    is ignored.
  - C(tf_run_id_check) returns its input when it is safe as one path component on every
    host and on the controller, and raises naming the value otherwise.
"""

EXAMPLES = r"""
- name: Settle the run id
  ansible.builtin.set_fact:
    tf_run_id: "{{ (tf_run_id or ('' | tf_run_id_new)) | tf_run_id_check }}"
  run_once: true
"""

# A run id becomes a directory name on every host and on the controller.
RUN_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


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
    if not RUN_ID_PATTERN.fullmatch(text) or text in {".", ".."} or ".." in text:
        raise AnsibleFilterError(
            f"tf_run_id {text!r} is not safe as a directory name: use 1-64 letters, digits, "
            "'.', '_' or '-', starting with a letter or digit, without '..'"
        )
    return text


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Any]:
        return {"tf_run_id_new": tf_run_id_new, "tf_run_id_check": tf_run_id_check}
