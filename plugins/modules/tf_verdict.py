#!/usr/bin/python
# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Judge a finished run from the files the collect phase fetched to the controller."""

from __future__ import annotations

DOCUMENTATION = r"""
module: tf_verdict
short_description: Check a collected run and write its summary.json
version_added: "0.1.0"
author: tf-runbook contributors (!UNKNOWN)
description:
  - Reads C(<run_dir>/<host>/worker-<index>/) as fetched by the tf_collect role
    (C(worker.log), C(exit.json), C(tf_config.json) and the chief's marker, if any) and
    runs the run's checks, each with the workers it concerns.
  - Reads the metrics contract (C(worker=I ...) lines) or, for a job that prints none,
    Keras' own C(model.fit(verbose=2)) epoch lines. A check the job's output does not
    allow is reported as C(not checked) (C(ok) null), never as ok or failed.
  - Writes C(<run_dir>/summary.json) and returns the same data with a printable table.
  - Runs on the controller; never fails itself, the caller decides. Whatever the run
    directory holds, a summary.json is written.
  - An action plugin of the same name runs the judgement in the task's own process on
    the controller, without starting a module; the module file holds the code and these
    docs.
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
    description:
      - What only the chief writes, as a path relative to its worker directory (the default
        job's completion marker, or for example C(model/model.keras)).
      - For a job that prints no C(worker=) lines, the default marker written by no worker
        is reported as not checked.
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

EXAMPLES = r"""
- name: Judge a collected run of the default job, on the controller, with a note in summary.json
  tf_runbook.multiworker.tf_verdict:
    run_dir: runs/20250114T100200Z-abc123
    run_id: 20250114T100200Z-abc123
    context:
      note: nightly regression run
  register: verdict
  delegate_to: localhost
  run_once: true

- name: Judge a run whose chief saves its model as model/model.keras
  tf_runbook.multiworker.tf_verdict:
    run_dir: runs/20250114T100200Z-abc123
    run_id: 20250114T100200Z-abc123
    marker: model/model.keras
    expected_size: 4
  register: verdict

- name: Fail when a check failed
  ansible.builtin.assert:
    that: verdict.failed_checks | length == 0
    fail_msg: "{{ verdict.table | join('\n') }}"
"""

RETURN = r"""
summary:
  description: The content of summary.json.
  type: dict
  returned: always
table:
  description: Lines of the verdict table.
  type: list
  elements: str
  returned: always
failed_checks:
  description: Each failed check, as its name, a colon and its detail.
  type: list
  elements: str
  returned: always
not_checked:
  description: Each check the job's output did not allow, as its name, a colon and its detail.
  type: list
  elements: str
  returned: always
status:
  description: The run's status, as in summary.json.
  type: str
  returned: always
reason:
  description: Why the run failed, as in summary.json; null when it passed.
  type: str
  returned: always
