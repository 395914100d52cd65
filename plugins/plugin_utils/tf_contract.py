# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the run's contract refuses beyond types and ranges, and its run id.

Shared by the filters that expose them to plays (tf_pattern_problem, tf_run_id_new,
tf_run_id_check) and by the contract's check in the action tf_role_inputs.
"""

from __future__ import annotations

import re
import secrets
from datetime import datetime, timezone
from typing import Any

from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import RUN_ID_RULE, run_id_is_safe


class RunIdError(ValueError):
    """A run id that is not safe as one path component."""


def pattern_problem(pattern: Any, name: str, host: str) -> str:
    """Why ``pattern`` (the value of variable ``name`` on ``host``) is not a regular
    expression Python compiles; empty when it is one (or empty)."""
    try:
        re.compile("" if pattern is None else str(pattern))
    except re.error as exc:
        return f"host {host}: {name} {pattern!r} is not a regular expression: {exc}"
    return ""


def new_run_id(now: datetime | None = None, token: str | None = None) -> str:
    """A sortable, unique run id: UTC timestamp plus a short random part."""
    now = now or datetime.now(timezone.utc)
    token = token or secrets.token_hex(3)
    return f"{now.strftime('%Y%m%dT%H%M%SZ')}-{token}"


def checked_run_id(run_id: Any) -> str:
    """``run_id`` when it is safe as one path component, else RunIdError."""
    text = "" if run_id is None else str(run_id)
    if not run_id_is_safe(text):
        raise RunIdError(f"tf_run_id {text!r} is not safe as a directory name: {RUN_ID_RULE}")
    return text
