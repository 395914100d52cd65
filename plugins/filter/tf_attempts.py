"""What follows a failed attempt: another one, or the end of the run, and why."""

from __future__ import annotations

import os
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import (
    CAUSES,
    CHECKPOINT_SYNC_PREFIX,
    PREEMPTION_EXIT,
    VICTIM_STOPS,
)

# Why a cause that tf_restart_on leaves out is not worth another attempt, as the output
# says it; a kind not named here gets the generic sentence.
NOT_RESTARTED = {
    "job-error": "a restart cannot fix the job's own error",
    "deadline": "the run's deadline (tf_job_timeout) has passed",
    "out-of-memory": "a restart would run out of memory the same way",
    "startup": "a worker that could not join the cluster would not join a new one either",
    "restore-mismatch": "the workers restored different checkpoints",
    "unknown": "the runbook could not tell why it ended",
}
# Kinds a worker stopped because of someone else carries: a victim, never the cause.
VICTIM_KINDS = ("runbook", "operator")


def fallback_kind(worker: dict[str, Any]) -> str:
    """The cause kind of a failed worker whose status carries no cause (a status from a
    supervisor older than the causes): told from its structured fields only."""
    stopped_by = worker.get("stopped_by")
    if stopped_by == "operator":
        return "operator"
    if stopped_by in VICTIM_STOPS:
        return "runbook"
    if stopped_by == "job-deadline":
        return "deadline"
    if stopped_by == "startup-deadline":
        return "startup"
    if stopped_by == "controller":
        return "controller-lost"
    code = worker.get("returncode")
    if code == PREEMPTION_EXIT:
        return "preempted"
    if code in (137, -9) or worker.get("signal") == "SIGKILL":
        return "killed"
    if code in (143, -15) or worker.get("signal") == "SIGTERM":
        return "preempted"
    return "unknown"


def worker_cause(worker: dict[str, Any]) -> dict[str, Any]:
    """The cause of a failed worker of the wait's outcome: its own, or one told from its
    exit fields."""
    cause = worker.get("cause")
    if isinstance(cause, dict) and cause.get("kind") in CAUSES:
        return cause
    return {"kind": fallback_kind(worker), "detail": str(worker.get("reason") or "")}


def is_victim(worker: dict[str, Any]) -> bool:
    """Stopped by the runbook, an operator or a peer because of someone else."""
    return worker.get("stopped_by") in VICTIM_STOPS or worker_cause(worker)["kind"] in VICTIM_KINDS


def cause_text(cause: dict[str, Any]) -> str:
    """``job-error (ModuleNotFoundError: No module named 'x')``: the kind and what it says."""
    if cause.get("exception"):
        said = f"{cause['exception']}: {cause['message']}" if cause.get("message") else str(cause["exception"])
    else:
        said = str(cause.get("detail") or "")
    return f"{cause['kind']} ({said})" if said else str(cause["kind"])


