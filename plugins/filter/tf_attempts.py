"""What follows a failed attempt: another one, or the end of the run, and why."""

from __future__ import annotations

import json
import os
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_causes import (
    CAUSES,
    attempt_failure,
    cause_text,
)
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import (
    CHECKPOINT_SYNC_PREFIX,
    attempt_record_file,
    printable,
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
    workers: list[dict[str, Any]] | None = None,
    host_lost_wait: int = 0,
) -> dict[str, Any]:
    """Whether another attempt follows this one, and why, in one sentence a user reads.

    A lost host is restarted only after it answers again: with ``host_lost_wait``
    seconds (tf_host_lost_wait) the decision restarts and names the hosts to wait for
    (``wait_for_hosts``); with 0 the run ends, to be resumed.

    Returns ``{"restart": bool, "why": text, "cause": kind, "culprit": index or None,
    "failure": what tf_causes.attempt_failure found}``; ``workers`` is the cluster spec's
    list (index and host), which names the worker of a lost host.
    The culprit's cause decides; a worker the runbook, an operator or a peer stopped is a
    victim, never the cause."""
    if not isinstance(outcome, dict):
        raise AnsibleFilterError(f"tf_attempts_decision: the wait's outcome must be a mapping, not {outcome!r}")
    kinds = check_restart_on(restart_on)
    if outcome.get("ok"):
        return {"restart": False, "why": "the attempt succeeded", "cause": "completed", "culprit": None}
    found = attempt_failure(outcome, workers)
    kind, said = found["kind"], f"{found['who']} failed with {found['text']}"
    decision = {"restart": False, "cause": kind, "culprit": found["culprit"], "failure": found,
                "decided_at": float(now)}
    if kind == "operator":
        why = ("it was stopped by an operator (stop.yml): no restart; continue it later with "
               "-e tf_run_id=<id> -e tf_resume=true")
    elif found.get("unread"):
        why = f"the wait could not tell what ended the attempt ({found['text']}): no worker's own failure, no restart"
    elif kind not in kinds:
        reason = NOT_RESTARTED.get(kind, "tf_restart_on does not list it")
        why = f"{said}: {reason}; to restart it anyway add {kind} to tf_restart_on"
    elif kind == "host-lost" and not int(host_lost_wait):
        # The wait's lost hosts have left the play, and tf_host_lost_wait 0 waits for none:
        # once they answer again, a resume restarts the run.
        why = (f"{said}: a host that stopped answering cannot rejoin this playbook's cluster (tf_host_lost_wait 0); "
               "once it answers again, continue the run with -e tf_run_id=<id> -e tf_resume=true")
    elif int(attempt) >= int(attempts):
        why = (f"{said}, which tf_restart_on restarts, but no restart is left "
               f"(tf_restart_attempts={int(attempts)}); raise tf_restart_attempts to allow more")
    elif float(deadline) and float(now) >= float(deadline):
        why = f"{said}, but the run's deadline (tf_job_timeout) has passed: no time for another attempt"
    elif kind == "host-lost":
        decision.update(restart=True, wait_for_hosts=[str(h) for h in outcome.get("lost_hosts") or []])
        why = (f"{said}: waiting up to {int(host_lost_wait)} s (tf_host_lost_wait) for it to answer again, then "
               f"restarting it, attempt {int(attempt) + 1} of at most {int(attempts)} restarts")
    else:
        decision["restart"] = True
        why = f"{said}: restarting it, attempt {int(attempt) + 1} of at most {int(attempts)} restarts"
    decision["why"] = why
    return decision


def tf_attempts_gave_up(
    decision: dict[str, Any], silent: list[str], wait: int, run_id: str, note: str = ""
) -> dict[str, Any]:
    """The decision once the hosts ``silent`` did not answer within the ``wait`` seconds
    of tf_host_lost_wait: no restart, and the complete command that continues the run;
    ``note`` says why no spare took their place."""
    if not isinstance(decision, dict) or not silent:
        raise AnsibleFilterError("tf_attempts_gave_up: a decision and the hosts that stayed silent are needed")
    why = (f"host {', '.join(str(h) for h in silent)} did not answer within {int(wait)} s (tf_host_lost_wait): no "
           f"restart without it{f' ({note})' if note else ''}; once it answers again, continue the run with "
           f"-e tf_run_id={run_id} -e tf_resume=true")
    return {**decision, "restart": False, "wait_for_hosts": [], "why": why}


