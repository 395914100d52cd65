"""Cluster-wide outcome of the wait phase, from every host's last status."""

from __future__ import annotations

import re
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_causes import (
    cause_of,
    evaluator_lost_text,
    optional_evaluator_hosts,
)
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import WORKER_EXITED
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_worker_records import counts_failed
from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_contract import pattern_problem

# What a host's status must carry for the outcome to be decided from it.
STATUS_FIELDS = ("workers", "done", "deadline_passed")
WORKER_FIELDS = ("index", "state")


def status_problem(host: str, status: Any) -> str | None:
    """Why ``status`` cannot decide this host's part of the outcome, or None."""
    if not isinstance(status, dict) or not status:
        return f"host {host}: the wait recorded no status"
    missing = [name for name in STATUS_FIELDS if name not in status]
    if missing:
        return f"host {host}: the wait's status has no {', '.join(missing)}"
    if not isinstance(status["workers"], list):
        return f"host {host}: the wait's status gives workers as {type(status['workers']).__name__}, not a list"
    for position, worker in enumerate(status["workers"]):
        if not isinstance(worker, dict):
            return f"host {host}: worker entry {position} of the wait's status is not a mapping"
        needed = WORKER_FIELDS + (("returncode",) if worker.get("state") == WORKER_EXITED else ())
        missing = [name for name in needed if name not in worker]
        if missing:
            return f"host {host}: worker entry {position} of the wait's status has no {', '.join(missing)}"
    return None


def stall_of(statuses: list[Any]) -> dict[str, Any] | None:
    """The stall the wait found: a host's own finding, else the stall flag a host stopped
    for; None when the run did not stall."""
    for status in statuses:
        stalled = status.get("stalled") if isinstance(status, dict) else None
        if isinstance(stalled, dict):
            return {"seconds": stalled.get("seconds"), "detail": stalled.get("detail")}
    for status in statuses:
        peer = status.get("peer_failed") if isinstance(status, dict) else None
        if isinstance(peer, dict) and peer.get("cause") == "stalled":
            return {"seconds": peer.get("seconds"), "detail": peer.get("reason")}
    return None


def unreachable(status: Any) -> bool:
    """A host's wait result that says the host could not be reached."""
    return isinstance(status, dict) and bool(status.get("unreachable"))


# What a worker's ``frozen`` (added by the tf_worker_status action) may say.
FROZEN_KINDS = ("stopped", "uninterruptible")


def frozen_of(host: str, worker: dict[str, Any]) -> dict[str, Any] | None:
    """The entry of ``frozen_workers`` for a worker of ``host`` whose job the wait saw
    frozen (stopped, or in uninterruptible sleep): still at its last check, or until
    shortly before it (the stop that follows its peers' failure continues it before it
    ends it); None else."""
    frozen = worker.get("frozen")
    if not isinstance(frozen, dict) or frozen.get("state") not in FROZEN_KINDS:
        return None
    try:
        seconds = float(frozen.get("seconds") or 0)
    except (TypeError, ValueError):
        seconds = 0.0
    return {"index": worker["index"], "host": host, "state": frozen["state"], "seconds": seconds}