"""

import json
import math
import os
import re
import time
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import (
    CONFIG_FILE,
    EXIT_FILE,
    LOG_FILE,
    STATE_FILE,
    attempt_dir_of,
    printable,
    read_json,
    stopped_as_victim,
)

DEFAULT_MARKER = "multiworker-complete.txt"

LINE = re.compile(r"^worker=(?P<index>\d+)\s+(?P<rest>.*)$")
PAIR = re.compile(r"(?P<key>[A-Za-z_][A-Za-z0-9_.]*)=(?P<value>\S+)")
# An epoch value of the contract: E, or E/N (epoch E of N).
EPOCH_VALUE = re.compile(r"^(?P<epoch>\d{1,9})(?:/(?P<total>\d{1,9}))?$")
# Keras model.fit(verbose=2): "Epoch 2/3", then "5/5 - 0s - loss: 0.6689 - accuracy: 0.5688
# - 116ms/epoch - 23ms/step" (Keras 3 and verbose=1 put timings or a bar elsewhere; the
# metrics are the " - name: value" parts of the epoch's last step line).
KERAS_EPOCH = re.compile(r"^Epoch (?P<epoch>\d{1,9})/(?P<total>\d{1,9})$")
KERAS_STEP = re.compile(r"^(?:\d+|Unknown)/(?:\d+|Unknown)\b")
KERAS_METRIC = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_.]*): (?P<value>\S+)$")

OK = "ok"
FAILED = "failed"
NOT_CHECKED = "not checked"


def _int(text: str | None) -> int | None:
    """A small non-negative integer, or None (never raises, whatever the text)."""
    if text is None or not text.isdigit() or len(text) > 9:
        return None
    return int(text)


def _is_zero(value: Any) -> bool:
    """A return code of 0, as an integer: not false, not 0.0, not "0"."""
    return isinstance(value, int) and not isinstance(value, bool) and value == 0


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _lines(text: str) -> list[str]:
    """The log's lines as a terminal shows them: of a line rewritten with carriage returns
    (a progress bar), only its last state."""
    out = []
    for raw in text.splitlines():
        parts = [part for part in raw.split("\r") if part.strip()]
        out.append(parts[-1].strip() if parts else "")
    return out


def _empty_series() -> dict[str, Any]:
    return {"epochs": {}, "counts": {}, "totals": set(), "errors": []}


def _add_epoch(series: dict[str, Any], epoch: int, metrics: dict[str, str]) -> None:
    series["counts"][epoch] = series["counts"].get(epoch, 0) + 1
    # The first of a repeated epoch is kept; the repeat itself fails epochs_once.
    series["epochs"].setdefault(epoch, metrics)


def parse_log(text: str) -> dict[str, Any]:
    """Pull the metrics contract out of one worker's log.

    Returns the indices the worker printed, its header values (``cluster_workers``,
    ``replicas``, ``global_batch``, ``epochs``), its metrics per epoch (the first of a
    repeated epoch), how often each epoch was printed (``counts``), the epoch totals it
    announced (``epochs=N`` in the header, or ``epoch=E/N``), the epoch it resumed after
    (``resumed``), lines it could not read (``errors``) and whether it printed
    ``training_complete``.
    """
    parsed: dict[str, Any] = {"indices": set(), "header": {}, "complete": False, "resumed": None}
    parsed.update(_empty_series())
    for number, line in enumerate(_lines(text), start=1):
        match = LINE.match(line)
        if not match:
            continue
        index = _int(match.group("index"))
        if index is None:
            parsed["errors"].append(f"line {number}: worker index {match.group('index')[:20]} is not a small integer")
            continue
        parsed["indices"].add(index)
        rest = match.group("rest").strip()
        if rest == "training_complete":
            parsed["complete"] = True
            continue
        pairs = {m.group("key"): m.group("value") for m in PAIR.finditer(rest)}
        if "epoch" in pairs:
            raw = pairs.pop("epoch")
            value = EPOCH_VALUE.match(raw)
            if not value:
                parsed["errors"].append(f"line {number}: epoch={raw[:40]} is not an epoch number (E or E/N)")
                continue
            if value.group("total"):
                parsed["totals"].add(int(value.group("total")))
            _add_epoch(parsed, int(value.group("epoch")), pairs)
        elif "resumed_from_epoch" in pairs:
            parsed["resumed"] = _int(pairs["resumed_from_epoch"])
        elif "replicas" in pairs or "cluster_workers" in pairs:
            parsed["header"] = pairs
            total = _int(pairs.get("epochs"))
            if total is not None:
                parsed["totals"].add(total)
    return parsed


def parse_keras(text: str) -> dict[str, Any]:
    """Keras' own epoch lines (``model.fit(verbose=2)``) in one worker's log: metrics per
    epoch (timings are not metrics), how often each epoch began, and the totals of its
    ``Epoch E/N`` lines."""
    series = _empty_series()
    current: int | None = None
    pending: dict[str, str] | None = None

    def close() -> None:
        if current is not None:
            series["epochs"].setdefault(current, pending if pending is not None else None)

    for line in _lines(text):
        header = KERAS_EPOCH.match(line)
        if header:
            close()
            current = int(header.group("epoch"))
            pending = None
            series["counts"][current] = series["counts"].get(current, 0) + 1
            series["totals"].add(int(header.group("total")))
            if series["counts"][current] > 1:
                # A repeated epoch: keep the first one's metrics.
                current = None
            continue
        if current is not None and KERAS_STEP.match(line):
            metrics = {}
            for part in line.split(" - ")[1:]:
                metric = KERAS_METRIC.match(part.strip())
                if metric and metric.group("name") != "ETA":  # a progress bar's time left
                    metrics[metric.group("name")] = metric.group("value")
            pending = metrics  # a progress bar's later line replaces its earlier one
    close()
    series["epochs"] = {e: m for e, m in series["epochs"].items() if m is not None}
    return series


def stopped_by_runbook(exit_: dict[str, Any]) -> str | None:
    """Who on the runbook's side ended this worker, or None when the job ended by itself.

    The one place that reads the exit record for this. It takes a structured
    ``stopped_by`` field when the record has one (empty, ``null`` or ``job``: the job
    itself); without it, today's supervisor records ``reason: exited`` for a job that
    ended by itself and another reason (a deadline, a signal, a stop) for every exit the
    runbook caused.
    """
    if "stopped_by" in exit_:
        by = exit_.get("stopped_by")
        return None if by in (None, "", "job") else str(by)
    reason = exit_.get("reason")
    if reason == "exited":
        return None
    return str(reason) if reason else "the exit record gives no reason"


def _finite(value: str) -> bool:
    try:
        return math.isfinite(float(value))
    except ValueError:
        return False


def _check(name: str, problems: list[str], ok_detail: str) -> dict[str, Any]:
    ok = not problems
    return {
        "name": name,
        "ok": ok,
        "result": OK if ok else FAILED,
        "detail": "; ".join(problems) if problems else ok_detail,
    }


def _not_checked(name: str, why: str) -> dict[str, Any]:
    """A check the job's output does not allow: neither ok nor a failure."""
    return {"name": name, "ok": None, "result": NOT_CHECKED, "detail": f"not checked: {why}"}


