# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The verdict's summary.json: the parsed run (``tf_verdict_run``), its checks
(``tf_verdict_checks``), the culprit and causes, a stall, the report's timeline, the
console table, and ``verdict()``, the task's result (the module and the controller action
of the same name both call it).

The inputs are the options of plugins/modules/tf_verdict.py: ``wait_outcome`` (the
tf_wait_outcome filter's result for the last attempt), ``attempts`` (tf_attempts_history:
``[{"attempt": n, "ok": bool, "outcome": <wait outcome>}]``), ``devices`` ({"<index>":
CUDA_VISIBLE_DEVICES or null}), ``left_out`` ({host: [{"path", "bytes"}]}) and
``context`` (recorded as is, never read). An input that is None was not given: the
verdict keeps what the run's earlier summary.json recorded for it (collect.yml alone).
"""

from __future__ import annotations

import os
import time
from typing import Any

from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_causes import (
    cause_of,
    cause_text,
    culprit,
    judged_cause,
    stopped_as_victim,
)
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_metrics import CONTRACT, format_named
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import (
    LOG_FILE,
    STATE_FILE,
    SUMMARY_FILE,
    attempt_record_file,
    printable,
    read_json,
    write_json_atomic,
)
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_verdict_checks import (
    DEFAULT_MARKER,
    FAILED,
    NOT_CHECKED,
    OK,
    begin_of,
    judge_run,
)
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_verdict_evaluator import (
    evaluation_lines,
    evaluator_check,
    evaluator_entry,
    split_evaluator,
    with_lost_host,
)
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_verdict_run import (
    as_dict,
    cluster_of,
    load_attempts,
    port_of,
    stacks_of,
    stuck_in,
    task_of,
    typed_cluster,
)

# The inputs recorded in summary.json's context, under these keys (the report reads them).
INPUTS = {"wait_outcome": "wait", "attempts": "attempts", "devices": "devices", "left_out": "left_out"}
# The console table shows the first and last epochs of a longer run (all are in summary.json).
TABLE_EPOCHS = 10
TABLE_ENDS = 3


# The options of plugins/modules/tf_verdict.py (documented there), for the module and the action.
ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "run_dir": {"type": "path", "required": True},
    "run_id": {"type": "str", "required": True},
    "marker": {"type": "str", "default": DEFAULT_MARKER},
    "expected_size": {"type": "int", "default": 0},
    "wait_outcome": {"type": "dict"},
    "attempts": {"type": "list", "elements": "dict"},
    "devices": {"type": "dict"},
    "left_out": {"type": "dict"},
    "context": {"type": "dict", "default": {}},
}


def now_text() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# --- The culprit, by the one rule of tf_causes --------------------------------------


def culprit_of(
    workers: list[dict[str, Any]],
    wait_failed: list[Any] | None = None,
    lost_hosts: list[Any] | None = None,
    frozen: list[Any] | None = None,
    decided: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """The culprit of an attempt by tf_causes' one rule (``culprit``), over the collected
    workers that failed and the wait's failed workers (``wait_failed``) of which no exit
    record was collected: ``{"index", "host", "cause", "worker", "entry"}`` (``worker``:
    the collected worker, None when only the wait knew it; ``entry``: the record blamed),
    or None. While a host was lost (``lost_hosts``), a worker that lost its peer is that
    loss's victim. With the decision's record of the attempt (``decided``), its culprit is
    the culprit: the live decision saw what the files may no longer show."""
    if decided is not None:
        named = as_dict(decided.get("culprit"))
        index = as_int(named.get("index"))
        if index is None:
            return None
        match = next((w for w in workers if w["index"] == index and as_dict(w.get("exit")).get("returncode") not in (None, 0)), None)
        cause = as_dict(named.get("cause")) or (cause_of(match["exit"]) if match else {"kind": "unknown", "detail": ""})
        # Without a collected exit, what the wait saw of it (a worker that never started).
        seen = next((e for e in wait_failed or [] if isinstance(e, dict) and as_int(e.get("index")) == index), None)
        return {"index": index, "host": named.get("host"), "cause": cause, "record": seen, "worker": match,
                "entry": None if match else seen}  # fmt: skip
    failed = [{"index": w["index"], "host": w["host"], **w["exit"]}
              for w in workers if isinstance(w.get("exit"), dict) and w["exit"].get("returncode") != 0]  # fmt: skip
    collected = {w["index"] for w in workers if isinstance(w.get("exit"), dict)}
    for entry in wait_failed or []:
        entry = entry if isinstance(entry, dict) else {"index": entry}
        if entry.get("index") not in collected:
            failed.append(entry)
    found = culprit(failed, bool(lost_hosts), [f for f in frozen or [] if isinstance(f, dict)])
    if found is None:
        return None
    match = next((w for w in workers if w["index"] == found["index"] and isinstance(w.get("exit"), dict)), None)
    return {**found, "worker": match if found["record"] is not None else None, "entry": found["record"]}


def log_tail(text: str | None, lines: int = 5) -> list[str]:
    """The last non-blank lines of a log, with control characters shown as escapes
    (``\\x1b``): they reach the operator's terminal in the failure reason."""
    tail = [line for line in (text or "").splitlines() if line.strip()][-lines:]
    return [printable(line) for line in tail]