def _workers_of(spec: dict[str, Any], host: str) -> str:
    indices = [str(w["index"]) for w in spec.get("workers", []) if w.get("host") == host]
    return ("worker " if len(indices) == 1 else "workers ") + ", ".join(indices)


def tf_attempts_takeover(
    decision: dict[str, Any], silent: list[str], spec: dict[str, Any], min_workers: int, wait: int, run_id: str,
    now: float, answering: list[str] | None = None,
) -> dict[str, Any]:
    """The decision once the hosts ``silent`` stayed lost past the ``wait`` seconds of
    tf_host_lost_wait: each takes the first spare left (``spec``'s ``spares``, in
    inventory order) with slots enough for its workers, which keeps their indices; a host
    no spare can replace leaves the cluster, and the workers after it move down, only
    while ``min_workers`` (tf_min_workers, 0: never) workers remain. Otherwise the run
    gives up (tf_attempts_gave_up).

    A takeover's decision does not restart in the play that decided it: ``takeover``
    holds what the next play (takeover.yml) needs: ``replaced`` (lost host to spare),
    ``dropped``, ``hosts`` (the new cluster's hosts in worker order), ``spares`` (the
    spares that join), ``source`` (a host of the old cluster that holds the chief's
    checkpoint: the chief, or where the chief is lost the first host left, which holds the
    last copy of it) and ``lines`` (what the output says). With ``answering`` (the spares
    that answered just before), a spare that did not is passed over, and said so."""
    if not isinstance(decision, dict) or not isinstance(spec, dict) or not silent:
        raise AnsibleFilterError("tf_attempts_takeover: a decision, the cluster spec and the silent hosts are needed")
    silent = [str(h) for h in silent]
    lost_for = int(max(0.0, float(now) - float(decision.get("decided_at") or now)) + 0.5)
    free = [s for s in spec.get("spares", []) if isinstance(s, dict)]
    passed_over = [] if answering is None else [s["host"] for s in free if s["host"] not in answering]
    free = [s for s in free if s["host"] not in passed_over]
    slots = {h: sum(1 for w in spec["workers"] if w["host"] == h) for h in silent}
    replaced: dict[str, str] = {}
    for host in silent:
        spare = next((s for s in free if int(s.get("slots", 1)) >= slots[host]), None)
        if spare is not None:
            replaced[host] = spare["host"]
            free.remove(spare)
    dropped = [h for h in silent if h not in replaced]
    size = len(spec["workers"]) - sum(slots[h] for h in dropped)
    silent_spares = f"spare {', '.join(passed_over)} did not answer" if passed_over else ""
    if dropped and (not int(min_workers) or size < int(min_workers)):
        note = spare_note(spec, replaced, min_workers, size)
        return tf_attempts_gave_up(decision, dropped, wait, run_id, f"{silent_spares}; {note}" if silent_spares
                                   else note)
    lines = ([silent_spares] if silent_spares else []) + [
        f"{spare} takes the place of {host} (lost {lost_for} s ago) as {_workers_of(spec, host)}"
        for host, spare in replaced.items()]  # fmt: skip
    if dropped:
        before = len(spec["workers"])
        moved = []
        kept = [w for w in spec["workers"] if w["host"] not in dropped]
        for new_index, worker in enumerate(kept):
            if worker["index"] != new_index:
                moved.append(f"worker {worker['index']} on {replaced.get(worker['host'], worker['host'])} "
                             f"becomes worker {new_index}")
        lines.append(
            f"the cluster shrinks from {before} to {size} workers without {', '.join(dropped)} (no spare left; "
            f"tf_min_workers {int(min_workers)})" + (": " + ", ".join(moved) if moved else "")
            + f"; the global batch shrinks with it, to {size}/{before} of what it was (per-worker batch x workers)")
    survivors = [h for h in dict.fromkeys(w["host"] for w in spec["workers"]) if h not in silent]
    chief = spec["workers"][0]["host"]
    source = chief if chief not in silent else (survivors[0] if survivors else "")
    if chief in silent and source:
        lines.append(f"the chief's host {chief} is lost: its last checkpoint comes from the copy {source} holds "
                     "(made at the last restart; epochs saved since then are lost with it)")
    hosts = [replaced.get(h, h) for h in dict.fromkeys(w["host"] for w in spec["workers"]) if h not in dropped]
    why = "; ".join(lines) + "; the cluster restarts with it"
    takeover = {"replaced": replaced, "dropped": dropped, "hosts": hosts, "spares": list(replaced.values()),
                "source": source, "lines": lines, "size": size}  # fmt: skip
    return {**decision, "restart": False, "wait_for_hosts": [], "takeover": takeover, "why": why}