def _skipped(first: int, printed: list[int], shown: int = 10) -> tuple[list[int], int]:
    """The first ``shown`` epochs missing from ``first`` to the last of ``printed`` (sorted),
    and how many are missing; never builds the whole range (an epoch may be 999999999)."""
    examples: list[int] = []
    count = 0
    expected = first
    for epoch in printed:
        if epoch < expected:
            continue
        gap = epoch - expected
        examples += list(range(expected, min(epoch, expected + shown - len(examples))))
        count += gap
        expected = epoch + 1
    return examples, count


def _epoch_list(epochs: list[int]) -> str:
    return ", ".join(str(e) for e in epochs[:10]) + (f" and {len(epochs) - 10} more" if len(epochs) > 10 else "")


def judge(workers: list[dict[str, Any]], size: int, marker_name: str, attempt: int = 0) -> dict[str, Any]:
    """Run every check over the collected workers of one attempt.

    Each worker dict carries ``index``, ``host``, ``log`` (text or None), ``exit``
    (dict or None), ``marker`` (bool) and ``config`` (dict or None); one index may come
    in several dicts (two directories for one index), which is a failure. Returns the
    checks (``result``: ok, failed or not checked), the metrics per epoch and what the
    job's output let the verdict read (``job_output``).
    """
    logs = [parse_log(w.get("log") or "") for w in workers]
    contract = any(p["indices"] for p in logs)
    if any(p["counts"] or p["errors"] for p in logs):
        source, series = "contract", logs
    else:
        kerases = [parse_keras(w.get("log") or "") for w in workers]
        source, series = ("keras", kerases) if any(k["counts"] for k in kerases) else (None, kerases)
    present = {w["index"] for w in workers}
    missing = [i for i in range(size) if i not in present]
    chief = next((w for w in workers if w["index"] == 0), None)

    def who(worker: dict[str, Any] | int) -> str:
        if isinstance(worker, int):
            return f"worker {worker}"
        return f"worker {worker['index']} ({worker['host']})"

    checks = []

    problems = [f"{who(i)}: no files were collected" for i in missing]
    problems += [f"{who(w)}: no log" for w in workers if w.get("log") is None]
    if not workers and not missing:
        problems.append("no worker's files were collected")
    checks.append(_check("logs_collected", problems, f"{size} of {size} workers"))

    problems = []
    for w in workers:
        exit_ = w.get("exit")
        if not isinstance(exit_, dict):
            problems.append(f"{who(w)}: no exit status (still running or lost)")
        elif not _is_zero(exit_.get("returncode")):
            problems.append(f"{who(w)}: exit status {exit_.get('returncode')} ({exit_.get('reason')})")
        else:
            by = stopped_by_runbook(exit_)
            if by:
                problems.append(f"{who(w)}: exited 0, but the runbook ended it ({by}); the job did not finish by itself")
    checks.append(_check("exit_status", problems, "every worker exited 0 by itself"))

    problems = []
    for w, parsed in zip(workers, logs):
        index = _dict(_dict(w.get("config")).get("task")).get("index")
        if index != w["index"]:
            problems.append(f"{who(w)}: TF_CONFIG task.index is {index}")
        printed = parsed["indices"]
        if printed and printed != {w["index"]}:
            problems.append(f"{who(w)}: log reports worker={sorted(printed)}")
    checks.append(
        _check(
            "worker_index",
            problems,
            "each worker ran as its own index"
            if contract
            else "each worker was given its own index (TF_CONFIG); the job's log does not print it",
        )
    )

    problems = []
    dirs: dict[int, list[dict[str, Any]]] = {}
    for w in workers:
        dirs.setdefault(w["index"], []).append(w)
    for index, same in sorted(dirs.items()):
        if len(same) > 1:
            hosts = ", ".join(w["host"] for w in same)
            problems.append(f"{who(index)}: {len(same)} directories (on {hosts}); one index, one directory")
    for w in workers:
        if w["index"] >= size:
            problems.append(f"{who(w)}: index {w['index']} is outside the cluster of {size} (0..{size - 1})")
    checks.append(_check("worker_set", problems, f"one directory for each index 0..{size - 1}, no other"))

    problems = []
    reference = cluster_of(workers)
    for w in workers:
        cluster = _dict(_dict(w.get("config")).get("cluster")).get("worker")
        if cluster != reference:
            problems.append(f"{who(w)}: cluster list {cluster} differs from {reference}")
    checks.append(_check("same_cluster", problems, "every worker was given the same cluster list"))

    if contract:
        problems = []
        for w, parsed in zip(workers, logs):
            header = parsed["header"]
            for key in ("cluster_workers", "replicas"):
                value = header.get(key)
                if value is None:
                    problems.append(f"{who(w)}: printed no {key}")
                elif value != str(size):
                    problems.append(f"{who(w)}: {key}={value}, cluster has {size}")
        checks.append(_check("cluster_seen", problems, f"every worker saw {size} workers"))
    else:
        checks.append(_not_checked("cluster_seen", "the job prints no worker=I cluster_workers=N replicas=R line"))

    epochs: dict[int, dict[str, str]] = {}
    if source is None:
        why = "the job prints no epoch lines (worker=I epoch=E name=value, or Keras model.fit verbose=2)"
        if contract:
            checks.append(_check("metrics_agree", ["no worker printed any epoch metrics"], ""))
        else:
            checks.append(_not_checked("metrics_agree", why))
        checks.append(_not_checked("metrics_finite", why))
        checks.append(_not_checked("epochs_once", why))
        checks.append(_not_checked("epochs_complete", why))
    else:
        epochs = _metrics_checks(workers, series, source, who, checks)
        _epoch_checks(workers, series, logs, source, attempt, who, checks)

    if contract:
        problems = [f"{who(w)}: no training_complete line" for w, p in zip(workers, logs) if not p["complete"]]
        checks.append(_check("training_complete", problems, "every worker printed training_complete"))
    else:
        checks.append(_not_checked("training_complete", "the job prints no worker=I training_complete line"))

    if not contract and marker_name == DEFAULT_MARKER and not any(w.get("marker") for w in workers):
        checks.append(
            _not_checked(
                "chief_marker",
                f"no worker wrote {marker_name}, the default job's marker; set tf_verdict_marker to a "
                "path only the chief writes (model/model.keras)",
            )
        )
    else:
        problems = []
        if not marker_inside(marker_name):
            problems.append(f"tf_verdict_marker {marker_name!r} is not a relative path inside the worker directory")
        elif chief is None or not any(w.get("marker") for w in dirs.get(0, [])):
            problems.append(f"the chief, {who(chief or 0)}, wrote no {marker_name}")
        for w in workers:
            if w["index"] != 0 and w.get("marker"):
                problems.append(f"{who(w)} is not the chief but wrote {marker_name}")
        checks.append(_check("chief_marker", problems, f"only the chief wrote {marker_name}"))

    return {
        "checks": checks,
        "metrics": {str(e): m for e, m in sorted(epochs.items())},
        "job_output": {"contract_lines": contract, "metrics_from": source},
    }