# --- A stall -------------------------------------------------------------------------


def stall_of(workers: list[dict[str, Any]], wait: dict[str, Any]) -> dict[str, Any] | None:
    """A stalled run (its workers' cause, or the wait's ``stalled``): the culprits are the
    stalled workers whose stacks show them stuck in the job's own code; else every worker
    stalled."""
    stalled = [w for w in workers if cause_of(w.get("exit")).get("kind") == "stalled"]
    waited = as_dict(wait.get("stalled"))
    if not stalled and not waited:
        return None
    culprits = [(w, stuck_in(stacks_of(w.get("exit")))) for w in stalled]
    culprits = [(w, where) for w, where in culprits if where]
    if culprits:
        detail = "; ".join(f"worker {w['index']} on host {w['host']} stuck in {where}" for w, where in culprits)
    else:
        detail = "every worker stalled"
        missing = sorted({str(as_dict(stacks_of(w.get("exit"))).get("missing")) for w in stalled
                          if as_dict(stacks_of(w.get("exit"))).get("missing")})  # fmt: skip
        if missing:
            detail += f" ({'; '.join(missing)})"
    if waited.get("seconds") is not None:
        detail += f" (no progress on any worker for {waited['seconds']} s)"
    return {"culprits": sorted(w["index"] for w, _where in culprits), "detail": printable(detail)}


def with_status(cause: dict[str, Any], returncode: Any, reason: Any, signal: Any = None) -> str:
    """A cause, then the exit status it came with: ``job-error: ModuleNotFoundError: No
    module named 'x'; exit status 1 (exited)``, or ``(killed by SIGKILL)`` for a job that
    a signal ended on its own (printable: it reaches a terminal)."""
    if signal and reason == "exited":
        reason = f"killed by {signal}"
    status = f"exit status {returncode} ({reason})"
    if not cause.get("exception") and f"status {returncode}" in str(cause.get("detail")):
        return printable(f"{cause.get('kind')}: {status}")
    return printable(f"{cause_text(cause)}; {status}")


def restore_problem(checks: list[dict[str, Any]]) -> str | None:
    for entry in checks:
        if entry["name"] == "restore_agree" and entry["ok"] is False:
            return entry["detail"]
    return None


