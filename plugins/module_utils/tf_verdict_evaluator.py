# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The sidecar evaluator in the verdict (issue 41): judged apart from the training.

The evaluator (task type ``evaluator``, a host in tf_evaluator) is taken out of every
attempt before the training's checks read it: its metrics are not a worker's, and its
end is not the training's. It gets an entry of its own in summary.json (``evaluator``):
how it ended (``completed`` by itself, ``stopped`` by the runbook once the training ended
or the run stopped, ``failed``, or ``unknown`` when no exit record of it came back: its
host lost), its exit status, cause and log, and one line of metrics per checkpoint it
evaluated (tf_metrics.parse_evaluations); ``lost`` where the wait recorded that its host
stopped answering and let the training go on (tf_wait_outcome's ``evaluator_lost``). Only an evaluator the user required
(tf_evaluator_required, recorded in its exit.json) has a check, ``evaluator``, which a
failed or lost one fails; any other failure is reported, never the run's.
"""

from __future__ import annotations

import os
from typing import Any

from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_causes import cause_of
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_metrics import parse_evaluations
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import EVALUATOR, LOG_FILE
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_verdict_run import as_dict, parse_attempt, task_of

# How an evaluator ended. LOST: its host stopped answering during the run, and the wait
# let the training go on (tf_wait_outcome's evaluator_lost, the evaluator not required).
COMPLETED, STOPPED, FAILED, UNKNOWN, LOST = "completed", "stopped", "failed", "unknown", "lost"


def is_evaluator(worker: dict[str, Any]) -> bool:
    return task_of(worker)[0] == EVALUATOR


def split_evaluator(attempts: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The attempts without their evaluator (parsed again, so that the source of their
    epochs is the training's alone), and the final attempt's evaluator(s)."""
    if not any(is_evaluator(w) for a in attempts for w in a["workers"]):
        return attempts, []
    training = [parse_attempt([w for w in a["workers"] if not is_evaluator(w)], a["attempt"]) for a in attempts]
    return training, [w for w in attempts[-1]["workers"] if is_evaluator(w)]


def ending_of(exit_: dict[str, Any]) -> str:
    """How the evaluator ended, from its exit record."""
    if not exit_:
        return UNKNOWN
    if exit_.get("returncode") == 0:
        return COMPLETED
    if exit_.get("training_ended") is True or exit_.get("stopped_by") in ("runbook", "operator"):
        return STOPPED
    return FAILED


def evaluator_entry(worker: dict[str, Any]) -> dict[str, Any]:
    """summary.json's ``evaluator``."""
    exit_ = as_dict(worker.get("exit"))
    received = as_dict(exit_.get("checkpoint_receive"))
    ending = ending_of(exit_)
    return {
        "index": worker["index"],
        "host": worker["host"],
        "status": ending,
        "required": received.get("required") is True,
        "exit_status": exit_.get("returncode"),
        "reason": exit_.get("reason"),
        "cause": cause_of(exit_) if ending in (FAILED, UNKNOWN) and exit_ else None,
        "stopped_by": exit_.get("stopped_by"),
        "training_ended": exit_.get("training_ended") is True,
        "checkpoints_received": received.get("received"),
        "log": os.path.join(worker["dir"], LOG_FILE),
        "evaluations": parse_evaluations(worker.get("log") or ""),
    }


def lost_evaluator(wait: Any) -> dict[str, Any] | None:
    """The wait's record of a lost sidecar evaluator's host (``evaluator_lost``'s first
    entry: ``host``, ``workers``), or None."""
    entries = [e for e in as_dict(wait).get("evaluator_lost") or [] if isinstance(e, dict) and e.get("host")]
    return entries[0] if entries else None


def with_lost_host(entry: dict[str, Any] | None, wait: Any) -> dict[str, Any] | None:
    """summary.json's ``evaluator`` where the wait knows its host was lost: the entry of
    the files that came back, marked ``lost`` where no exit record of it did; or, when none
    of its files came back (the collect leaves a lost host out), an entry from the wait's
    record alone (no log). Unchanged otherwise."""
    lost = lost_evaluator(wait)
    if lost is None or (entry is not None and (entry["status"] != UNKNOWN or entry["host"] != str(lost["host"]))):
        return entry
    if entry is not None:
        return {**entry, "status": LOST, "cause": None}
    indices = [i for i in lost.get("workers") or [] if isinstance(i, int)]
    index = indices[0] if indices else None
    return {
        "index": index, "host": str(lost["host"]), "status": LOST, "required": False, "exit_status": None,
        "reason": None, "cause": None, "stopped_by": None, "training_ended": False, "checkpoints_received": None,
        "log": None, "evaluations": [],
    }


def evaluator_line(entry: dict[str, Any]) -> str:
    """One line on how the evaluator ended, naming its cause and log when it failed."""
    done = len(entry["evaluations"])
    last = entry["evaluations"][-1]["epoch"] if done else None
    evaluated = f"{done} checkpoint(s) evaluated" + (f", the last of epoch {last}" if done else "")
    where = f"evaluator (worker {entry['index']}, {entry['host']})"
    if entry["status"] == COMPLETED:
        return f"{where}: completed, {evaluated}"
    if entry["status"] == STOPPED:
        by = "once the training ended" if entry["training_ended"] else f"({entry['stopped_by']})"
        return f"{where}: stopped by the runbook {by}, {evaluated}"
    if entry["status"] == LOST:
        after = "the run fails (tf_evaluator_required)" if entry["required"] else "not required: the training went on"
        return (f"{where}: LOST, its host stopped answering during the run, no exit record and no log came back; "
                f"{evaluated}; {after}")
    kind = as_dict(entry.get("cause")).get("kind") or "unknown"
    what = "no exit record came back (its host lost?)" if entry["status"] == UNKNOWN else (
        f"exit status {entry['exit_status']}: {kind}: {entry['reason']}")
    after = "the run fails (tf_evaluator_required)" if entry["required"] else "not required: the training went on"
    return f"{where}: FAILED, {what}; {evaluated}; {after}; log: {entry['log']}"


def evaluator_check(entry: dict[str, Any]) -> dict[str, Any] | None:
    """The ``evaluator`` check, for a required evaluator only."""
    if not entry["required"]:
        return None
    ok = entry["status"] in (COMPLETED, STOPPED)
    return {"name": "evaluator", "ok": ok, "result": "ok" if ok else "failed", "detail": evaluator_line(entry)}


def evaluation_lines(entry: dict[str, Any] | None) -> list[str]:
    """The console's lines: how it ended, then one per evaluated checkpoint."""
    if not entry:
        return []
    lines = [evaluator_line(entry)]
    for evaluation in entry["evaluations"]:
        shown = " ".join(f"{k}={v}" for k, v in sorted(evaluation["metrics"].items()))
        lines.append(f"  evaluated epoch {evaluation['epoch']}: {shown}")
    return lines
