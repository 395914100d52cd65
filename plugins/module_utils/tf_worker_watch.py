# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The wait's window on a host (module tf_worker_wait): read the workers, renew the
controller heartbeat, and sleep until news or the window's end; then, when every worker of
the host exited 0, pack its collect bundle (the wait that also collects, issue 40).

A module run waits on the host (``watch``) rather than the controller polling blindly: each
module run takes CPU from the training on a small host.
"""

from __future__ import annotations

import os
import re
import tarfile
import time
from typing import Callable

from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_bundle import pack_run
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import EXIT_FILE, WORKER_EXITED
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_worker_records import all_exited, counts_failed, snapshot

# How often the wait reads the workers' records (state, log, supervisor).
POLL_SECONDS = 0.25
# How often, between two reads, it looks for a new exit record (one stat per worker): a
# worker's exit is seen within this, and the last one ends the call at once.
EXIT_POLL_SECONDS = 0.05


def worth_returning(first: list[dict], current: list[dict], until_joined: bool) -> bool:
    """Whether the wait must hear now rather than at the end of its window.

    A worker that failed (exited other than 0) since the call began, and, for a detached
    run, every worker having joined. A worker that exits 0 while others of the host still
    run is not news worth a return: the others of a healthy run end with it, and the
    call returns by itself once all have exited (an early return there cost one more
    module run before the verdict). Progress (a new epoch line, a worker running or
    joining) also waits for the window's end: each early return starts the module again
    on the host, which took CPU from the training itself (on a host that trains two
    workers on two cores, the job ran about 15 % slower than launched by hand).
    """
    exited = {w["index"] for w in first if w["state"] == WORKER_EXITED}
    if any(w["state"] == WORKER_EXITED and w["index"] not in exited and w.get("returncode") != 0 for w in current):
        return True
    return bool(until_joined and current and all(w["joined"] for w in current))


def exit_records(workers: list[dict]) -> frozenset:
    """The worker directories that hold an exit record: one stat each, cheap enough to ask
    every `EXIT_POLL_SECONDS` while the job trains beside it."""
    return frozenset(entry["dir"] for entry in workers if os.path.exists(os.path.join(entry["dir"], EXIT_FILE)))


def wait_for_news(workers: list[dict], seen: frozenset, until: float) -> frozenset:
    """Sleep until monotonic time ``until``, or until a worker directory gains an exit
    record not in ``seen``; the directories with one now."""
    current = exit_records(workers)
    while current == seen and time.monotonic() < until:
        time.sleep(max(0.0, min(EXIT_POLL_SECONDS, until - time.monotonic())))
        current = exit_records(workers)
    return current


def packed_bundle(run_dir: str, collect: dict, current: list[dict]) -> dict:
    """With every worker of ``current`` exited 0 (or an evaluator whose end does not fail
    the run: counts_failed), the host's collect bundle (pack_run's result, as ``bundle``),
    or why it could not be packed (``bundle_error``); else nothing."""
    if not current or any(w["state"] != WORKER_EXITED or counts_failed(w) for w in current):
        return {}
    try:
        return {"bundle": pack_run(run_dir, collect["patterns"], collect["artifacts"], collect["max_mb"])}
    except (OSError, tarfile.TarError) as exc:
        return {"bundle_error": f"cannot pack the collect bundle in {run_dir}: {exc}"}


def touch(path: str) -> None:
    """Renew the heartbeat: create the file or update its modification time."""
    with open(path, "a", encoding="utf-8"):
        pass
    os.utime(path, None)


def watch(workers: list[dict], progress: re.Pattern, tail_lines: int, marks: dict, window: float,
          until_joined: bool, beat: Callable[[], None]) -> list[dict]:  # fmt: skip
    """The workers' entries at the end of a window of ``window`` seconds, or earlier when
    every worker exited or there is news worth returning (``worth_returning``); ``beat``
    (the heartbeat's renewal) is called before every reading."""
    beat()
    first = snapshot(workers, progress, tail_lines, marks)
    current = first
    exits = exit_records(workers)
    stop_at = time.monotonic() + max(0.0, window)
    while time.monotonic() < stop_at and not all_exited(current):
        exits = wait_for_news(workers, exits, min(stop_at, time.monotonic() + POLL_SECONDS))
        beat()
        current = snapshot(workers, progress, tail_lines, marks)
        if worth_returning(first, current, until_joined):
            break
    return current