def failure_reason(
    workers: list[dict[str, Any]],
    checks: list[dict[str, Any]],
    wait: dict[str, Any] | None = None,
    stall: dict[str, Any] | None = None,
    stopped: dict[str, Any] | None = None,
    decided: dict[str, Any] | None = None,
) -> str | None:
    """Why a failed run failed, its cause first: a restore that differs between workers, a
    stall, the culprit (the first worker to fail by itself), a lost host, an operator's
    stop, else the first failed check. Workers the runbook stopped are never culprits."""
    wait = as_dict(wait)
    mismatch = restore_problem(checks)
    if mismatch:
        return f"restore-mismatch: {mismatch}"
    if stall:
        return f"stalled: {stall['detail']}"
    found = culprit_of(workers, wait.get("failed_workers"), wait.get("lost_hosts"), wait.get("frozen_workers"), decided)
    if found and found["worker"] is not None:
        first = found["worker"]
        exit_ = first["exit"]
        where = stuck_in(stacks_of(exit_))
        stuck = f"; stuck in {where}" if where else ""
        tail = " | ".join(log_tail(first.get("log")))
        # Its task where the inventory gave types: "worker 3 (ps:0) on host node3".
        task = " ({}:{})".format(*task_of(first)) if typed_cluster([first]) else ""
        return (
            f"worker {first['index']}{task} on host {first['host']} failed first: "
            f"{with_status(found['cause'], exit_.get('returncode'), exit_.get('reason'), exit_.get('signal'))}{stuck}; last log lines: {tail}"
        )
    if found and found["entry"] is not None:
        entry = found["entry"]
        cause = cause_of(entry)
        tail = " | ".join(printable(line) for line in entry.get("log_tail") or [])
        return (
            f"worker {entry.get('index')} on host {entry.get('host')} failed: "
            f"{with_status(cause, entry.get('returncode'), entry.get('reason'), entry.get('signal'))}; last log lines: {tail}"
        )
    if found:
        return f"worker {found['index']} on host {found['host']}: {printable(cause_text(found['cause']))}"
    if wait.get("lost_hosts"):
        return f"host(s) {', '.join(str(h) for h in wait['lost_hosts'])} became unreachable during the run"
    if stopped:
        of = f" of {stopped['of']}" if stopped.get("of") else ""
        return f"stopped by the {stopped['by']} at epoch {stopped['epoch']}{of}"
    failed = [w for w in workers if isinstance(w.get("exit"), dict) and w["exit"].get("returncode") != 0]
    if failed:
        first = failed[0]
        return f"worker {first['index']} on host {first['host']}: {printable(cause_text(cause_of(first['exit'])))}"
    for entry in checks:
        if entry["ok"] is False:
            return f"{entry['name']}: {entry['detail']}"
    return None


# --- An operator's stop ------------------------------------------------------------------

# The checks an operator's stop makes moot: it ended the workers (exit status), before the
# last epoch, the completion line and the chief's marker. Every other check still holds.
MOOT_AFTER_STOP = ("exit_status", "epochs_complete", "training_complete", "chief_marker")
STOPPED = "stopped"