def _metrics_checks(
    workers: list[dict[str, Any]], series: list[dict[str, Any]], source: str, who: Any, checks: list[dict[str, Any]]
) -> dict[int, dict[str, str]]:
    """metrics_agree and metrics_finite over one source of epoch metrics; returns the
    metrics every worker agrees on, per epoch."""
    problems = []
    epochs: dict[int, dict[str, str]] = {}
    all_epochs = sorted({e for s in series for e in list(s["epochs"]) + list(s["counts"])})
    for epoch in all_epochs:
        printed = []
        for w, s in zip(workers, series):
            metrics = s["epochs"].get(epoch)
            if metrics is None:
                problems.append(f"epoch {epoch}: {who(w)} printed no metrics")
            elif not metrics:
                problems.append(f"epoch {epoch}: {who(w)} printed an epoch line without any metric")
            else:
                printed.append((w, metrics))
        names = sorted({name for _worker, metrics in printed for name in metrics})
        for w, metrics in printed:
            lacking = [name for name in names if name not in metrics]
            if lacking:
                problems.append(f"epoch {epoch}: {who(w)} printed no {', '.join(lacking)}")
        agreed = {}
        for key in names:
            seen: dict[str, list[int]] = {}
            for w, metrics in printed:
                if key in metrics:
                    seen.setdefault(metrics[key], []).append(w["index"])
            if len(seen) > 1:
                spread = ", ".join(f"{value} from worker(s) {idx}" for value, idx in sorted(seen.items()))
                problems.append(f"epoch {epoch} {key}: {spread}")
            elif sum(len(idx) for idx in seen.values()) == len(workers):
                agreed[key] = next(iter(seen))
        epochs[epoch] = agreed
    kind = "Keras epoch lines" if source == "keras" else "epoch lines"
    checks.append(
        _check(
            "metrics_agree",
            problems,
            f"{len(all_epochs)} epoch(s), identical on every worker" + (f" ({kind})" if source == "keras" else ""),
        )
    )

    bad: dict[tuple[int, str, str], list[int]] = {}
    for w, s in zip(workers, series):
        for epoch, metrics in s["epochs"].items():
            for name, value in (metrics or {}).items():
                if not _finite(value):
                    bad.setdefault((epoch, name, value), []).append(w["index"])
    problems = [
        f"epoch {epoch} {name}={value} from worker(s) {idx}: not a finite number"
        for (epoch, name, value), idx in sorted(bad.items())
    ]
    checks.append(_check("metrics_finite", problems, "every metric of every epoch is a finite number"))
    return epochs