def failure(outcome: dict[str, Any]) -> dict[str, Any]:
    """What made a failed attempt fail: ``{"kind", "who", "text", "culprit"}``.

    An operator's stop first (a decision, never a failure); then a lost host (its peers
    fail only because it went away), a stall (every worker is alive), a passed deadline
    (no time is left), a host whose status the wait could not read (what runs there is
    unknown), and last the first failed worker that is no victim (its own cause), one
    that failed first-hand before one that only lost its peer."""
    failed = [w for w in outcome.get("failed_workers") or [] if isinstance(w, dict)]
    if outcome.get("stopped_by_operator") or any(worker_cause(w)["kind"] == "operator" for w in failed):
        return {"kind": "operator", "who": "the run", "text": "operator", "culprit": None}
    if outcome.get("lost_hosts"):
        hosts = ", ".join(str(h) for h in outcome["lost_hosts"])
        return {"kind": "host-lost", "who": f"host {hosts}", "text": "host-lost (it stopped answering)",
                "culprit": None}
    stalled = outcome.get("stalled")
    if stalled:
        detail = stalled.get("detail") if isinstance(stalled, dict) else ""
        return {"kind": "stalled", "who": "the run", "text": cause_text({"kind": "stalled", "detail": detail}),
                "culprit": None}
    if outcome.get("deadline_hosts"):
        hosts = ", ".join(str(h) for h in outcome["deadline_hosts"])
        return {"kind": "deadline", "who": f"host {hosts}", "text": "deadline (the job deadline passed)",
                "culprit": None}
    if outcome.get("status_problems") or not failed:
        problems = "; ".join(str(p) for p in outcome.get("status_problems") or []) or "no worker failed"
        return {"kind": "unknown", "who": "the wait", "text": f"unknown ({problems})", "culprit": None,
                "unread": True}
    culprits = [w for w in failed if not is_victim(w)]
    # A worker that lost its peer failed because of another: the other's cause decides.
    first_hand = [w for w in culprits if worker_cause(w)["kind"] != "peer-lost"]
    worker = (first_hand or culprits or failed)[0]
    # Only victims: stopped because of a failure no status shows (a peer's, heard by
    # them): what a restart fixes when a peer went away.
    cause = worker_cause(worker) if culprits else {
        "kind": "peer-lost", "detail": f"stopped by the {worker.get('stopped_by') or 'runbook'} after a peer failed"}
    host = f" on {worker['host']}" if worker.get("host") else ""
    return {"kind": cause["kind"], "who": f"worker {worker.get('index')}{host}", "text": cause_text(cause),
            "culprit": worker.get("index")}


def check_restart_on(restart_on: Any) -> list[str]:
    """``tf_restart_on`` as a list of cause kinds; an unknown kind is refused by name."""
    if isinstance(restart_on, str) or not isinstance(restart_on, (list, tuple)):
        raise AnsibleFilterError(f"tf_restart_on must be a list of causes, not {restart_on!r}")
    unknown = [kind for kind in restart_on if kind not in CAUSES]
    if unknown:
        raise AnsibleFilterError(
            f"tf_restart_on: {', '.join(repr(k) for k in unknown)} is no cause; the causes are {', '.join(CAUSES)}"
        )
    return list(restart_on)


def tf_attempts_decision(
    outcome: dict[str, Any],
    attempt: int,
    attempts: int,
    now: float,
    deadline: float,
    restart_on: list[str],
) -> dict[str, Any]:
    """Whether another attempt follows this one, and why, in one sentence a user reads.

    Returns ``{"restart": bool, "why": text, "cause": kind, "culprit": index or None}``.
    The culprit's cause decides; a worker the runbook, an operator or a peer stopped is a
    victim, never the cause."""
    if not isinstance(outcome, dict):
        raise AnsibleFilterError(f"tf_attempts_decision: the wait's outcome must be a mapping, not {outcome!r}")
    kinds = check_restart_on(restart_on)
    if outcome.get("ok"):
        return {"restart": False, "why": "the attempt succeeded", "cause": "completed", "culprit": None}
    found = failure(outcome)
    kind, said = found["kind"], f"{found['who']} failed with {found['text']}"
    decision = {"restart": False, "cause": kind, "culprit": found["culprit"]}
    if kind == "operator":
        why = ("it was stopped by an operator (stop.yml): no restart; continue it later with "
               "-e tf_run_id=<id> -e tf_resume=true")
    elif found.get("unread"):
        why = f"the wait could not tell what ended the attempt ({found['text']}): no worker's own failure, no restart"
    elif kind not in kinds:
        reason = NOT_RESTARTED.get(kind, "tf_restart_on does not list it")
        why = f"{said}: {reason}; to restart it anyway add {kind} to tf_restart_on"
    elif kind == "host-lost":
        # The wait's lost hosts have left the play: a restart in this playbook would start
        # a cluster without them. Once they answer again, a resume restarts the run.
        why = (f"{said}: a host that stopped answering cannot rejoin this playbook's cluster; once it answers "
               "again, continue the run with -e tf_run_id=<id> -e tf_resume=true")
    elif int(attempt) >= int(attempts):
        why = (f"{said}, which tf_restart_on restarts, but no restart is left "
               f"(tf_restart_attempts={int(attempts)}); raise tf_restart_attempts to allow more")
    elif float(deadline) and float(now) >= float(deadline):
        why = f"{said}, but the run's deadline (tf_job_timeout) has passed: no time for another attempt"
    else:
        decision["restart"] = True
        why = f"{said}: restarting it, attempt {int(attempt) + 1} of at most {int(attempts)} restarts"
    decision["why"] = why
    return decision