def spare_note(spec: dict[str, Any], replaced: dict[str, str], min_workers: int, size: int) -> str:
    """Why no spare or smaller cluster could go on, for the give-up's sentence."""
    spares = [s.get("host") for s in spec.get("spares", []) if isinstance(s, dict)]
    if not spares:
        note = "no spare host (tf_spares)"
    else:
        took = f" ({', '.join(replaced.values())} took a place)" if replaced else ""
        note = "no spare left with enough slots" + took
    if int(min_workers):
        note += f", and {size} workers would be fewer than tf_min_workers {int(min_workers)}"
    else:
        note += ", and the cluster does not shrink (tf_min_workers 0)"
    return note


def decision_name(decision: dict[str, Any]) -> str:
    """What was decided, as one word of the record: ``restart``, ``take-spare``,
    ``shrink``, ``wait-for-host``, ``stop`` (an operator's), or ``give-up``."""
    takeover = decision.get("takeover")
    if isinstance(takeover, dict):
        return "take-spare" if takeover.get("replaced") else "shrink"
    if decision.get("wait_for_hosts"):
        return "wait-for-host" if decision.get("restart") else "give-up"
    if decision.get("restart"):
        return "restart"
    return "stop" if decision.get("cause") == "operator" else "give-up"


def tf_attempts_record(
    decision: dict[str, Any], outcome: dict[str, Any], attempt: int, workers: list[dict[str, Any]], run_dir: str,
    now: float,
) -> dict[str, Any]:
    """The record of the decision made after a failed attempt, written when it is made:
    ``{"path", "record"}``, the record (tf_run.ATTEMPT_RECORD) at ``path`` in the run's
    directory on the controller. It holds the culprit (worker, host and cause, as
    tf_causes.attempt_failure found it), the lost hosts, every worker with its host and
    the cause the wait saw (None for one still running, stopped after the decision), what
    was decided and why. The verdict and the report read it instead of deriving it again."""
    if not isinstance(decision, dict) or not isinstance(outcome, dict):
        raise AnsibleFilterError("tf_attempts_record: the decision and the wait's outcome must be mappings")
    failure = decision.get("failure") if isinstance(decision.get("failure"), dict) else {}
    seen = {w.get("index"): w for w in outcome.get("failed_workers") or [] if isinstance(w, dict)}
    lost = [str(h) for h in outcome.get("lost_hosts") or []]
    rows = []
    for worker in workers or []:
        index, host = worker.get("index"), worker.get("host")
        failed = seen.get(index)
        cause = failed.get("cause") if failed else None
        if host in lost:
            cause = {"kind": "host-lost", "detail": f"{host} stopped answering"}
        rows.append({"index": index, "host": host, "cause": cause, "lost": host in lost})
    culprit = None
    if failure.get("culprit") is not None or failure.get("host"):
        culprit = {"index": failure.get("culprit"), "host": failure.get("host"), "cause": failure.get("cause")}
    record = {
        "attempt": int(attempt), "decided_at": float(now), "ok": False, "cause": decision.get("cause"),
        "culprit": culprit, "who": failure.get("who"), "lost_hosts": lost, "workers": rows,
        "decision": decision_name(decision), "why": decision.get("why"),
    }  # fmt: skip
    takeover = decision.get("takeover")
    if isinstance(takeover, dict):
        record["takeover"] = {key: takeover.get(key) for key in ("replaced", "dropped", "hosts", "source", "lines")}
    return {"path": os.path.join(str(run_dir), attempt_record_file(int(attempt))), "record": record}