def moot_after_stop(checks: list[dict[str, Any]], stopped: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The checks as a run an operator stopped is judged: a failed check the stop made moot
    (MOOT_AFTER_STOP) is not checked, and says why, instead of failing."""
    if not stopped:
        return checks
    of = f" of {stopped['of']}" if stopped.get("of") else ""
    said = f"moot: the {stopped['by']} stopped the run at epoch {stopped['epoch']}{of}"
    return [
        {**c, "ok": None, "result": NOT_CHECKED, "detail": f"{said} ({c['detail']})"}
        if c["name"] in MOOT_AFTER_STOP and c["ok"] is False else c
        for c in checks
    ]


def run_status(checks: list[dict[str, Any]], stall: dict[str, Any] | None, stopped: dict[str, Any] | None) -> str:
    """``succeeded``; ``stopped`` for a run an operator stopped that no check failed beyond
    what the stop made moot; else ``failed``."""
    if stall or any(c["ok"] is False for c in checks):
        return FAILED
    return STOPPED if stopped else "succeeded"


# --- summary.json ----------------------------------------------------------------------


def attempt_record(attempt: int, workers: list[dict[str, Any]]) -> dict[str, Any]:
    """How one attempt ended, worker by worker."""
    return {
        "attempt": attempt,
        "ok": bool(workers) and all(as_dict(w["exit"]).get("returncode") == 0 for w in workers),
        "workers": [
            {
                "index": w["index"],
                "host": w["host"],
                "exit_status": as_dict(w["exit"]).get("returncode"),
                "exit_reason": as_dict(w["exit"]).get("reason"),
                "cause": cause_of(w.get("exit")),
            }
            for w in workers
        ],
    }


def mismatched_workers(attempt: dict[str, Any]) -> set[int]:
    """The workers of an attempt that began at another epoch than the chief (or, without
    a chief, than most workers)."""
    begins = {w["index"]: begin_of(w, attempt["attempt"])[0] for w in attempt["workers"] if w["series"]["counts"]}
    if len(set(begins.values())) < 2:
        return set()
    counts: dict[int, int] = {}
    for first in begins.values():
        counts[first] = counts.get(first, 0) + 1
    reference = begins.get(0, max(counts, key=lambda first: counts[first]))
    return {index for index, first in begins.items() if first != reference}


def recorded_inputs(run_dir: str, given: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The verdict's inputs: those given, and for each not given (None) what the run's
    earlier summary.json recorded (collect.yml alone keeps the earlier judgement's
    attempts, wait outcome and devices, and the cluster size it was launched with).
    Returns the inputs (the options, with ``expected_size``) and what was kept (None when
    every input was given or nothing was recorded)."""
    earlier = as_dict(read_json(os.path.join(run_dir, SUMMARY_FILE)))
    recorded = as_dict(earlier.get("context"))
    inputs: dict[str, Any] = {"expected_size": given.get("expected_size") or 0}
    kept = []
    for option, key in INPUTS.items():
        value = given.get(option)
        if value is None and key in recorded:
            value = recorded[key]
            kept.append(key)
        inputs[option] = value
    if not kept:
        return inputs, None
    size = as_dict(earlier.get("cluster")).get("size")
    if not inputs["expected_size"] and isinstance(size, int) and not isinstance(size, bool) and size > 0:
        inputs["expected_size"] = size
    return inputs, {"kept": kept, "from": f"{SUMMARY_FILE} written at {earlier.get('written_at')}",
                    "judged_again": "the collected files", "attempt": as_int(earlier.get("attempt"))}  # fmt: skip


def keep_for_its_attempt(inputs: dict[str, Any], kept: dict[str, Any] | None, final: int) -> None:
    """A kept wait outcome tells how the earlier judgement's last attempt ended: it is kept
    only while that attempt is still the run's last (a resumed run that then succeeded
    would otherwise be judged by attempt 0's stall). Changes ``inputs`` and ``kept``."""
    if not kept or "wait" not in kept["kept"] or kept.get("attempt") == final:
        return
    inputs["wait_outcome"] = None
    kept["kept"] = [key for key in kept["kept"] if key != "wait"]
    kept["not_kept"] = (f"the wait's outcome of attempt {kept.get('attempt')}: the run's last attempt is now "
                        f"{final}")  # fmt: skip


def summarize_run(run_id: str, run_dir: str, marker_name: str, expected_size: int, inputs: dict[str, Any],
                  context: dict[str, Any], attempts: list[dict[str, Any]] | None = None) -> dict[str, Any]:  # fmt: skip
    """summary.json of a run (without the report's timeline; see ``add_timeline``)."""
    attempts = attempts if attempts is not None else load_attempts(run_dir, marker_name)
    # The sidecar evaluator is judged apart (tf_verdict_evaluator): never one of the
    # training's workers, its metrics never theirs. expected_size counts the training.
    attempts, evaluators = split_evaluator(attempts)
    evaluator = evaluator_entry(evaluators[0]) if evaluators else None
    # Its host lost and the training gone on without it: the wait's record says so.
    evaluator = with_lost_host(evaluator, inputs.get("wait_outcome"))
    if evaluator is not None and evaluator["log"]:
        evaluator["log_in_run"] = os.path.relpath(evaluator["log"], run_dir)
    final = attempts[-1]
    workers = final["workers"]
    cluster = cluster_of(workers)
    typed = typed_cluster(workers) or bool(evaluators)
    size = expected_size or len(cluster) or len(workers)
    verdict = judge_run(attempts, size, marker_name)
    required = evaluator_check(evaluator) if evaluator else None
    if required is not None:
        verdict["checks"].append(required)
    verdict["checks"] = moot_after_stop(verdict["checks"], verdict["stopped"])
    wait = as_dict(inputs.get("wait_outcome"))
    stall = stall_of(workers, wait)
    status = run_status(verdict["checks"], stall, verdict["stopped"])
    failed = status != "succeeded"
    mismatched = mismatched_workers(final)
    # What the verdict judged with, as the report and a later collect.yml read it.
    recorded = {**context, **{key: inputs[option] for option, key in INPUTS.items() if inputs.get(option) is not None}}
    return {
        "run_id": run_id,
        "status": status,
        "cluster": {"worker": cluster, "size": size},
        "workers": [
            {
                "index": w["index"],
                "host": w["host"],
                "endpoint": cluster[w["index"]] if w["index"] < len(cluster) else None,
                "port": port_of(cluster[w["index"]]) if w["index"] < len(cluster) else None,
                "exit_status": as_dict(w["exit"]).get("returncode"),
                "exit_reason": as_dict(w["exit"]).get("reason"),
                "cause": judged_cause(w.get("exit"), w["index"] in mismatched),
                "stacks": stacks_of(w.get("exit")),
                "log": os.path.join(w["dir"], LOG_FILE),
                # The task type and index, where the inventory gave types (tf_chief, tf_ps).
                **({"task": "{}:{}".format(*task_of(w))} if typed else {}),
            }
            for w in workers
        ],
        "metrics": verdict["metrics"],
        "epoch_sources": verdict["epoch_sources"],
        "checks": verdict["checks"],
        "not_checked": [c["name"] for c in verdict["checks"] if c["ok"] is None],
        "job_output": verdict["job_output"],
        "stall": stall,
        "stopped": verdict["stopped"],
        "evaluator": evaluator,
        "reason": (failure_reason(workers, verdict["checks"], wait, stall, verdict["stopped"],
                                  decided_record(run_dir, final["attempt"])) if failed or stall else None),
        "attempt": final["attempt"],
        "attempts": [attempt_record(a["attempt"], a["workers"]) for a in attempts],
        "context": recorded,
        "written_at": now_text(),
    }


def unreadable_summary(run_id: str, error: str, context: dict[str, Any]) -> dict[str, Any]:
    """The summary of a run the verdict could not read: failed, saying why."""
    entry = {"name": "verdict", "ok": False, "result": FAILED, "detail": f"the verdict could not read the run: {error}"}
    return {
        "run_id": run_id, "status": "failed", "cluster": {"worker": [], "size": 0}, "workers": [], "metrics": {},
        "epoch_sources": {}, "checks": [entry], "not_checked": [], "job_output": {}, "stall": None, "stopped": None,
        "reason": entry["detail"], "attempt": 0, "attempts": [], "context": context, "written_at": now_text(),
    }  # fmt: skip


# --- The report's data: every attempt, worker by worker ------------------------------


def uncollected_row(said: dict[str, Any]) -> dict[str, Any]:
    """The timeline row of a worker that the decision's record names but whose files were
    not collected (its host was lost for good): its host and its cause, nothing timed."""
    return {
        "index": as_int(said.get("index")), "host": said.get("host"), "log": None, "has_log": False,
        "launched_at": None, "joined_at": None, "joined": None, "epoch_at": {},
        "completed_at": None, "finished_at": None, "exit_status": None,
        "exit_reason": "not collected: its host was lost", "signal": None,
        "cause": said.get("cause") if isinstance(said.get("cause"), dict) else None, "stopped": False,
        "culprit": False, "resumed_from_epoch": None, "metrics": {},
    }  # fmt: skip


def worker_timeline(run_dir: str, worker: dict[str, Any], source: str | None) -> dict[str, Any]:
    """One worker of one attempt as the run report draws it: when it launched, joined,
    finished each epoch and exited, with its own metric values per epoch (the series the
    checks read). Times come from the supervisor's ``timed_lines`` in exit.json, read by
    the clock of the contract and of the attempt's format; None where no record says."""
    exit_ = as_dict(worker.get("exit"))
    state = as_dict(read_json(os.path.join(worker["dir"], STATE_FILE))) if worker.get("dir") else {}
    timed = [
        (float(entry[0]), str(entry[1]))
        for entry in exit_.get("timed_lines") or []
        if isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], (int, float)) and not isinstance(entry[0], bool)
    ]
    clock = CONTRACT.clock_of(timed)
    fmt = format_named(source)
    if fmt is not None and not fmt.contract:
        own = fmt.clock_of(timed)
        clock["epoch_at"] = own["epoch_at"]
        clock["joined_at"] = clock["joined_at"] or own["joined_at"]
    return {
        "index": worker["index"],
        "host": worker["host"],
        "log": os.path.relpath(os.path.join(worker["dir"], LOG_FILE), run_dir),
        "has_log": worker.get("log") is not None,
        "launched_at": exit_.get("started_at", state.get("started_at")),
        "joined_at": clock["joined_at"] if clock["joined_at"] is not None else state.get("joined_at"),
        "joined": exit_.get("joined"),
        "epoch_at": clock["epoch_at"],
        "completed_at": clock["completed_at"],
        "finished_at": exit_.get("finished_at"),
        "exit_status": exit_.get("returncode"),
        "exit_reason": exit_.get("reason"),
        "signal": exit_.get("signal"),
        "cause": cause_of(worker.get("exit")),
        "stopped": stopped_as_victim(exit_),
        "culprit": False,
        "resumed_from_epoch": worker["parsed"]["contract"]["resumed"],
        "metrics": {str(epoch): values for epoch, values in worker["series"]["epochs"].items()},
    }


