"""Print each worker's latest progress line while the runbook waits for training."""

from __future__ import annotations

import time
from typing import Any

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = r"""
name: tf_progress
type: aggregate
short_description: Show training progress during the wait phase
description:
  - On every retry and on the final result of the C(tf_worker_status) task, prints one
    line per worker of that host with its state and its latest progress (epoch) line,
    instead of the bare "retrying" the default output shows.
requirements:
  - enable in ansible.cfg with callbacks_enabled = tf_progress
"""

WATCHED_ACTIONS = {"tf_worker_status"}


def progress_lines(host: str, result: dict[str, Any], now: float | None = None) -> list[str]:
    """Human-readable lines for one host's status result."""
    lines = []
    for worker in result.get("workers", []):
        state = worker.get("state", "?")
        if state == "exited":
            rc = worker.get("returncode")
            state = "finished" if rc == 0 else f"FAILED rc={rc} ({worker.get('reason')})"
        latest = worker.get("last_line") or "(no epoch yet)"
        lines.append(f"  {host} worker-{worker.get('index')}: {state:<8} {latest}")
    return lines


class CallbackModule(CallbackBase):
    """Aggregate callback: adds lines next to whatever the stdout callback prints."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "tf_progress"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self._started = time.monotonic()

    def _show(self, result: Any) -> None:
        if result._task.action.split(".")[-1] not in WATCHED_ACTIONS:
            return
        elapsed = time.monotonic() - self._started
        for line in progress_lines(result._host.get_name(), result._result):
            self._display.display(f"{line}   [{elapsed:6.0f}s]")

    def v2_runner_retry(self, result: Any) -> None:
        self._show(result)

    def v2_runner_on_ok(self, result: Any) -> None:
        self._show(result)
