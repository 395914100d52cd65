# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Wait for one host's workers, print their progress, and react to other hosts' failures.

The module of the same name runs on the worker host and reports its workers once (after
waiting briefly for news). This action runs on the controller and repeats it until the
host's workers have exited, one of them failed, the deadline passed, or another host
reported a failure. Hosts tell each other about a failure through a flag file on the
controller: a per-host retry loop alone cannot see that a peer failed, and TensorFlow
itself would keep a worker waiting for a missing peer for up to an hour.

Every module call renews the controller heartbeat on the host (when given): the
supervisors of a run tied to the controller stop once it goes stale. Without a flag file
the action checks once and returns (status.yml, and finding a run's workers to reattach).

Its options (the module's, and flag_file, until_joined and rounds that only this action
reads) are documented in plugins/modules/tf_worker_status.py.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from ansible.errors import AnsibleConnectionFailure
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import printable

display = Display()


def deadline_passed(deadline: Any, now: float) -> bool:
    """Whether ``deadline`` (controller epoch seconds; 0 or empty for none) has passed at
    ``now`` (the controller's clock). Judged here, on the controller: the deadline is a
    controller time, and a host's clock may be off by any amount."""
    try:
        value = float(deadline or 0)
    except (TypeError, ValueError):
        return False
    return value > 0 and now > value


def progress_lines(host: str, result: dict[str, Any], elapsed: float) -> list[str]:
    """One line per worker: state and its latest progress line (control characters escaped)."""
    lines = []
    for worker in result.get("workers", []):
        state = worker.get("state", "?")
        if state == "exited":
            rc = worker.get("returncode")
            state = "finished" if rc == 0 else f"FAILED rc={rc} ({printable(worker.get('reason'))})"
        latest = printable(worker.get("last_line") or "(no epoch yet)")
        lines.append(f"  [{elapsed:5.0f}s] {host} worker-{worker.get('index')}: {state}  {latest}")
    return lines


def read_flag(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def write_flag(path: str, data: dict[str, Any]) -> None:
    """Create the flag once; the first failure wins."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(data, handle)


class ActionModule(ActionBase):
    """Controller-side loop around the tf_worker_status module."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(
        (
            "flag_file", "rounds", "until_joined", "workers", "run_dir", "heartbeat_file", "wait", "deadline",
            "progress_pattern", "tail_lines",
        )  # fmt: skip
    )

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        flag_file = args.pop("flag_file", None)
        rounds = int(args.pop("rounds", 100000)) if flag_file else 1
        until_joined = bool(args.pop("until_joined", False))
        # The deadline is a controller time: it never goes to the host, whose clock may
        # differ; the host only reports, and the deadline is judged here.
        deadline = args.pop("deadline", 0)
        host = task_vars.get("inventory_hostname", "?") if task_vars else "?"
        started = time.monotonic()
        last_shown: list[str] = []
        status: dict[str, Any] = {}
        for _round in range(rounds):
            try:
                status = self._execute_module(
                    module_name="tf_runbook.multiworker.tf_worker_status",
                    module_args=args,
                    task_vars=task_vars,
                )
            except AnsibleConnectionFailure as exc:
                if flag_file:
                    write_flag(flag_file, {"host": host, "reason": f"host {host} unreachable: {exc}"})
                raise
            if status.get("failed"):
                return {**result, **status}
            status["deadline_passed"] = deadline_passed(deadline, time.time())
            # Print only news: the same lines with another elapsed time are not news.
            lines = progress_lines(host, status, time.monotonic() - started)
            news = [line.split("]", 1)[1] for line in lines]
            if news != last_shown:
                for line in lines:
                    display.display(line)
                last_shown = news
            if not flag_file:
                break
            if status.get("failed_workers"):
                write_flag(
                    flag_file,
                    {"host": host, "workers": status["failed_workers"], "reason": "worker failed"},
                )
                break
            if status.get("done") or status.get("deadline_passed"):
                break
            if until_joined and status.get("joined"):
                break
            peer = read_flag(flag_file)
            if peer is not None and peer.get("host") != host:
                status["peer_failed"] = peer
                display.display(
                    f"  {host}: stops waiting, {peer.get('host')} reported: {printable(peer.get('reason'))}"
                )
                break
        result.update(status)
        result["changed"] = False
        return result
