# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the wait's action (tf_worker_wait) decides on the controller, apart from the host.

Hosts tell each other about a failure through the attempt's failure flag, a file in the
run's controller directory (the contract's ``tf_run.attempt_failed_flag``): the first host
that sees a failure or a stall writes it, every host stops waiting once it exists. The
stall watchdog keeps one record per host in the attempt's progress directory
(``tf_run.attempt_progress_dir``) and reads them all (``StallWatch``, over tf_activity).
Deadlines are judged on the controller's clock, a host's times converted with its clock
read in the same module run; the host's files come with the wait only while the run is
healthy (``bring_bundle``).

A ParameterServerStrategy run ends when its chief (the coordinator, the runbook's index
0) ends: the wait of the chief's host records that it exited 0 in the attempt's
coordinator record (``tf_run.attempt_coordinator_ended``, beside the failure flag, and
only while no host flagged a failure), and every host's wait that still has live workers
(the servers, which never end by themselves) then stops them through tf_worker_stop,
recorded as stopped by the runbook with the cause ``stopped`` (``server_stop_args``).
A failure flagged first wins: a server that died before the chief ended is a failure.
"""

from __future__ import annotations

import glob
import json
import os
from typing import Any

from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_activity import (
    progress_record,
    seconds_without_progress,
    stall_detail,
)
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_causes import (
    SERVER_STOPPED_KIND,
    SERVER_STOPPED_REASON,
)
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import (
    WORKER_EXITED,
    attempt_coordinator_ended,
    attempt_failed_flag,
    attempt_progress_dir,
    make_private_dirs,
    read_json,
)


def attempt_paths(controller_dir: str, attempt: Any) -> tuple[str, str]:
    """The attempt's failure flag and progress directory in the run's controller directory,
    by the contract's names."""
    number = int(attempt or 0)
    return os.path.join(controller_dir, attempt_failed_flag(number)), os.path.join(controller_dir, attempt_progress_dir(number))


# Seconds between the SIGTERM and the SIGKILL of a server's stop: the server ends at once
# on the runbook's SIGTERM (tf_ps_server.py).
SERVER_STOP_GRACE = 10.0
# The index of the chief (the coordinator) in the runbook's numbering.
COORDINATOR_INDEX = 0


def coordinator_path(controller_dir: str, attempt: Any) -> str:
    """The attempt's coordinator record in the run's controller directory."""
    return os.path.join(controller_dir, attempt_coordinator_ended(int(attempt or 0)))


def coordinator_ended(status: dict[str, Any]) -> bool:
    """Whether this host's status shows the chief (the coordinator) exited 0."""
    return any(
        w.get("index") == COORDINATOR_INDEX and w.get("state") == WORKER_EXITED and w.get("returncode") == 0
        for w in status.get("workers") or [] if isinstance(w, dict)
    )  # fmt: skip


def servers_left(status: dict[str, Any]) -> list[int]:
    """The indices of this host's workers that have not exited: once the coordinator
    ended, the servers to stop."""
    return [w["index"] for w in status.get("workers") or [] if isinstance(w, dict) and w.get("state") != WORKER_EXITED]


def server_stop_args(run_dir: str) -> dict[str, Any]:
    """tf_worker_stop's options for the stop of a host's servers at the run's end."""
    return {"run_dir": run_dir, "grace": SERVER_STOP_GRACE, "stopped_by": "runbook", "cause": SERVER_STOPPED_KIND,
            "reason": SERVER_STOPPED_REASON}  # fmt: skip


def bring_bundle(status: dict[str, Any], flag: dict[str, Any] | None, detached: bool) -> bool:
    """Whether the bundle the module packed (``status["bundle"]``) comes to the controller
    now: every worker of the host exited 0, no host flagged a failure or a stall (``flag``,
    the attempt's flag as read after the call) and the wait is not detached. Any other
    ending leaves the files to the collect, which fetches them after the stop."""
    return (
        isinstance(status.get("bundle"), dict) and not detached and flag is None
        and bool(status.get("done")) and not status.get("failed_workers") and not status.get("stalled")
    )  # fmt: skip


def deadline_passed(deadline: Any, now: float) -> bool:
    """Whether ``deadline`` (controller epoch seconds; 0 or empty for none) has passed at
    ``now`` (the controller's clock). Judged here, on the controller: the deadline is a
    controller time, and a host's clock may be off by any amount."""
    try:
        value = float(deadline or 0)
    except (TypeError, ValueError):
        return False
    return value > 0 and now > value


def to_controller_clock(host_time: Any, host_now: Any, controller_now: float) -> float:
    """A time of the host's clock (``host_time``; 0 or empty for none, kept 0) on the
    controller's: as far from ``controller_now`` as it is from ``host_now``, the host's
    clock read at the same moment."""
    try:
        value = float(host_time or 0)
        host = float(host_now)
    except (TypeError, ValueError):
        return 0.0
    return controller_now + (value - host) if value > 0 else 0.0


def read_flag(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def write_flag(path: str, data: dict[str, Any]) -> bool:
    """Create the flag once (0600, in directories it creates 0700); the first failure
    wins. Whether this call created it."""
    make_private_dirs(os.path.dirname(path))
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(data, handle)
    return True


def write_private_json(path: str, data: Any) -> None:
    """Replace ``path`` at once with ``data`` as JSON, readable by its owner only."""
    make_private_dirs(os.path.dirname(path))
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(data, handle, sort_keys=True)
    os.replace(tmp, path)


def read_records(stall_dir: str) -> list[dict[str, Any]]:
    """Every host's progress record of the attempt."""
    records = (read_json(path) for path in sorted(glob.glob(os.path.join(glob.escape(stall_dir), "*.json"))))
    return [r for r in records if r and isinstance(r.get("last_progress_at"), (int, float))]


class StallWatch:
    """This host's part of the run's stall watchdog: its own record in ``stall_dir``
    (kept from an earlier wait of the same attempt, a detached run reattached), every
    host's read at each check."""

    def __init__(self, stall_dir: str, host: str, timeout: int) -> None:
        self.stall_dir = stall_dir
        self.host = host
        self.timeout = timeout
        self.path = os.path.join(stall_dir, f"{host}.json")
        self.record = read_json(self.path)

    def check(self, workers: list[dict[str, Any]], now: float) -> tuple[float, str] | None:
        """Record this check's progress (progress lines and CPU use); when no host's
        record shows progress for the timeout (the run is stalled), the seconds without
        and what was seen (tf_activity.stall_detail), else None."""
        updated = progress_record(self.record, self.host, workers, now)
        if updated != self.record:
            write_private_json(self.path, updated)
            self.record = updated
        records = read_records(self.stall_dir)
        seconds = seconds_without_progress(records, now)
        if seconds is None or seconds < self.timeout:
            return None
        return seconds, stall_detail(records, now, self.timeout)