def _epoch_checks(
    workers: list[dict[str, Any]],
    series: list[dict[str, Any]],
    logs: list[dict[str, Any]],
    source: str,
    attempt: int,
    who: Any,
    checks: list[dict[str, Any]],
) -> None:
    """epochs_once (each epoch once, none skipped) and epochs_complete (up to the total the
    job announced)."""
    problems = []
    lasts = []
    for w, s, parsed in zip(workers, series, logs):
        problems += [f"{who(w)}: {error}" for error in s["errors"]]
        printed = sorted(s["counts"])
        for epoch in printed:
            if s["counts"][epoch] > 1:
                problems.append(f"{who(w)}: epoch {epoch} printed {s['counts'][epoch]} times")
        if not printed:
            continue
        # A restarted attempt resumes after the epoch its job names (resumed_from_epoch=E),
        # or, for a job that does not say, where its first epoch line is.
        if source == "contract" and parsed["resumed"] is not None:
            first = parsed["resumed"] + 1
        elif attempt and source == "keras":
            first = printed[0]
        else:
            first = 1
        outside = [e for e in printed if e < first]
        if outside:
            problems.append(f"{who(w)}: printed epoch {_epoch_list(outside)} before its first, {first}")
        skipped, count = _skipped(first, printed)
        if count:
            more = f" and {count - len(skipped)} more" if count > len(skipped) else ""
            problems.append(f"{who(w)}: printed no epoch {_epoch_list(skipped)}{more} (epochs {first}..{printed[-1]})")
        lasts.append(printed[-1])
    span = f" up to {max(lasts)}" if lasts else ""
    checks.append(_check("epochs_once", problems, f"every worker printed each epoch once, none skipped{span}"))

    totals: dict[int, list[int]] = {}
    for w, s in zip(workers, series):
        for total in s["totals"]:
            totals.setdefault(total, []).append(w["index"])
    if not totals:
        checks.append(
            _not_checked(
                "epochs_complete",
                "the job announces no epoch total (epochs=N in its worker= header, epoch=E/N, or Keras' Epoch E/N), "
                "so a run cut short after an epoch looks like a finished one",
            )
        )
        return
    problems = []
    if len(totals) > 1:
        spread = ", ".join(f"{total} from worker(s) {idx}" for total, idx in sorted(totals.items()))
        problems.append(f"workers announce different epoch totals: {spread}")
    total = max(totals)
    for w, s in zip(workers, series):
        last = max(s["counts"], default=0)
        if last < total:
            problems.append(f"{who(w)}: last epoch printed is {last} of {total}")
        elif last > total:
            problems.append(f"{who(w)}: printed epoch {last}, beyond the total of {total}")
    checks.append(_check("epochs_complete", problems, f"every worker printed epoch {total} of {total}"))


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


