# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the controller prints of a host's workers (the wait's and the status's progress
lines, the logs' last lines): each worker's state in words, where its training stands
(module_utils/tf_progress.py), grouped per host where its workers agree, control characters
escaped so that a job's output cannot send escape sequences to the operator's terminal."""

from __future__ import annotations

import math
import time
from typing import Any

from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_causes import COORDINATOR_GONE_KIND, SERVER_STOPPED_KIND
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_progress import grouped, worker_progress
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import WORKER_EXITED, printable

# A wait prints a host's progress lines when they carry news (another epoch, state or
# phase), and at least this often while they do not (the time left moves on).
REPRINT_SECONDS = 60.0


def task_labels(types: Any) -> dict[int, str]:
    """Each worker's task (``chief:0``, ``worker:1``, ``ps:0``) by its index, from the
    task types of the cluster spec's workers in index order; none for the first shape (every
    worker a ``worker``), whose lines stay as they were."""
    kinds = [str(t) for t in types] if isinstance(types, list) else []
    if all(kind == "worker" for kind in kinds):
        return {}
    return {index: f"{kind}:{kinds[:index].count(kind)}" for index, kind in enumerate(kinds)}


def worker_state_text(worker: dict[str, Any]) -> str:
    state = worker.get("state", "?")
    if state != WORKER_EXITED:
        frozen = worker.get("frozen") if isinstance(worker.get("frozen"), dict) else {}
        # Without its seconds: the line is printed again only when it changes.
        ongoing = frozen.get("state") and frozen.get("until") is None
        return f"{state} ({printable(frozen['state'])})" if ongoing else str(state)
    rc = worker.get("returncode")
    cause = worker.get("cause") if isinstance(worker.get("cause"), dict) else {}
    if rc == 0:
        # A ParameterServerStrategy server ends well without finishing anything.
        return {SERVER_STOPPED_KIND: "stopped (by the runbook: the coordinator ended)",
                COORDINATOR_GONE_KIND: "stopped (by itself: the coordinator ended)"}.get(cause.get("kind"), "finished")  # fmt: skip
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
            "task": worker.get("task"),
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