def as_int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def metric_disagreements(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every epoch and metric where the workers of one attempt printed different values."""
    found = []
    epochs = sorted({e for row in rows for e in row["metrics"]}, key=lambda e: (as_int(e) is None, as_int(e), e))
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


def decided_record(run_dir: str, attempt: int) -> dict[str, Any] | None:
    """The record of the decision made after ``attempt`` failed (tf_run.ATTEMPT_RECORD,
    written by the attempts role when it decided), or None (the attempt succeeded, or ran
    before such records, or collect.yml judges a run no decision was made for)."""
    record = read_json(os.path.join(run_dir, attempt_record_file(attempt)))
    return record if isinstance(record, dict) and as_int(record.get("attempt")) == attempt else None


def decided_cause(row_cause: dict[str, Any], decided: dict[str, Any] | None) -> dict[str, Any]:
    """A worker's cause in the timeline: the collected one, unless the decision's record
    knows better: the worker's host was lost, or no exit record told why it ended (its
    supervisor died), where the cause the live decision saw is kept."""
    if decided is None:
        return row_cause
    if decided.get("lost") or not isinstance(row_cause, dict) or row_cause.get("kind") == "unknown":
        cause = decided.get("cause")
        if isinstance(cause, dict) and cause.get("kind"):
            return cause
    return row_cause


def attempt_timeline(
    run_dir: str, attempt: dict[str, Any], failed: list[Any], lost_hosts: list[Any] | None = None,
    decided: dict[str, Any] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """One attempt: its workers, the culprit, the epoch it resumed after and where its
    workers' metrics differ. The culprit and the causes come from the decision's record
    (``decided``) where one was written; else from the one rule (``culprit_of``) over the
    collected files and the wait's failed workers."""
    rows = [worker_timeline(run_dir, w, attempt["source"]) for w in attempt["workers"]]
    if decided is not None:
        culprit = as_dict(decided.get("culprit"))
        index = as_int(culprit.get("index"))
        said = {as_int(w.get("index")): w for w in decided.get("workers") or [] if isinstance(w, dict)}
        # A worker whose files no collect brought (its host lost for good) keeps its row,
        # as the record names it.
        seen = {row["index"] for row in rows}
        rows += [uncollected_row(w) for i, w in sorted(said.items(), key=lambda x: str(x[0]))
                 if i is not None and i not in seen]
        rows.sort(key=lambda row: row["index"])
        for row in rows:
            named = culprit.get("cause") if row["index"] == index and isinstance(culprit.get("cause"), dict) else None
            row["cause"] = named or decided_cause(row["cause"], said.get(row["index"]))
        extra = {"culprit_host": culprit.get("host"), "culprit_cause": culprit.get("cause"),
                 "decision": decided.get("decision"), "why": decided.get("why"),
                 "lost_hosts": decided.get("lost_hosts") or []}  # fmt: skip
    else:
        found = culprit_of(attempt["workers"], failed, lost_hosts)
        index = as_int(found["index"]) if found else None
        extra = {"culprit_host": found["host"] if found else None, "culprit_cause": found["cause"] if found else None,
                 "decision": None, "why": None, "lost_hosts": [str(h) for h in lost_hosts or []]}  # fmt: skip
    for row in rows:
        row["culprit"] = row["index"] == index
    resumed = [r["resumed_from_epoch"] for r in rows if r["resumed_from_epoch"] is not None]
    launched = [r["launched_at"] for r in rows if r["launched_at"] is not None]
    ends = [t for r in rows for t in (r["finished_at"], r["completed_at"], *r["epoch_at"].values()) if t is not None]
    return {
        "attempt": attempt["attempt"],
        "started_at": min(launched) if launched else None,
        "finished_at": max(ends) if ends else None,
        "culprit": index,
        **extra,
        "hosts": {str(r["index"]): r["host"] for r in rows},
        "resumed_from_epoch": min(resumed) if resumed else None,
        "workers": rows,
        "disagreements": metric_disagreements(rows),
    }