WORKER_DIR = re.compile(r"^worker-(\d{1,9})$")


RETRY_DIR = re.compile(r"^retry-(\d{1,9})$")


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
    """Every worker of one attempt: ``run_dir/<host>/worker-<index>`` for the first,
    ``run_dir/<host>/retry-<attempt>/worker-<index>`` for a restart."""
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


def _cluster_list(worker: dict[str, Any]) -> list[str] | None:
    cluster = _dict(_dict(worker.get("config")).get("cluster")).get("worker")
    if isinstance(cluster, list) and cluster and all(isinstance(e, str) for e in cluster):
        return cluster
    return None


def cluster_of(workers: list[dict[str, Any]]) -> list[str]:
    """The cluster list most workers were given (the first seen among equals)."""
    counts: dict[str, int] = {}
    lists: dict[str, list[str]] = {}
    for w in workers:
        cluster = _cluster_list(w)
        if cluster:
            key = json.dumps(cluster)
            lists.setdefault(key, cluster)
            counts[key] = counts.get(key, 0) + 1
    if not counts:
        return []
    return lists[max(counts, key=lambda key: counts[key])]


def _port(endpoint: str) -> int | None:
    return _int(endpoint.rsplit(":", 1)[1]) if ":" in endpoint else None


def _log_tail(text: str | None, lines: int = 5) -> list[str]:
    """The last non-blank lines of a log, with control characters shown as escapes
    (``\\x1b``): they reach the operator's terminal in the failure reason."""
    tail = [line for line in (text or "").splitlines() if line.strip()][-lines:]
    return [printable(line) for line in tail]


def _finished_at(worker: dict[str, Any]) -> float:
    value = worker["exit"].get("finished_at")
    return float(value) if isinstance(value, (int, float)) else float("inf")


def failure_reason(workers: list[dict[str, Any]], checks: list[dict[str, Any]], context: dict) -> str | None:
    """Name the culprit of a failed run: the first worker to fail, else a lost host, else
    the first failed check. Workers the runbook stopped are victims, not culprits."""
    wait = _dict(_dict(context).get("wait"))
    failed = [w for w in workers if isinstance(w.get("exit"), dict) and w["exit"].get("returncode") != 0]
    culprits = [w for w in failed if not stopped_as_victim(w["exit"])]
    if culprits:
        first = min(culprits, key=_finished_at)
        tail = " | ".join(_log_tail(first["log"]))
        return (
            f"worker {first['index']} on host {first['host']} failed first: exit status "
            f"{first['exit'].get('returncode')} ({first['exit'].get('reason')}); last log lines: {tail}"
        )
    for entry in wait.get("failed_workers") or []:
        entry = _dict(entry)
        tail = " | ".join(str(line) for line in entry.get("log_tail") or [])
        return (
            f"worker {entry.get('index')} on host {entry.get('host')} failed: exit status "
            f"{entry.get('returncode')} ({entry.get('reason')}); last log lines: {tail}"
        )
    if wait.get("lost_hosts"):
        return f"host(s) {', '.join(str(h) for h in wait['lost_hosts'])} became unreachable during the run"
    if failed:
        first = failed[0]
        return f"worker {first['index']} on host {first['host']}: {first['exit'].get('reason')}"
    for check in checks:
        if check["ok"] is False:
            return f"{check['name']}: {check['detail']}"
    return None


