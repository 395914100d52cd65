# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A collected run as the verdict reads it: loaded from disk and parsed once.

``load_run`` reads one attempt's worker directories (``<run_dir>/<host>/worker-<i>/``, or
``<host>/retry-<n>/worker-<i>/``); ``parse_attempt`` reads every worker's log once, in
every registered output format (``tf_metrics``), and picks the attempt's source of
metrics. Every check, the summary and the report's timeline work on that parsed data.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_metrics import (
    empty_series,
    format_named,
    parse_worker,
    small_int,
    source_of,
)
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import (
    CONFIG_FILE,
    EXIT_FILE,
    LOG_FILE,
    RETRY_PREFIX,
    WORKER_PREFIX,
    attempt_dir_of,
    attempt_record_file,
    cluster_tasks,
    read_json,
)

WORKER_DIR = re.compile(rf"^{WORKER_PREFIX}(\d{{1,9}})$")
RETRY_DIR = re.compile(rf"^{RETRY_PREFIX}(\d{{1,9}})$")


def as_dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def marker_inside(marker_name: str) -> bool:
    """The chief's marker must be a relative path that stays inside the worker directory."""
    if not marker_name or os.path.isabs(marker_name):
        return False
    return ".." not in marker_name.split("/")


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except (OSError, ValueError):
        return None


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def attempts_in(run_dir: str) -> list[int]:
    """Attempts present in a collected run: 0 (``worker-*``), n (``retry-<n>/``)."""
    found = set()
    for host in _listdir(run_dir):
        host_dir = os.path.join(run_dir, host)
        if not os.path.isdir(host_dir):
            continue
        for name in _listdir(host_dir):
            if WORKER_DIR.match(name):
                found.add(0)
            match = RETRY_DIR.match(name)
            if match:
                found.add(int(match.group(1)))
    return sorted(found)


def load_run(run_dir: str, marker_name: str, attempt: int = 0) -> list[dict[str, Any]]:
    """Every worker of one attempt, sorted by index and host: ``index``, ``host``,
    ``dir``, ``log`` (text or None), ``exit`` and ``config`` (dicts or None) and
    ``marker`` (whether the chief's marker is in its directory)."""
    workers = []
    for host in _listdir(run_dir):
        host_dir = attempt_dir_of(os.path.join(run_dir, host), attempt)
        if not os.path.isdir(host_dir):
            continue
        for name in _listdir(host_dir):
            match = WORKER_DIR.match(name)
            if not match:
                continue
            wdir = os.path.join(host_dir, name)
            workers.append(
                {
                    "index": int(match.group(1)),
                    "host": host,
                    "dir": wdir,
                    "log": _read(os.path.join(wdir, LOG_FILE)),
                    "exit": read_json(os.path.join(wdir, EXIT_FILE)),
                    "config": read_json(os.path.join(wdir, CONFIG_FILE)),
                    "marker": marker_inside(marker_name) and os.path.exists(os.path.join(wdir, marker_name)),
                }
            )
    return sorted(workers, key=lambda w: (w["index"], w["host"]))


def parse_attempt(workers: list[dict[str, Any]], attempt: int = 0) -> dict[str, Any]:
    """One attempt parsed once: each worker gains ``parsed`` (its contract and the series
    of every format) and ``series`` (the series of the attempt's source). Returns the
    attempt: its number, workers, ``source`` (a format name or None) and ``contract``
    (whether any worker printed a contract line)."""
    for worker in workers:
        if "parsed" not in worker:
            worker["parsed"] = parse_worker(worker.get("log") or "")
    source = source_of(w["parsed"] for w in workers)
    for worker in workers:
        worker["series"] = worker["parsed"]["series"].get(source) if source else None
        if worker["series"] is None:
            worker["series"] = empty_series()
    fmt = format_named(source)
    return {
        "attempt": attempt,
        "workers": workers,
        "source": source,
        "label": fmt.label if fmt else None,
        "contract": any(w["parsed"]["contract"]["indices"] for w in workers),
    }


def load_attempts(run_dir: str, marker_name: str) -> list[dict[str, Any]]:
    """Every attempt of the run, loaded and parsed once (attempt 0 alone when the run
    directory holds nothing), each with what the decisions' records say of its cluster
    (``taken_over``)."""
    attempts = [parse_attempt(load_run(run_dir, marker_name, n), n) for n in attempts_in(run_dir) or [0]]
    records = [read_json(os.path.join(run_dir, attempt_record_file(a["attempt"]))) for a in attempts]
    gone = set().union(*(lost_for_good_hosts(record) for record in records))
    for attempt, record in zip(attempts, records):
        attempt.update(taken_over(record, gone))
    return attempts


