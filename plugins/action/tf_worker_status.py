# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Wait for one host's workers, print their progress, and react to other hosts' failures.

The module of the same name runs on the worker host and reports its workers once (after
waiting briefly for news). This action runs on the controller and repeats it until the
host's workers have exited, one of them failed, the deadline passed, or another host
reported a failure. Hosts tell each other about a failure through a flag file on the
controller: a per-host retry loop alone cannot see that a peer failed, and TensorFlow
itself would keep a worker waiting for a missing peer for up to an hour.

Every module call renews the controller heartbeat on the host (when asked): the
supervisors of a run tied to the controller stop once it goes stale. Without the run's
controller directory the action checks once and returns (status.yml, logs.yml, and
finding a run's workers to reattach). The attempt's flag and progress directory are named
by the contract (tf_run.attempt_failed_flag, tf_run.attempt_progress_dir) in the run's
controller directory.

The wait's last status run of a healthy host also brings the host's files: with the
collect's options (``collect``), the module call that ends with every worker of the host
exited 0 packs the collect bundle, and this action fetches and unpacks it under the run's
controller directory, ``<host>/``, exactly as the collect's action does (one
implementation, module_utils/tf_bundle.py), so that the collect phase costs no module run
on such a host. It does so only while the run is healthy: not for a detached wait, nor
once another host has flagged a failure (the collect fetches everything after a failure).

It is also the run's stall watchdog (tf_stall_timeout), cluster-wide although each host's
wait runs on its own: every host records, on the controller's clock, when one of its
workers last made progress, in a file of its own in the attempt's stall directory, and
reads every host's record at each round. Progress is a new progress line, or a job that
used CPU (more than tf_activity.BUSY_CPU_SHARE of a core over a window of the module's
successive readings), or whose GPUs were busy (tf_activity.BUSY_GPU_SHARE, where the host
has nvidia-smi): a stall is silence and idleness together. When no worker of the run
made progress of either kind for stall_timeout seconds since the wait began or the latest
progress anywhere, it writes the attempt's failure flag with the cause ``stalled`` and a
reason that says what was seen (tf_activity.stall_detail): every host's wait stops, as
for a failed worker.

Each worker of the status gets ``frozen``: since when (controller clock) its job's main
process is seen stopped (T, t) or in uninterruptible sleep (D), at every check of this
wait, and until when, for a freeze that ended up to a minute ago (a frozen job's stop
continues it before it ends it), or null; tf_wait_outcome lists such workers
(``frozen_workers``).