def attempt_record(attempt: int, workers: list[dict[str, Any]]) -> dict[str, Any]:
    """How one attempt ended, worker by worker."""
    return {
        "attempt": attempt,
        "ok": bool(workers) and all(_dict(w["exit"]).get("returncode") == 0 for w in workers),
        "workers": [
            {
                "index": w["index"],
                "host": w["host"],
                "exit_status": _dict(w["exit"]).get("returncode"),
                "exit_reason": _dict(w["exit"]).get("reason"),
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
    verdict = judge(workers, size, marker_name, final)
    failed = any(c["ok"] is False for c in verdict["checks"])
    status = "failed" if failed else "succeeded"
    return {
        "run_id": run_id,
        "status": status,
        "cluster": {"worker": cluster, "size": size},
        "workers": [
            {
                "index": w["index"],
                "host": w["host"],
                "endpoint": cluster[w["index"]] if w["index"] < len(cluster) else None,
                "port": _port(cluster[w["index"]]) if w["index"] < len(cluster) else None,
                "exit_status": _dict(w["exit"]).get("returncode"),
                "exit_reason": _dict(w["exit"]).get("reason"),
                "log": os.path.join(w["dir"], LOG_FILE),
            }
            for w in workers
        ],
        "metrics": verdict["metrics"],
        "checks": verdict["checks"],
        "not_checked": [c["name"] for c in verdict["checks"] if c["ok"] is None],
        "job_output": verdict["job_output"],
        "reason": failure_reason(workers, verdict["checks"], context) if failed else None,
        "attempt": final,
        "attempts": [
            attempt_record(n, workers if n == final else load_run(run_dir, marker_name, n)) for n in attempts
        ],
        "context": context,
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def unreadable_summary(run_id: str, error: str, context: dict) -> dict[str, Any]:
    """The summary of a run the verdict could not read: failed, saying why."""
    check = {"name": "verdict", "ok": False, "result": FAILED, "detail": f"the verdict could not read the run: {error}"}
    return {
        "run_id": run_id,
        "status": "failed",
        "cluster": {"worker": [], "size": 0},
        "workers": [],
        "metrics": {},
        "checks": [check],
        "not_checked": [],
        "job_output": {},
        "reason": check["detail"],
        "attempt": 0,
        "attempts": [],
        "context": context,
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


MARKS = {OK: "ok", FAILED: "FAIL", NOT_CHECKED: "--"}


def table(summary: dict[str, Any]) -> list[str]:
    lines = [f"run {summary['run_id']}: {summary['status'].upper()}"]
    if summary.get("not_checked"):
        lines.append(f"not checked (the job's output does not show it): {', '.join(summary['not_checked'])}")
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
        result = check.get("result") or (OK if check["ok"] else FAILED)
        lines.append(f"[{MARKS[result]:>4}] {check['name']}: {check['detail']}")
    lines.extend(left_out_lines(summary.get("context", {}).get("left_out") or {}))
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


def worker_timeline(run_dir: str, worker: dict[str, Any], series: dict[str, Any]) -> dict[str, Any]:
    """One worker of one attempt as the run report draws it: when it launched, joined
    (its ``cluster_workers`` line), finished each epoch and exited, with its own metric
    values per epoch (``series``: what ``parse_log`` or ``parse_keras`` read from its log,
    as the checks did) and the epoch it resumed after. Times come from the supervisor's
    ``timed_lines`` in exit.json; they are None where no record says."""
    exit_ = _dict(worker.get("exit"))
    state = _dict(read_json(os.path.join(worker["dir"], STATE_FILE)))
    joined_at = completed_at = None
    epoch_at: dict[str, float] = {}
    began: dict[int, float] = {}  # Keras' "Epoch N/M" headers: epoch N began (N - 1 ended)
    for entry in exit_.get("timed_lines") or []:
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], (int, float))):
            continue
        header = KERAS_EPOCH.match(str(entry[1]).strip())
        if header:
            began.setdefault(int(header.group("epoch")), entry[0])
            continue
        seen = _pairs(str(entry[1]))
        if seen is None:
            continue
        rest, pairs = seen
        if rest == "training_complete":
            completed_at = completed_at or entry[0]
        elif "epoch" in pairs:
            value = EPOCH_VALUE.match(pairs["epoch"])
            if value:
                epoch_at.setdefault(str(int(value.group("epoch"))), entry[0])
        elif "cluster_workers" in pairs or "replicas" in pairs:
            joined_at = joined_at or entry[0]
    if began and not epoch_at:  # a Keras job: an epoch ends where the next begins, the last at a clean exit
        epoch_at = {str(n - 1): t for n, t in sorted(began.items()) if n - 1 in began}
        if exit_.get("returncode") == 0 and isinstance(exit_.get("finished_at"), (int, float)):
            epoch_at[str(max(began))] = exit_["finished_at"]
    return {
        "index": worker["index"],
        "host": worker["host"],
        "log": os.path.relpath(os.path.join(worker["dir"], LOG_FILE), run_dir),
        "has_log": worker.get("log") is not None,
        "launched_at": exit_.get("started_at", state.get("started_at")),
        "joined_at": joined_at if joined_at is not None else state.get("joined_at"),
        "joined": exit_.get("joined"),
        "epoch_at": epoch_at,
        "completed_at": completed_at,
        "finished_at": exit_.get("finished_at"),
        "exit_status": exit_.get("returncode"),
        "exit_reason": exit_.get("reason"),
        "signal": exit_.get("signal"),
        "stopped": stopped_as_victim(exit_),
        "culprit": False,
        "resumed_from_epoch": parse_log(worker.get("log") or "").get("resumed"),
        "metrics": {str(epoch): values for epoch, values in (series.get("epochs") or {}).items()},
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
    # The metrics come from where the checks read them: the contract, else Keras' lines.
    logs = [parse_log(w.get("log") or "") for w in workers]
    if not any(p["counts"] or p["errors"] for p in logs):
        logs = [parse_keras(w.get("log") or "") for w in workers]
    rows = [worker_timeline(run_dir, w, series) for w, series in zip(workers, logs)]
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


def left_out_lines(left_out: dict[str, list[dict[str, Any]]]) -> list[str]:
    """One line per file that stayed on its host because of tf_collect_max_mb."""
    return [
        f"not collected (over tf_collect_max_mb): {host}: {entry['path']} ({entry['bytes']} bytes)"
        for host, entries in sorted(left_out.items())
        for entry in entries
    ]


def write_summary(run_dir: str, summary: dict[str, Any]) -> None:
    path = os.path.join(run_dir, "summary.json")
    os.makedirs(run_dir, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(summary, handle, indent=2, sort_keys=True)
        handle.write("\n")
    os.replace(tmp, path)


ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "run_dir": {"type": "path", "required": True},
    "run_id": {"type": "str", "required": True},
    "marker": {"type": "str", "default": DEFAULT_MARKER},
    "expected_size": {"type": "int", "default": 0},
    "context": {"type": "dict", "default": {}},
}


def verdict(params: dict[str, Any], check_mode: bool) -> dict[str, Any]:
    """Judge the run and write its summary.json (not in check mode): the task's result.

    Shared by main() and the controller action of the same name
    (plugins/action/tf_verdict.py), which runs it without a module process.
    """
    try:
        summary = summarize(params["run_id"], params["run_dir"], params["marker"], params["expected_size"], params["context"])
    except Exception as exc:  # noqa: BLE001 - whatever the run holds, a summary.json is written
        summary = unreadable_summary(params["run_id"], f"{type(exc).__name__}: {exc}", params["context"])
    try:
        summary = add_timeline(summary, params["run_dir"], params["marker"])
    except Exception as exc:  # noqa: BLE001 - the report's data never costs the verdict its summary
        summary["timeline"] = []
        summary["timeline_error"] = f"{type(exc).__name__}: {exc}"
    if not check_mode:
        try:
            write_summary(params["run_dir"], summary)
        except OSError as exc:
            return {"failed": True, "msg": f"cannot write {params['run_dir']}/summary.json: {exc}", "summary": summary}
    failed = [c for c in summary["checks"] if c["ok"] is False]
    return {
        "changed": not check_mode,
        "summary": summary,
        "table": table(summary),
        "status": summary["status"],
        "failed_checks": [f"{c['name']}: {c['detail']}" for c in failed],
        "not_checked": [f"{c['name']}: {c['detail']}" for c in summary["checks"] if c["ok"] is None],
        "reason": summary["reason"],
    }


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    result = verdict(module.params, module.check_mode)
    if result.pop("failed", False):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