def tf_attempts_sync_record(
    looks: dict[str, Any], packed: Any, unpacked: dict[str, Any], chief: str, attempt: int, seconds: float,
    run_dir: str,
) -> dict[str, Any]:
    """What the copy of the chief's checkpoint before ``attempt`` did: ``{"path", "record",
    "message"}``, the record written at ``path`` in the run's directory on the controller.

    ``looks`` maps each other host to its look (``shared``), ``packed`` is the chief's
    pack result, ``unpacked`` maps each host that took the copy to its unpack result."""
    def result(value: Any) -> dict[str, Any]:
        return value if isinstance(value, dict) and not value.get("skipped") else {}

    shared = sorted(host for host, look in (looks or {}).items() if result(look).get("shared"))
    copied = {host: result(value) for host, value in (unpacked or {}).items() if result(value)}
    pack = result(packed)
    files, size = int(pack.get("files") or 0), int(pack.get("bytes") or 0)
    megabytes = round(size / 1e6, 1)
    record = {
        "attempt": int(attempt), "chief": chief, "shared": shared, "copied_to": sorted(copied),
        "files": files, "bytes": size, "seconds": round(float(seconds), 2),
        "removed": {host: value.get("removed", []) for host, value in sorted(copied.items()) if value.get("removed")},
    }  # fmt: skip
    if copied:
        message = (f"Copied the chief's checkpoint ({chief}: {files} files, {megabytes} MB) through the controller "
                   f"to {', '.join(sorted(copied))} in {record['seconds']} s")
    elif len(shared) < len(looks or {}):
        message = f"The chief's checkpoint directory on {chief} holds no file yet: nothing to copy"
    else:
        message = f"Every host shares the chief's checkpoint directory ({chief}): nothing to copy"
    if shared and copied:
        message += f"; {', '.join(shared)} share it"
    sharing = pack.get("shares_with") if isinstance(pack.get("shares_with"), dict) else {}
    if sharing and copied:
        record["shares_with"] = {str(host): str(sharing[host]) for host in sorted(sharing)}
        said = [f"{host} shares {copier}'s directory" for host, copier in record["shares_with"].items()]
        message += "; " + ", ".join(said)
    for key, said in (("links_left_out", "symbolic links are not copied"),
                      ("hard_links", "hard links copied as plain files")):  # fmt: skip
        links = [str(link) for link in pack.get(key) or []]
        if links:
            record[key] = links
            shown = ", ".join(links[:5]) + (f" and {len(links) - 5} more" if len(links) > 5 else "")
            message += f"; {said}: {shown}"
    redone = sorted(host for host, value in copied.items() if value.get("redone"))
    if redone:
        record["redone"] = redone
        message += f"; redid the interrupted copy on {', '.join(redone)}"
    path = os.path.join(str(run_dir), f"{CHECKPOINT_SYNC_PREFIX}{int(attempt)}.json")
    return {"path": path, "record": {**record, "message": message}, "message": message}


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Any]:
        return {"tf_attempts_decision": tf_attempts_decision, "tf_attempts_sync_record": tf_attempts_sync_record}