def tf_wait_outcome(
    all_hosts: list[str], live_hosts: list[str], statuses: dict[str, Any], detached: bool = False,
    workers: list[dict[str, Any]] | None = None, evaluator_required: bool = True,
) -> dict[str, Any]:
    """Summarise the wait: a failed or lost worker anywhere, a stall, or a host whose
    status is missing or incomplete, makes the run not ok. Each failed worker carries its
    ``cause``; ``causes`` lists their kinds, sorted, each once. ``frozen_workers`` lists
    the workers alive and frozen (stopped, or in uninterruptible sleep) when the wait
    ended, with how long they were seen so: facts for the culprit rule, not a verdict.
    A lost host that runs only the sidecar evaluator (by ``workers``, the cluster spec's),
    not ``evaluator_required``, is in ``evaluator_lost`` (``host``, ``workers``, ``text``)
    instead of ``lost_hosts``: reported, never the run's failure."""
    if not isinstance(statuses, dict):
        raise TypeError(f"tf_wait_outcome: statuses must map host to status, not {type(statuses).__name__}")
    failed: list[dict[str, Any]] = []
    running: list[dict[str, Any]] = []
    frozen: list[dict[str, Any]] = []
    deadline_hosts: list[str] = []
    problems: list[str] = []
    # A host that left the play, or whose wait could not reach it (the wait ignores its
    # unreachability, to keep it in the play): lost.
    lost = [host for host in all_hosts if host not in live_hosts or unreachable(statuses.get(host))]
    optional = optional_evaluator_hosts(workers or [], evaluator_required)
    evaluator_lost = [{"host": h, "workers": optional[h], "text": evaluator_lost_text(h)} for h in lost if h in optional]
    lost = [host for host in lost if host not in optional]
    gone = lost + [entry["host"] for entry in evaluator_lost]
    for host in [h for h in live_hosts if h not in gone]:
        status = statuses.get(host)
        problem = status_problem(host, status)
        if problem:
            problems.append(problem)
            continue
        if status["deadline_passed"] and not status["done"]:
            deadline_hosts.append(host)
        for worker in status["workers"]:
            entry = {
                "index": worker["index"],
                "host": host,
                "returncode": worker.get("returncode"),
                "reason": worker.get("reason"),
                "stopped_by": worker.get("stopped_by"),
                "finished_at": worker.get("finished_at"),
                "log_tail": worker.get("log_tail", []),
            }
            # The sidecar evaluator's end fails the run only when required (counts_failed).
            if counts_failed(worker):
                failed.append({**entry, "cause": cause_of(worker)})
            elif worker["state"] != WORKER_EXITED:
                running.append({**entry, "joined": bool(worker.get("joined"))})
            seen = frozen_of(host, worker)
            if seen is not None:
                frozen.append(seen)
    failed.sort(key=lambda w: w["index"])
    frozen.sort(key=lambda w: w["index"])
    stalled = stall_of([statuses.get(host) for host in live_hosts if host not in gone])
    left_running = detached and bool(running) and all(w["joined"] for w in running)
    ok = (
        not failed and not lost and not deadline_hosts and not problems and not stalled
        and (not running or left_running)
    )  # fmt: skip
    return {
        "ok": ok,
        "detached": ok and left_running,
        "stopped_by_operator": any(w["stopped_by"] == "operator" for w in failed),
        "failed_workers": failed,
        "running_workers": running,
        "frozen_workers": frozen,
        "lost_hosts": lost,
        "evaluator_lost": evaluator_lost,
        "deadline_hosts": deadline_hosts,
        "status_problems": problems,
        "stalled": stalled,
        "causes": sorted({w["cause"]["kind"] for w in failed if w["cause"]}),
    }


# What the collect reads of a host's files brought by the wait (the action's `collected`).
COLLECTED_FIELDS = ("files", "left_out", "truncated")


def tf_wait_collected(statuses: dict[str, Any], outcome: dict[str, Any]) -> dict[str, Any]:
    """Host to what the wait's last status run brought of its files (``files``,
    ``left_out``, ``truncated``, as the collect reports them), for the hosts whose status
    has it; none unless ``outcome`` (tf_wait_outcome of the same statuses) is ok and not
    detached: after a failure, a stall or a detached wait the collect fetches every host."""
    if not isinstance(statuses, dict):
        raise AnsibleFilterError(f"tf_wait_collected: statuses must map host to status, not {type(statuses).__name__}")
    if not isinstance(outcome, dict) or outcome.get("ok") is not True or outcome.get("detached"):
        return {}
    brought = {}
    for host, status in statuses.items():
        collected = status.get("collected") if isinstance(status, dict) else None
        if isinstance(collected, dict) and all(isinstance(collected.get(name), list) for name in COLLECTED_FIELDS):
            brought[host] = {name: collected[name] for name in COLLECTED_FIELDS}
    return brought


def tf_log_workers(value: Any) -> list[int] | None:
    """The worker indices logs.yml is asked for (``-e tf_logs_workers=0,2``, a list, or one
    index); None (every worker) for an empty value. Anything else is refused by value."""
    if value is None or value == "" or value == []:
        return None
    items = value if isinstance(value, list) else re.split(r"\s*,\s*", str(value).strip())
    indices = []
    for item in items:
        text = str(item).strip()
        if isinstance(item, bool) or not text.isdigit():
            raise AnsibleFilterError(
                f"tf_logs_workers must be worker indices separated by commas (0,2), got {value!r}"
            )
        indices.append(int(text))
    return sorted(set(indices))


def tf_pattern_problem(pattern: Any, name: str, host: str) -> str:
    """Why ``pattern`` (the value of variable ``name`` on ``host``) is not a regular
    expression Python compiles; empty when it is one (or empty)."""
    return pattern_problem(pattern, name, host)


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Any]:
        return {
            "tf_wait_outcome": tf_wait_outcome,
            "tf_wait_collected": tf_wait_collected,
            "tf_log_workers": tf_log_workers,
            "tf_pattern_problem": tf_pattern_problem,
        }