def lost_for_good_hosts(record: Any) -> set[str]:
    """The hosts whose place a spare took, or that left the cluster, after the attempt of
    ``record`` (an ``attempt-<n>.json``)."""
    takeover = as_dict(as_dict(record).get("takeover"))
    return {str(h) for h in list(as_dict(takeover.get("replaced"))) + list(takeover.get("dropped") or [])}


def taken_over(record: Any, gone: set[str] | None = None) -> dict[str, Any]:
    """What an attempt's decision record says of its cluster where hosts were lost for
    good in this attempt or a later one (``gone``; this record's own by default): the
    attempt's size (``size``) and its workers on those hosts (``lost_for_good``), whose
    files no collect can bring: their epochs are judged from the other workers of the
    attempt. Empty where no host of the attempt was lost for good."""
    record = as_dict(record)
    gone = lost_for_good_hosts(record) if gone is None else gone
    rows = [as_dict(w) for w in record.get("workers") or []]
    lost = sorted(int(w["index"]) for w in rows if str(w.get("host")) in gone and isinstance(w.get("index"), int))
    return {"size": len(rows), "lost_for_good": lost} if lost else {}


def cluster_list(worker: dict[str, Any]) -> list[str] | None:
    """Every task's endpoint of the worker's TF_CONFIG cluster in the runbook's order
    (chief, worker, ps): its worker list where it has only workers."""
    cluster = as_dict(as_dict(worker.get("config")).get("cluster"))
    try:
        endpoints = [endpoint for _kind, _n, endpoint in cluster_tasks(cluster)]
    except ValueError:
        return None
    if endpoints and all(isinstance(e, str) for e in cluster.get("worker") or []):
        return endpoints
    return None


def task_of(worker: dict[str, Any]) -> tuple[str, int | None]:
    """The task type and index of the worker's TF_CONFIG (``worker`` when it names none)."""
    task = as_dict(as_dict(worker.get("config")).get("task"))
    index = task.get("index")
    return str(task.get("type") or "worker"), index if isinstance(index, int) and not isinstance(index, bool) else None


def typed_cluster(workers: list[dict[str, Any]]) -> bool:
    """Whether the attempt's TF_CONFIGs name task types other than ``worker``."""
    return any(set(as_dict(as_dict(w.get("config")).get("cluster"))) - {"worker"} or task_of(w)[0] != "worker"
               for w in workers)  # fmt: skip


def is_server_worker(worker: dict[str, Any]) -> bool:
    """A ParameterServerStrategy server: a ps or worker task of a cluster with ps tasks."""
    cluster = as_dict(as_dict(worker.get("config")).get("cluster"))
    return bool(cluster.get("ps")) and task_of(worker)[0] in ("ps", "worker")


def cluster_of(workers: list[dict[str, Any]]) -> list[str]:
    """The cluster list most workers were given (the first seen among equals)."""
    counts: dict[str, int] = {}
    lists: dict[str, list[str]] = {}
    for worker in workers:
        cluster = cluster_list(worker)
        if cluster:
            key = json.dumps(cluster)
            lists.setdefault(key, cluster)
            counts[key] = counts.get(key, 0) + 1
    if not counts:
        return []
    return lists[max(counts, key=lambda key: counts[key])]


def port_of(endpoint: str) -> int | None:
    return small_int(endpoint.rsplit(":", 1)[1]) if ":" in endpoint else None


FRAME = re.compile(r"^(?P<where>.+?:\d+) in (?P<function>.+)$")


def stacks_of(exit_: dict[str, Any] | None) -> dict[str, Any] | None:
    """exit.json's ``stacks`` (captured before a stall or deadline stop), or None."""
    stacks = as_dict(exit_).get("stacks")
    return stacks if isinstance(stacks, dict) else None


def stuck_in(stacks: dict[str, Any] | None) -> str | None:
    """Where the job's own code was stuck (``load_batch (train.py:41)``), from its
    innermost own frame; None unless the stacks say ``where: own-code``."""
    if not stacks or stacks.get("where") != "own-code":
        return None
    frames = [f for f in stacks.get("frames") or [] if isinstance(f, str)]
    if not frames:
        return None
    match = FRAME.match(frames[-1])
    return f"{match.group('function')} ({match.group('where')})" if match else frames[-1]