Times a host records on its own clock (the supervisors' ``deadline_at``) are converted to
the controller's with the host's clock read in the same module call (``now``).

Its options (the module's, and flag_file, until_joined and rounds that only this action
reads) are documented in plugins/modules/tf_worker_status.py.
"""

from __future__ import annotations

import glob
import json
import math
import os
import tarfile
import time
from typing import Any

from ansible.errors import AnsibleConnectionFailure, AnsibleError
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_activity import (
    frozen_entry,
    frozen_since,
    progress_record,
    seconds_without_progress,
    stall_detail,
)
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_bundle import receive
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_progress import grouped, worker_progress
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import (
    WORKER_EXITED,
    attempt_failed_flag,
    attempt_progress_dir,
    make_private_dirs,
    printable,
    read_json,
)

display = Display()

# A wait prints a host's progress lines when they carry news (another epoch, state or
# phase), and at least this often while they do not (the time left moves on).
REPRINT_SECONDS = 60.0

# The options only this action reads (documented in plugins/modules/tf_worker_status.py).
ACTION_ONLY = ("controller_dir", "attempt", "rounds", "until_joined", "deadline", "stall_timeout", "show_logs", "log_workers")


def attempt_paths(controller_dir: str, attempt: Any) -> tuple[str, str]:
    """The attempt's failure flag and progress directory in the run's controller directory,
    by the contract's names."""
    number = int(attempt or 0)
    return os.path.join(controller_dir, attempt_failed_flag(number)), os.path.join(controller_dir, attempt_progress_dir(number))


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


def worker_state_text(worker: dict[str, Any]) -> str:
    state = worker.get("state", "?")
    if state != WORKER_EXITED:
        frozen = worker.get("frozen") if isinstance(worker.get("frozen"), dict) else {}
        # Without its seconds: the line is printed again only when it changes.
        ongoing = frozen.get("state") and frozen.get("until") is None
        return f"{state} ({printable(frozen['state'])})" if ongoing else str(state)
    rc = worker.get("returncode")
    if rc == 0:
        return "finished"
    cause = worker.get("cause") if isinstance(worker.get("cause"), dict) else {}
    kind = f"{printable(cause['kind'])}, " if cause.get("kind") else ""
    return f"FAILED rc={rc} ({kind}{printable(worker.get('reason'))})"


def progress_entries(result: dict[str, Any], controller_now: float) -> list[dict[str, Any]]:
    """Each worker of a status as tf_progress.grouped takes it: its state text, where its
    training stands (tf_progress.worker_progress over the module's ``progress``, on the
    host's clock, the finishing time on the controller's) and its latest progress line."""
    host_now = _float(result.get("now"), controller_now)
    entries = []
    for worker in result.get("workers", []):
        ended = worker.get("finished_at") if worker.get("state") == WORKER_EXITED else None
        progress = worker_progress(worker.get("progress"), host_now, controller_now, worker.get("started_at"),
                                   _float(ended, host_now) if ended is not None else None)  # fmt: skip
        if progress is not None:
            progress = {**progress, "text": printable(progress["text"])}
        entries.append({
            "index": worker.get("index"),
            "state": worker_state_text(worker),
            "progress": progress,
            "fallback": printable(worker.get("last_line") or "(no progress line yet)"),
        })  # fmt: skip
    return entries


def _float(value: Any, default: float) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return default
    return number if math.isfinite(number) else default


def progress_lines(host: str, result: dict[str, Any], elapsed: float | None,
                   controller_now: float | None = None) -> tuple[list[str], list[Any]]:
    """The lines to print for a host's status: one per worker, or one for the host's
    workers when they agree (tf_progress.grouped): state, then the epoch N of M, its
    metrics, the time per epoch, the elapsed time, the time left and the finishing time
    (UTC), or, before the first epoch ended, the latest progress line (control characters
    escaped); after ``[<elapsed>s]``, the seconds since this wait began (none for a single
    check). With them, the news they carry (times aside), to print only what changed."""
    now = time.time() if controller_now is None else controller_now
    clock = f"[{elapsed:5.0f}s] " if elapsed is not None else ""
    lines, keys = [], []
    for line in grouped(progress_entries(result, now)):
        lines.append(f"  {clock}{host} {line['who']}: {line['state']}  {line['text']}")
        keys.append((line["who"], line["key"]))
    return lines, keys


def log_lines(host: str, result: dict[str, Any], indices: list[int] | None) -> list[str]:
    """Each chosen worker's last log lines, each prefixed ``[<index> <host>]`` and escaped."""
    lines = []
    for worker in result.get("workers", []):
        if indices is not None and worker.get("index") not in indices:
            continue
        prefix = f"[{worker.get('index')} {host}]"
        tail = worker.get("log_tail") or []
        hidden = worker.get("log_hidden") or 0
        quiet = f"; {hidden} TensorFlow C++ log line(s) hidden (-e tf_logs_filter=false shows them)" if hidden else ""
        lines.append(f"{prefix} ({worker_state_text(worker)}; {len(tail)} last line(s) of its log{quiet})")
        lines.extend(f"{prefix} {printable(line)}" for line in tail)
    return lines


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


class ActionModule(ActionBase):
    """Controller-side loop around the tf_worker_status module."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(
        ACTION_ONLY
        + ("workers", "run_dir", "heartbeat", "collect", "wait", "progress_pattern", "progress_marks", "tail_lines", "log_filter")
    )

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        options = {name: args.pop(name, None) for name in ACTION_ONLY}
        controller_dir = os.path.expanduser(str(options["controller_dir"])) if options["controller_dir"] else ""
        flag_file, stall_dir = attempt_paths(controller_dir, options["attempt"]) if controller_dir else (None, None)
        rounds = int(options["rounds"] or 100000) if flag_file else 1
        until_joined = bool(options["until_joined"])
        if until_joined or not flag_file:
            # A detached wait leaves the run running; a single check ends nothing.
            args.pop("collect", None)
        # The deadline is a controller time: it never goes to the host, whose clock may
        # differ; the host only reports, and the deadline is judged here.
        deadline = options["deadline"] or 0
        stall_timeout = int(options["stall_timeout"] or 0)
        host = task_vars.get("inventory_hostname", "?") if task_vars else "?"
        # tf_stall_timeout 0: no watchdog, no record.
        watching = bool(flag_file and stall_dir and stall_timeout > 0)
        watch = StallWatch(stall_dir, host, stall_timeout) if watching else None
        started = time.monotonic()
        last_shown: list[Any] = []
        last_printed = time.monotonic()
        status: dict[str, Any] = {}
        # Per worker, since when (controller clock) its job is seen frozen.
        frozen: dict[str, dict[str, Any]] = {}
        # This worker process's parent is ansible-playbook's main process. A worker is a
        # session of its own, so a SIGKILL of ansible-playbook (the OOM killer, kill -9)
        # leaves it running: it must then stop renewing the controller heartbeat, or the
        # supervisors would never see the controller go (tf_controller_timeout).
        controller = os.getppid()
        for _round in range(rounds):
            if os.getppid() != controller:
                return {**result, **status, "failed": True, "controller_gone": True,
                        "msg": f"host {host}: the wait stopped: ansible-playbook (pid {controller}) ended, so "
                               "nothing renews the controller heartbeat any more"}
            try:
                status = self._execute_module(
                    module_name="tf_runbook.multiworker.tf_worker_status",
                    module_args=args,
                    task_vars=task_vars,
                )
            except AnsibleConnectionFailure as exc:
                if flag_file:
                    write_flag(flag_file, {"host": host, "cause": "host-lost", "reason": f"host {host} unreachable: {exc}"})
                raise
            if status.get("failed"):
                return {**result, **status}
            now = time.time()
            status["clock_offset"] = now - float(status.get("now") or now)
            if isinstance(status.get("launch"), dict):
                launch = status["launch"]
                launch["deadline_at_controller"] = to_controller_clock(launch.get("deadline_at"), status.get("now"), now)
            args["progress_marks"] = status.get("progress_marks") or {}
            frozen = frozen_since(frozen, status.get("workers", []), now)
            for worker in status.get("workers", []):
                worker["frozen"] = frozen_entry(frozen, worker, now)
            status["deadline_passed"] = deadline_passed(deadline, now)
            if options["show_logs"]:
                indices = [int(i) for i in options["log_workers"]] if options["log_workers"] is not None else None
                for line in log_lines(host, status, indices):
                    display.display(line)
            else:
                # Print only news: the same epoch with other times is not news, but a
                # long epoch's times are shown again every REPRINT_SECONDS.
                lines, news = progress_lines(host, status, time.monotonic() - started if flag_file else None, now)
                if news != last_shown or time.monotonic() - last_printed >= REPRINT_SECONDS:
                    for line in lines:
                        display.display(line)
                    last_shown, last_printed = news, time.monotonic()
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
            stall = watch.check(status.get("workers", []), now) if watch else None
            if stall is not None:
                stalled_for, detail = stall
                flag = {"host": host, "cause": "stalled", "reason": detail, "seconds": round(stalled_for), "workers": []}
                # Another host may have flagged first (a stall too, or a failure): then its
                # flag is read below, as any peer's.
                if write_flag(flag_file, flag):
                    status["stalled"] = {"seconds": round(stalled_for), "detail": detail}
                    display.display(f"  {host}: the run is stalled: {detail}")
                    break
            peer = read_flag(flag_file)
            if peer is not None and peer.get("host") != host:
                status["peer_failed"] = peer
                display.display(
                    f"  {host}: stops waiting, {peer.get('host')} reported: {printable(peer.get('reason'))}"
                )
                break
        if flag_file and bring_bundle(status, read_flag(flag_file), until_joined):
            status.update(self._bring(status["bundle"], os.path.join(controller_dir, host), host))
        status.pop("bundle", None)
        result.update(status)
        result["changed"] = False
        return result

    def _bring(self, bundle: dict[str, Any], dest: str, host: str) -> dict[str, Any]:
        """Fetch and unpack the host's bundle under ``dest`` (nothing to fetch when no file
        matched): ``collected`` as the collect's action reports it; ``bundle_error`` when it
        could not be brought (the collect fetches the host's files then)."""
        try:
            updated = receive(self._connection.fetch_file, bundle, dest) if bundle.get("bundle") else []
        except (AnsibleError, OSError, tarfile.TarError) as exc:
            display.warning(f"host {host}: the wait could not bring its files ({exc}); the collect fetches them")
            return {"bundle_error": f"cannot bring the collect bundle {bundle.get('bundle')}: {exc}"}
        return {
            "collected": {
                "files": bundle.get("files", []), "left_out": bundle.get("left_out", []),
                "truncated": bundle.get("truncated", []), "updated": updated, "dest": dest,
            }
        }