def timeline_of(summary: dict[str, Any], run_dir: str, attempts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per attempt (``attempt_timeline``): from the decision's record where the
    attempt failed and one was written; else with the wait's failed workers of that
    attempt (from the recorded attempts; the last one's from the wait outcome)."""
    context = as_dict(summary.get("context"))
    history = {as_int(h.get("attempt")): h for h in context.get("attempts") or [] if isinstance(h, dict)}
    timeline = []
    for attempt in attempts:
        outcome = as_dict((history.get(attempt["attempt"]) or {}).get("outcome"))
        if attempt is attempts[-1] and not outcome:
            outcome = as_dict(context.get("wait"))
        decided = decided_record(run_dir, attempt["attempt"])
        timeline.append(
            attempt_timeline(run_dir, attempt, outcome.get("failed_workers") or [], outcome.get("lost_hosts"), decided)
        )
    return timeline


# --- The console table and the file -----------------------------------------------------

MARKS = {OK: "ok", FAILED: "FAIL", NOT_CHECKED: "--"}


def left_out_lines(left_out: dict[str, list[dict[str, Any]]]) -> list[str]:
    """One line per file that stayed on its host because of tf_collect_max_mb."""
    return [
        f"not collected (over tf_collect_max_mb): {host}: {entry['path']} ({entry['bytes']} bytes)"
        for host, entries in sorted(left_out.items())
        for entry in entries
    ]


def epoch_lines(summary: dict[str, Any]) -> list[str]:
    """One line per epoch; for a long run only the first and last epochs and those a check
    names (the full list stays in summary.json)."""
    metrics = sorted(summary["metrics"].items(), key=lambda kv: int(kv[0]))
    details = " ".join(c["detail"] for c in summary["checks"] if c["ok"] is False)
    sources = summary.get("epoch_sources") or {}
    several = len(set(sources.values())) > 1

    def line(epoch: str, values: dict[str, str]) -> str:
        shown = " ".join(f"{k}={v}" for k, v in sorted(values.items()))
        return f"epoch {epoch}: {shown}" + (f" (attempt {sources[epoch]})" if several and epoch in sources else "")

    if len(metrics) <= TABLE_EPOCHS:
        return [line(e, m) for e, m in metrics]
    out = []
    hidden = 0
    for position, (epoch, values) in enumerate(metrics):
        if position < TABLE_ENDS or position >= len(metrics) - TABLE_ENDS or f"epoch {epoch} " in details or f"epoch {epoch}:" in details:
            if hidden:
                out.append(f"... {hidden} epoch(s) not shown (every epoch is in summary.json)")
                hidden = 0
            out.append(line(epoch, values))
        else:
            hidden += 1
    return out


def table(summary: dict[str, Any]) -> list[str]:
    """The verdict as the console shows it."""
    lines = [f"run {summary['run_id']}: {summary['status'].upper()}"]
    again = as_dict(summary.get("judged_again"))
    if again:
        lines.append(f"judged again from {again.get('judged_again')}; kept from the earlier judgement "
                     f"({again.get('from')}): {', '.join(again.get('kept') or [])}")  # fmt: skip
    if summary.get("reason"):
        lines.append(f"reason: {summary['reason']}")
    if summary.get("not_checked"):
        lines.append(f"not checked (the job's output does not show it): {', '.join(summary['not_checked'])}")
    timeline = {as_int(entry.get("attempt")): entry for entry in summary.get("timeline") or [] if isinstance(entry, dict)}
    for attempt in summary.get("attempts", [])[:-1]:
        entry = timeline.get(attempt["attempt"]) or {}
        if entry.get("culprit_host"):
            # The culprit and the decision as recorded when they were made (attempt-<n>.json).
            cause = as_dict(entry.get("culprit_cause"))
            who = (f"worker {entry['culprit']} on {entry['culprit_host']}" if entry.get("culprit") is not None
                   else f"host {entry['culprit_host']}")
            shown = f"culprit {who}: {cause.get('kind') or 'unknown'}"
            if entry.get("decision"):
                shown += f"; decided: {entry['decision']}"
        else:
            failed = [w for w in attempt["workers"] if w["exit_status"] != 0]
            shown = "; ".join(
                f"worker {w['index']} ({w['host']}) {w['exit_status']}: "
                f"{as_dict(w.get('cause')).get('kind') or w['exit_reason']}" for w in failed
            )
        lines.append(f"attempt {attempt['attempt']} failed: {shown}")
    if summary.get("attempt"):
        lines.append(f"verdict of the run over attempts 0..{summary['attempt']}:")
    lines.append(f"{'worker':>6}  {'host':<20} {'endpoint':<24} {'cause':<16} exit")
    for w in summary["workers"]:
        kind = as_dict(w.get("cause")).get("kind") or "-"
        task = f"  {w['task']}" if w.get("task") else ""
        lines.append(f"{w['index']:>6}  {w['host']:<20} {str(w['endpoint']):<24} {kind:<16} {w['exit_status']}{task}")
    lines += epoch_lines(summary)
    lines += evaluation_lines(summary.get("evaluator"))
    for entry in summary["checks"]:
        result = entry.get("result") or (OK if entry["ok"] else FAILED)
        lines.append(f"[{MARKS[result]:>4}] {entry['name']}: {entry['detail']}")
    lines.extend(left_out_lines(as_dict(as_dict(summary.get("context")).get("left_out"))))
    return lines


def write_summary(run_dir: str, summary: dict[str, Any]) -> None:
    """summary.json, atomically, readable by its owner alone (0600 in a 0700 directory:
    the run's logs and metrics are the user's)."""
    os.makedirs(run_dir, mode=0o700, exist_ok=True)
    os.chmod(run_dir, 0o700)
    path = os.path.join(run_dir, SUMMARY_FILE)
    write_json_atomic(path, summary)
    os.chmod(path, 0o600)


def verdict(params: dict[str, Any], check_mode: bool) -> dict[str, Any]:
    """Judge the run and write its summary.json (not in check mode): the task's result.

    A run whose directory is not on the controller is refused, nothing written: no host
    gave a file of it (the collect makes the directory for the first file it brings) and
    this controller never launched it (the preflight claims the directory first). Judged,
    a mistyped ``-e tf_run_id`` would get a failed summary, and the id would count as used."""
    run_dir = params["run_dir"]
    if not os.path.lexists(run_dir):
        return {
            "failed": True, "changed": False,
            "msg": (f"Run {params['run_id']}: nothing to judge: no host gave a file of this run and this controller "
                    f"never launched it ({run_dir} does not exist); check -e tf_run_id (the runs this controller "
                    f"knows are under {os.path.dirname(os.path.normpath(run_dir)) or '.'})"),
        }
    context = params.get("context") or {}
    try:
        inputs, kept = recorded_inputs(run_dir, params)
    except Exception:  # noqa: BLE001 - an unreadable earlier summary is no earlier judgement
        inputs, kept = {"expected_size": params.get("expected_size") or 0, **{o: params.get(o) for o in INPUTS}}, None
    attempts = None
    try:
        attempts = load_attempts(run_dir, params["marker"])
        keep_for_its_attempt(inputs, kept, attempts[-1]["attempt"])
        summary = summarize_run(params["run_id"], run_dir, params["marker"], inputs["expected_size"], inputs, context, attempts)
    except Exception as exc:  # noqa: BLE001 - whatever the run holds, a summary.json is written
        summary = unreadable_summary(params["run_id"], f"{type(exc).__name__}: {exc}", context)
    summary["judged_again"] = kept
    try:
        summary["timeline"] = timeline_of(summary, run_dir, attempts or [])
    except Exception as exc:  # noqa: BLE001 - the report's data never costs the verdict its summary
        summary["timeline"] = []
        summary["timeline_error"] = f"{type(exc).__name__}: {exc}"
    if not check_mode:
        try:
            write_summary(run_dir, summary)
        except OSError as exc:
            return {"failed": True, "msg": f"cannot write {run_dir}/{SUMMARY_FILE}: {exc}", "summary": summary}
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
