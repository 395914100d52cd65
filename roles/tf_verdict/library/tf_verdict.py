#!/usr/bin/python
"""Judge a finished run from the files the collect phase fetched to the controller."""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: tf_verdict
short_description: Check a collected run and write its summary.json
description:
  - Reads C(<run_dir>/<host>/worker-<index>/) as fetched by the tf_collect role
    (C(worker.log), C(exit.json), C(tf_config.json) and the chief's marker, if any) and
    runs the run's checks, each with the workers it concerns.
  - Writes C(<run_dir>/summary.json) and returns the same data with a printable table.
  - Runs on the controller; never fails itself, the caller decides.
options:
  run_dir:
    description: The run's directory on the controller.
    type: path
    required: true
  run_id:
    description: The run id.
    type: str
    required: true
  marker:
    description: File name of the chief's completion marker.
    type: str
    default: multiworker-complete.txt
  expected_size:
    description: Cluster size the run was launched with; 0 to take it from the TF_CONFIGs.
    type: int
    default: 0
  context:
    description: Extra data recorded as is in summary.json (for example the wait outcome).
    type: dict
    default: {}
"""

RETURN = r"""
summary:
  description: The content of summary.json.
  type: dict
  returned: always
table:
  description: Lines of the verdict table.
  type: list
  returned: always
"""

LINE = re.compile(r"^worker=(?P<index>\d+)\s+(?P<rest>.*)$")
PAIR = re.compile(r"(?P<key>[A-Za-z_][A-Za-z0-9_.]*)=(?P<value>\S+)")


def parse_log(text: str) -> dict[str, Any]:
    """Pull the metrics contract out of one worker's log.

    Returns the indices the worker printed, its header values (``cluster_workers``,
    ``replicas``, ``global_batch``), its metrics per epoch and whether it printed
    ``training_complete``.
    """
    parsed: dict[str, Any] = {"indices": set(), "header": {}, "epochs": {}, "complete": False}
    for raw in text.splitlines():
        match = LINE.match(raw.strip())
        if not match:
            continue
        parsed["indices"].add(int(match.group("index")))
        rest = match.group("rest").strip()
        if rest == "training_complete":
            parsed["complete"] = True
            continue
        pairs = {m.group("key"): m.group("value") for m in PAIR.finditer(rest)}
        if "epoch" in pairs:
            epoch = int(pairs.pop("epoch"))
            parsed["epochs"][epoch] = pairs
        elif "replicas" in pairs or "cluster_workers" in pairs:
            parsed["header"] = pairs
    return parsed


def _check(name: str, problems: list[str], ok_detail: str) -> dict[str, Any]:
    return {"name": name, "ok": not problems, "detail": "; ".join(problems) if problems else ok_detail}


def judge(workers: list[dict[str, Any]], size: int, marker_name: str) -> dict[str, Any]:
    """Run every check over the collected workers.

    Each worker dict carries ``index``, ``host``, ``log`` (text or None), ``exit``
    (dict or None), ``marker`` (bool) and ``config`` (dict or None). Returns the checks
    and the metrics per epoch.
    """
    by_index = {w["index"]: w for w in workers}
    missing = [i for i in range(size) if i not in by_index]
    parsed = {w["index"]: parse_log(w["log"] or "") for w in workers}

    def who(index: int) -> str:
        worker = by_index.get(index)
        return f"worker {index} ({worker['host']})" if worker else f"worker {index}"

    checks = []

    problems = [f"{who(i)}: no files were collected" for i in missing]
    problems += [f"{who(w['index'])}: no log" for w in workers if w["log"] is None]
    checks.append(_check("logs_collected", problems, f"{size} of {size} workers"))

    problems = []
    for w in workers:
        exit_ = w.get("exit")
        if exit_ is None:
            problems.append(f"{who(w['index'])}: no exit status (still running or lost)")
        elif exit_.get("returncode") != 0:
            problems.append(
                f"{who(w['index'])}: exit status {exit_.get('returncode')} ({exit_.get('reason')})"
            )
    checks.append(_check("exit_status", problems, "every worker exited 0"))

    problems = []
    for w in workers:
        cfg = w.get("config") or {}
        index = (cfg.get("task") or {}).get("index")
        if index != w["index"]:
            problems.append(f"{who(w['index'])}: TF_CONFIG task.index is {index}")
        printed = parsed[w["index"]]["indices"]
        if printed and printed != {w["index"]}:
            problems.append(f"{who(w['index'])}: log reports worker={sorted(printed)}")
    checks.append(_check("worker_index", problems, "each worker ran as its own index"))

    problems = []
    reference = cluster_of(workers)
    for w in workers:
        cluster = ((w.get("config") or {}).get("cluster") or {}).get("worker")
        if cluster != reference:
            problems.append(f"{who(w['index'])}: cluster list {cluster} differs from {reference}")
    checks.append(_check("same_cluster", problems, "every worker was given the same cluster list"))

    problems = []
    for w in workers:
        header = parsed[w["index"]]["header"]
        for key in ("cluster_workers", "replicas"):
            value = header.get(key)
            if value is None:
                problems.append(f"{who(w['index'])}: printed no {key}")
            elif value != str(size):
                problems.append(f"{who(w['index'])}: {key}={value}, cluster has {size}")
    checks.append(_check("cluster_seen", problems, f"every worker saw {size} workers"))

    problems = []
    epochs: dict[int, dict[str, str]] = {}
    all_epochs = sorted({e for p in parsed.values() for e in p["epochs"]})
    for epoch in all_epochs:
        values: dict[str, dict[str, list[int]]] = {}
        for w in workers:
            metrics = parsed[w["index"]]["epochs"].get(epoch)
            if metrics is None:
                problems.append(f"epoch {epoch}: {who(w['index'])} printed no metrics")
                continue
            for key, value in metrics.items():
                values.setdefault(key, {}).setdefault(value, []).append(w["index"])
        for key, seen in sorted(values.items()):
            if len(seen) > 1 or sum(len(v) for v in seen.values()) != len(workers):
                spread = ", ".join(f"{value} from worker(s) {idx}" for value, idx in sorted(seen.items()))
                problems.append(f"epoch {epoch} {key}: {spread}")
        epochs[epoch] = {key: next(iter(seen)) for key, seen in values.items() if len(seen) == 1}
    if not all_epochs:
        problems.append("no worker printed any epoch metrics")
    checks.append(
        _check("metrics_agree", problems, f"{len(all_epochs)} epoch(s), identical on every worker")
    )

    problems = [f"{who(w['index'])}: no training_complete line" for w in workers if not parsed[w["index"]]["complete"]]
    checks.append(_check("training_complete", problems, "every worker printed training_complete"))

    problems = []
    chief = by_index.get(0)
    if chief is None or not chief["marker"]:
        problems.append(f"the chief, {who(0)}, wrote no {marker_name}")
    for w in workers:
        if w["index"] != 0 and w["marker"]:
            problems.append(f"{who(w['index'])} is not the chief but wrote {marker_name}")
    checks.append(_check("chief_marker", problems, f"only the chief wrote {marker_name}"))

    return {"checks": checks, "metrics": {str(e): m for e, m in epochs.items()}}


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def _read_json(path: str) -> dict | None:
    text = _read(path)
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


WORKER_DIR = re.compile(r"^worker-(\d+)$")


RETRY_DIR = re.compile(r"^retry-(\d+)$")


def attempts_in(run_dir: str) -> list[int]:
    """Attempts present in a collected run: 0 (``worker-*``), n (``retry-<n>/``)."""
    found = set()
    for host in sorted(os.listdir(run_dir)) if os.path.isdir(run_dir) else []:
        host_dir = os.path.join(run_dir, host)
        if not os.path.isdir(host_dir):
            continue
        for name in os.listdir(host_dir):
            if WORKER_DIR.match(name):
                found.add(0)
            match = RETRY_DIR.match(name)
            if match:
                found.add(int(match.group(1)))
    return sorted(found)


def load_run(run_dir: str, marker_name: str, attempt: int = 0) -> list[dict[str, Any]]:
    """Every worker of one attempt: ``run_dir/<host>/worker-<index>`` for the first,
    ``run_dir/<host>/retry-<attempt>/worker-<index>`` for a restart."""
    workers = []
    for host in sorted(os.listdir(run_dir)) if os.path.isdir(run_dir) else []:
        host_dir = os.path.join(run_dir, host)
        if attempt:
            host_dir = os.path.join(host_dir, f"retry-{attempt}")
        if not os.path.isdir(host_dir):
            continue
        for name in sorted(os.listdir(host_dir)):
            match = WORKER_DIR.match(name)
            if not match:
                continue
            wdir = os.path.join(host_dir, name)
            workers.append(
                {
                    "index": int(match.group(1)),
                    "host": host,
                    "dir": wdir,
                    "log": _read(os.path.join(wdir, "worker.log")),
                    "exit": _read_json(os.path.join(wdir, "exit.json")),
                    "config": _read_json(os.path.join(wdir, "tf_config.json")),
                    "marker": os.path.exists(os.path.join(wdir, marker_name)),
                }
            )
    return sorted(workers, key=lambda w: (w["index"], w["host"]))


def cluster_of(workers: list[dict[str, Any]]) -> list[str]:
    """The cluster list most workers were given (the first seen among equals)."""
    counts: dict[str, int] = {}
    lists: dict[str, list[str]] = {}
    for w in workers:
        cluster = ((w.get("config") or {}).get("cluster") or {}).get("worker")
        if cluster:
            key = json.dumps(cluster)
            lists.setdefault(key, cluster)
            counts[key] = counts.get(key, 0) + 1
    if not counts:
        return []
    return lists[max(counts, key=lambda key: counts[key])]


def _log_tail(text: str | None, lines: int = 5) -> list[str]:
    return [line for line in (text or "").splitlines() if line.strip()][-lines:]


def failure_reason(workers: list[dict[str, Any]], checks: list[dict[str, Any]], context: dict) -> str | None:
    """Name the culprit of a failed run: the first worker to fail, else a lost host, else
    the first failed check. Workers the runbook stopped are victims, not culprits."""
    wait = context.get("wait") or {}
    failed = [w for w in workers if w.get("exit") and w["exit"].get("returncode") != 0]
    culprits = [w for w in failed if not str(w["exit"].get("reason", "")).startswith("stopped by")]
    if culprits:
        first = min(culprits, key=lambda w: w["exit"].get("finished_at") or float("inf"))
        tail = " | ".join(_log_tail(first["log"]))
        return (
            f"worker {first['index']} on host {first['host']} failed first: exit status "
            f"{first['exit'].get('returncode')} ({first['exit'].get('reason')}); last log lines: {tail}"
        )
    for entry in wait.get("failed_workers") or []:
        tail = " | ".join(entry.get("log_tail") or [])
        return (
            f"worker {entry.get('index')} on host {entry.get('host')} failed: exit status "
            f"{entry.get('returncode')} ({entry.get('reason')}); last log lines: {tail}"
        )
    if wait.get("lost_hosts"):
        return f"host(s) {', '.join(wait['lost_hosts'])} became unreachable during the run"
    if failed:
        first = failed[0]
        return f"worker {first['index']} on host {first['host']}: {first['exit'].get('reason')}"
    for check in checks:
        if not check["ok"]:
            return f"{check['name']}: {check['detail']}"
    return None


def attempt_record(attempt: int, workers: list[dict[str, Any]]) -> dict[str, Any]:
    """How one attempt ended, worker by worker."""
    return {
        "attempt": attempt,
        "ok": bool(workers) and all((w["exit"] or {}).get("returncode") == 0 for w in workers),
        "workers": [
            {
                "index": w["index"],
                "host": w["host"],
                "exit_status": (w["exit"] or {}).get("returncode"),
                "exit_reason": (w["exit"] or {}).get("reason"),
            }
            for w in workers
        ],
    }


def summarize(run_id: str, run_dir: str, marker_name: str, expected_size: int, context: dict) -> dict[str, Any]:
    attempts = attempts_in(run_dir) or [0]
    final = attempts[-1]
    # The verdict covers the final attempt; the earlier ones are listed with their ends.
    workers = load_run(run_dir, marker_name, final)
    cluster = cluster_of(workers)
    size = expected_size or len(cluster) or len(workers)
    verdict = judge(workers, size, marker_name)
    status = "succeeded" if all(c["ok"] for c in verdict["checks"]) else "failed"
    return {
        "run_id": run_id,
        "status": status,
        "cluster": {"worker": cluster, "size": size},
        "workers": [
            {
                "index": w["index"],
                "host": w["host"],
                "endpoint": cluster[w["index"]] if w["index"] < len(cluster) else None,
                "port": int(cluster[w["index"]].rsplit(":", 1)[1]) if w["index"] < len(cluster) else None,
                "exit_status": (w["exit"] or {}).get("returncode"),
                "exit_reason": (w["exit"] or {}).get("reason"),
                "log": os.path.join(w["dir"], "worker.log"),
            }
            for w in workers
        ],
        "metrics": verdict["metrics"],
        "checks": verdict["checks"],
        "reason": failure_reason(workers, verdict["checks"], context) if status == "failed" else None,
        "attempt": final,
        "attempts": [
            attempt_record(n, workers if n == final else load_run(run_dir, marker_name, n)) for n in attempts
        ],
        "context": context,
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def table(summary: dict[str, Any]) -> list[str]:
    lines = [f"run {summary['run_id']}: {summary['status'].upper()}"]
    for attempt in summary.get("attempts", [])[:-1]:
        failed = [w for w in attempt["workers"] if w["exit_status"] != 0]
        shown = "; ".join(f"worker {w['index']} ({w['host']}) {w['exit_status']}: {w['exit_reason']}" for w in failed)
        lines.append(f"attempt {attempt['attempt']} failed: {shown}")
    if summary.get("attempt"):
        lines.append(f"verdict of attempt {summary['attempt']}:")
    lines.append(f"{'worker':>6}  {'host':<20} {'endpoint':<24} exit")
    for w in summary["workers"]:
        lines.append(f"{w['index']:>6}  {w['host']:<20} {str(w['endpoint']):<24} {w['exit_status']}")
    for epoch, metrics in sorted(summary["metrics"].items(), key=lambda kv: int(kv[0])):
        shown = " ".join(f"{k}={v}" for k, v in sorted(metrics.items()))
        lines.append(f"epoch {epoch}: {shown}")
    for check in summary["checks"]:
        lines.append(f"[{'ok' if check['ok'] else 'FAIL':>4}] {check['name']}: {check['detail']}")
    return lines


# --- The run report's data: every attempt, worker by worker (added to the summary) ------


def _as_int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _pairs(line: str) -> tuple[str, dict[str, str]] | None:
    match = LINE.match(line.strip())
    if not match:
        return None
    rest = match.group("rest").strip()
    return rest, {m.group("key"): m.group("value") for m in PAIR.finditer(rest)}


def _is_stopped(exit_: dict[str, Any]) -> bool:
    """Stopped by the runbook (a victim), the same rule as ``failure_reason``."""
    return str(exit_.get("reason", "")).startswith("stopped by")


def worker_timeline(run_dir: str, worker: dict[str, Any]) -> dict[str, Any]:
    """One worker of one attempt as the run report draws it: when it launched, joined
    (its ``cluster_workers`` line), finished each epoch and exited, with its own metric
    values per epoch and the epoch it resumed after. Times come from the supervisor's
    ``timed_lines`` in exit.json; they are None where no record says."""
    exit_ = worker.get("exit") or {}
    state = _read_json(os.path.join(worker["dir"], "state.json")) or {}
    joined_at = completed_at = None
    epoch_at: dict[str, float] = {}
    for entry in exit_.get("timed_lines") or []:
        seen = _pairs(str(entry[1])) if isinstance(entry, list) and len(entry) == 2 else None
        if seen is None:
            continue
        rest, pairs = seen
        if rest == "training_complete":
            completed_at = completed_at or entry[0]
        elif "epoch" in pairs:
            epoch = _as_int(pairs["epoch"])
            epoch_at.setdefault(str(epoch if epoch is not None else pairs["epoch"]), entry[0])
        elif "cluster_workers" in pairs or "replicas" in pairs:
            joined_at = joined_at or entry[0]
    resumed = None
    for raw in (worker.get("log") or "").splitlines():
        seen = _pairs(raw)
        if seen and "resumed_from_epoch" in seen[1]:
            resumed = _as_int(seen[1]["resumed_from_epoch"])
    metrics = parse_log(worker.get("log") or "").get("epochs") or {}
    return {
        "index": worker["index"],
        "host": worker["host"],
        "log": os.path.relpath(os.path.join(worker["dir"], "worker.log"), run_dir),
        "has_log": worker.get("log") is not None,
        "launched_at": exit_.get("started_at", state.get("started_at")),
        "joined_at": joined_at,
        "epoch_at": epoch_at,
        "completed_at": completed_at,
        "finished_at": exit_.get("finished_at"),
        "exit_status": exit_.get("returncode"),
        "exit_reason": exit_.get("reason"),
        "signal": exit_.get("signal"),
        "stopped": _is_stopped(exit_),
        "culprit": False,
        "resumed_from_epoch": resumed,
        "metrics": {str(epoch): values for epoch, values in metrics.items()},
    }


def metric_disagreements(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every epoch and metric where the workers of one attempt printed different values."""
    found = []
    epochs = sorted({e for row in rows for e in row["metrics"]}, key=lambda e: (_as_int(e) is None, _as_int(e), e))
    for epoch in epochs:
        values: dict[str, dict[str, list[int]]] = {}
        for row in rows:
            for key, value in (row["metrics"].get(epoch) or {}).items():
                values.setdefault(key, {}).setdefault(value, []).append(row["index"])
        for key, seen in sorted(values.items()):
            if len(seen) > 1:
                shown = [{"value": value, "workers": idx} for value, idx in sorted(seen.items())]
                found.append({"epoch": epoch, "metric": key, "values": shown})
    return found


def attempt_timeline(run_dir: str, attempt: int, workers: list[dict[str, Any]], failed: list[Any]) -> dict[str, Any]:
    """One attempt: its workers, the culprit (the first worker to fail that the runbook did
    not stop, else the first the wait reported in ``failed``), the epoch it resumed after
    and where its workers' metrics differ."""
    rows = [worker_timeline(run_dir, w) for w in workers]
    culprits = [r for r in rows if r["exit_status"] not in (None, 0) and not r["stopped"]]
    culprit = None
    if culprits:
        culprit = min(culprits, key=lambda r: r["finished_at"] or float("inf"))["index"]
    elif failed:
        culprit = _as_int(failed[0].get("index") if isinstance(failed[0], dict) else failed[0])
    for row in rows:
        row["culprit"] = row["index"] == culprit
    resumed = [r["resumed_from_epoch"] for r in rows if r["resumed_from_epoch"] is not None]
    launched = [r["launched_at"] for r in rows if r["launched_at"] is not None]
    ends = [t for r in rows for t in (r["finished_at"], r["completed_at"], *r["epoch_at"].values()) if t is not None]
    return {
        "attempt": attempt,
        "started_at": min(launched) if launched else None,
        "finished_at": max(ends) if ends else None,
        "culprit": culprit,
        "resumed_from_epoch": min(resumed) if resumed else None,
        "workers": rows,
        "disagreements": metric_disagreements(rows),
    }


def add_timeline(summary: dict[str, Any], run_dir: str, marker_name: str) -> dict[str, Any]:
    """Add ``timeline`` to a summary (one entry per attempt, see ``attempt_timeline``) for
    the run report; every other key stays as it is."""
    numbers = [a["attempt"] for a in summary.get("attempts") or []] or attempts_in(run_dir) or [0]
    context = summary.get("context") or {}
    history = {_as_int(h.get("attempt")): h for h in context.get("attempts") or [] if isinstance(h, dict)}
    timeline = []
    for number in numbers:
        outcome = (history.get(number) or {}).get("outcome") or {}
        if number == numbers[-1] and not outcome:
            outcome = context.get("wait") or {}
        failed = (outcome.get("failed_workers") or []) if isinstance(outcome, dict) else []
        timeline.append(attempt_timeline(run_dir, number, load_run(run_dir, marker_name, number), failed))
    summary["timeline"] = timeline
    return summary


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "run_dir": {"type": "path", "required": True},
            "run_id": {"type": "str", "required": True},
            "marker": {"type": "str", "default": "multiworker-complete.txt"},
            "expected_size": {"type": "int", "default": 0},
            "context": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    params = module.params
    summary = summarize(params["run_id"], params["run_dir"], params["marker"], params["expected_size"], params["context"])
    summary = add_timeline(summary, params["run_dir"], params["marker"])
    if not module.check_mode:
        path = os.path.join(params["run_dir"], "summary.json")
        os.makedirs(params["run_dir"], exist_ok=True)
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(summary, handle, indent=2, sort_keys=True)
            handle.write("\n")
        os.replace(tmp, path)
    failed = [c for c in summary["checks"] if not c["ok"]]
    module.exit_json(
        changed=not module.check_mode,
        summary=summary,
        table=table(summary),
        status=summary["status"],
        failed_checks=[f"{c['name']}: {c['detail']}" for c in failed],
        reason=summary["reason"],
    )


if __name__ == "__main__":
    main()