def tf_attempts_record_lines(records: Any) -> list[str]:
    """One line per recorded decision (the texts of ``attempt-<n>.json``, in any order), by
    attempt: which host ran which worker, the culprit and its cause, what was decided.
    A text that is not a record is named, not skipped in silence."""
    parsed = []
    for text in records or []:
        try:
            record = json.loads(text) if isinstance(text, str) else text
        except ValueError:
            record = None
        if not isinstance(record, dict) or not isinstance(record.get("attempt"), int):
            parsed.append((float("inf"), "an attempt record that cannot be read"))
            continue
        hosts = ", ".join(f"worker {w.get('index')} on {w.get('host')}" for w in record.get("workers") or []
                          if isinstance(w, dict))  # fmt: skip
        culprit = record.get("culprit") if isinstance(record.get("culprit"), dict) else None
        if culprit:
            who = f"worker {culprit.get('index')} on {culprit.get('host')}" if culprit.get("index") is not None else (
                f"host {culprit.get('host')}")
            blamed = f"culprit {who}: {cause_text(culprit.get('cause') or {'kind': record.get('cause')})}"
        else:
            blamed = f"no single culprit ({record.get('cause')})"
        line = f"attempt {record['attempt']}: {hosts}; {blamed}; decided: {record.get('decision')}"
        takeover = record.get("takeover") if isinstance(record.get("takeover"), dict) else {}
        if takeover.get("lines"):
            line += " (" + "; ".join(str(said) for said in takeover["lines"]) + ")"
        parsed.append((record["attempt"], printable(line)))
    return [line for _attempt, line in sorted(parsed, key=lambda item: item[0])]


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
    pack = result(packed)
    relayed = {str(host): value for host, value in (pack.get("relayed") or {}).items() if isinstance(value, dict)}
    through = {host: result(value) for host, value in (unpacked or {}).items() if result(value)}
    copied = {**through, **relayed}
    files, size = int(pack.get("files") or 0), int(pack.get("bytes") or 0)
    megabytes = round(size / 1e6, 1)
    record = {
        "attempt": int(attempt), "chief": chief, "shared": shared, "copied_to": sorted(copied),
        "files": files, "bytes": size, "seconds": round(float(seconds), 2),
        "removed": {host: value.get("removed", []) for host, value in sorted(copied.items()) if value.get("removed")},
    }  # fmt: skip
    skipped = pack.get("skipped_hosts") if isinstance(pack.get("skipped_hosts"), dict) else {}
    if skipped:
        record["skipped"] = {str(host): str(why) for host, why in sorted(skipped.items())}
    fallback = pack.get("relay_fallback") if isinstance(pack.get("relay_fallback"), dict) else {}
    if relayed:
        record["relayed"] = sorted(relayed)
    if fallback:
        record["relay_fallback"] = {str(host): str(why) for host, why in sorted(fallback.items())}
    if relayed:
        parts = [f"host to host to {', '.join(sorted(relayed))} (sent once by {chief}, each host passing it on to the "
                 "next; none of it through the controller)"]
        if through:
            whys = [f"{host}: {fallback[host]}" for host in sorted(through) if host in fallback]
            parts.append(f"through the controller to {', '.join(sorted(through))}"
                         + (f" ({'; '.join(whys)})" if whys else ""))
        message = (f"Copied the chief's checkpoint ({chief}: {files} files, {megabytes} MB) {'; '.join(parts)} "
                   f"in {record['seconds']} s")
    elif copied:
        message = (f"Copied the chief's checkpoint ({chief}: {files} files, {megabytes} MB) through the controller "
                   f"to {', '.join(sorted(copied))} in {record['seconds']} s")
        whys = [f"{host}: {fallback[host]}" for host in sorted(copied) if host in fallback]
        if whys:
            message += f" (the relay between hosts did not serve them: {'; '.join(whys)})"
    elif skipped:
        message = (f"Copied the chief's checkpoint ({chief}: {files} files, {megabytes} MB) to no host: every host "
                   f"that does not share its directory holds it already ({record['seconds']} s)")
    elif len(shared) < len(looks or {}):
        message = f"The chief's checkpoint directory on {chief} holds no file yet: nothing to copy"
    else:
        message = f"Every host shares the chief's checkpoint directory ({chief}): nothing to copy"
    if skipped:
        reasons: dict[str, list[str]] = {}
        for host, why in record["skipped"].items():
            reasons.setdefault(why, []).append(host)
        message += "; skipped " + "; ".join(f"{', '.join(hosts)} ({why})" for why, hosts in reasons.items())
    if shared and (copied or skipped):
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
        return {
            "tf_attempts_decision": tf_attempts_decision,
            "tf_attempts_gave_up": tf_attempts_gave_up,
            "tf_attempts_takeover": tf_attempts_takeover,
            "tf_attempts_record": tf_attempts_record,
            "tf_attempts_record_lines": tf_attempts_record_lines,
            "tf_attempts_sync_record": tf_attempts_sync_record,
        }
