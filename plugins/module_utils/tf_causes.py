# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Why a worker ended, in one place (issues 23 and 40): the kinds of cause, reading a
cause from the process and from any record, its one-line text, and the culprit rule.

- **The kinds** (``CAUSES``), what a restart fixes by default (``RESTARTABLE_CAUSES``) and
  who stops a worker as collateral of someone else (``VICTIM_STOPS``).
- **From the process:** ``classify`` turns a worker's exit record (``exit.json``'s fields),
  what the job's wrapper saw end it (``job_end.json``: the uncaught exception's qualified
  class and message, or the job's own ``sys.exit`` status; see ``read_job_end``) and, only
  where the wrapper recorded nothing, the last lines of its log, into a cause:
  ``{"kind": one of CAUSES, "detail": one line a human reads}``, with ``exception`` and
  ``message`` for a job's own error and ``signal`` and ``oom_kills`` for a kill. A job's
  own output never decides its cause when the wrapper saw how it ended: a job that logs a
  caught ``UnavailableError`` and then exits 1 by itself is ``job-error``.
- **From any record:** ``cause_of`` reads the cause of an exit record, a status entry of
  the wait, a failed worker of the wait's outcome or a worker of summary.json; one without
  a valid cause gets one told from its structured fields.
- **The text:** ``cause_text``, one format: ``kind (what it says)``.
- **The culprit:** ``attempt_failure`` is the one rule that names what made an attempt
  fail (the live decision writes it into the attempt's record, which the verdict and the
  report read); ``first_failed`` is its worker part.
- **Stacks:** ``parse_stacks`` reads the Python stacks that the job's wrapper
  (``roles/tf_worker/files/tf_runbook_job.py``) dumps with ``faulthandler`` into
  ``stacks.txt`` when ``request_stacks`` sends it the stacks signal.

Standard library only: it is shipped next to the supervisor on the hosts, which writes
the cause into ``exit.json``.
"""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any

try:  # on the controller, as part of the collection
    from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import (
        JOB_WRAPPER,
        PREEMPTION_EXIT,
        stacks_signal,
    )
except ImportError:  # on a host, next to the supervisor
    from tf_run import JOB_WRAPPER, PREEMPTION_EXIT, stacks_signal  # type: ignore[no-redef]

# --- The kinds ---------------------------------------------------------------------------

# Why a worker ended: exit.json's "cause" (written by the supervisor), the wait's, the
# attempt record's and summary.json's, per worker. A cause is a mapping {"kind": one of
# CAUSES, "detail": text, ...} with more keys for some kinds (see classify).
CAUSES = (
    "completed", "job-error", "peer-lost", "out-of-memory", "killed", "preempted", "stalled", "deadline",
    "startup", "host-lost", "controller-lost", "operator", "runbook", "restore-mismatch", "stopped",
    "coordinator-gone", "unknown",
)  # fmt: skip
# What a restart can fix: the default of tf_restart_on.
RESTARTABLE_CAUSES = ("preempted", "peer-lost", "stalled", "killed", "host-lost")
# Stops that make a worker collateral of another's failure or of a decision (the wait
# stopping the rest of the run, an operator's stop.yml, a peer's failure heard): such a
# worker is a victim, never the culprit of a failed run.
VICTIM_STOPS = frozenset({"runbook", "operator", "peer"})
# Kinds a worker stopped because of someone else carries: a victim, never the cause.
VICTIM_KINDS = frozenset({"runbook", "operator"})
# How a ParameterServerStrategy server (a ps or worker task running tf_run.SERVER_ENTRY)
# ends well: stopped by the runbook once the chief (the coordinator) ended (``stopped``,
# the stop request's cause, see tf_wait_control), or, where no runbook stopped it (a
# detached run, a lost controller), by itself once the coordinator's port stayed shut
# (``coordinator-gone``, the kind its own end record names: SELF_ENDED_KINDS). Neither
# is a failure: the server exits 0.
SERVER_STOPPED_KIND = "stopped"
SERVER_STOPPED_REASON = "the coordinator ended: servers are stopped by the runbook"
COORDINATOR_GONE_KIND = "coordinator-gone"
SERVER_END_KINDS = frozenset({SERVER_STOPPED_KIND, COORDINATOR_GONE_KIND})
# Kinds a job names itself in job_end.json's "ended" (next to its exit status 0): only
# the runbook's own server entry writes one.
SELF_ENDED_KINDS = {COORDINATOR_GONE_KIND: "ended with the coordinator: its port stayed shut and no runbook stopped the server"}
# Who stopped the job (exit.json's stopped_by) -> the cause kind, for stops that say it all.
STOPPED_BY_KINDS = {
    "operator": "operator",
    "runbook": "runbook",
    "peer": "runbook",
    "job-deadline": "deadline",
    "startup-deadline": "startup",
    "controller": "controller-lost",
    "signal": "preempted",
}
# The last line of a traceback: a (dotted) exception name, then its message if any.
_EXCEPTION_LINE = re.compile(r"^(?P<name>[A-Za-z_][\w.]*)(?::[ \t]*(?P<message>.*))?$")
# A line that only names an exception, when the traceback's start is not in the tail.
_BARE_EXCEPTION = re.compile(
    r"^(?P<name>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit))(?::[ \t]*(?P<message>.*))?$"
)
OOM_EXCEPTIONS = frozenset({"MemoryError", "ResourceExhaustedError"})
PEER_EXCEPTIONS = frozenset({"UnavailableError", "DeadlineExceededError", "AbortedError", "CancelledError"})
# TensorFlow's own error classes live in this package (errors_impl); a class of the same
# short name elsewhere (the job's own, asyncio's CancelledError) is the job's error.
TENSORFLOW_PACKAGE = "tensorflow."
# What TensorFlow's coordination service and collectives print when a peer went away
# (the texts of TensorFlow 2.21's own messages); a process it ends has no traceback.
PEER_LOST_LINE = re.compile(
    r"heartbeat timeout\. This indicates that the remote task has failed"
    r"|has disconnected from coordination service"
    r"|Failed to send RPC to coordination service"
    r"|tasks are unhealthy \(stopped sending heartbeats\)"
    r"|Collective ops is aborted by"
    r"|Coordination service has stopped"
    r"|detected missing heartbeats",
    re.IGNORECASE,
)
# How faulthandler writes a thread's header and a frame.
_THREAD_LINE = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-fA-F]+) \(most recent call first\):")
_FRAME_LINE = re.compile(r'^\s+File "(?P<file>.*)", line (?P<line>\d+|\?\?\?) in (?P<func>.*)$')
# The wrapper's first line in stacks.txt names the job's main thread.
_MAIN_LINE = re.compile(r"main thread (0x[0-9a-fA-F]+)")
# Frames of these directories are TensorFlow's (and Keras'), not the job's own code.
_TENSORFLOW_PATH = re.compile(r"[/\\](?:tensorflow|keras|tf_keras|tensorflow_core)[/\\]")
MAX_FRAMES = 5
MAX_DETAIL = 300
# How long a worker must have been seen in uninterruptible sleep to be blamed for its
# peers' lost peer: a process caught once in a short disk wait is not. A stopped process
# (SIGSTOP, a debugger) is blamed however briefly it was seen so: nothing stops a process
# but a signal, and its peers fail within seconds (6 s measured here, about 20 s in
# FACTS.md), between two polls of the wait.
FROZEN_MIN_SECONDS = 10.0


def _short(text: str, limit: int = MAX_DETAIL) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


# --- From the process --------------------------------------------------------------------


def read_job_end(path: str) -> dict[str, Any] | None:
    """The wrapper's record of how the job's Python ended, checked field by field:
    ``{"raised": {"type": qualified class, "message": first line}}`` or ``{"exit": status}``
    (``sys.exit`` or the script's end), with ``"ended"`` where a job that exited 0 named how
    (a kind of SELF_ENDED_KINDS: the runbook's server entry, ``coordinator-gone``); None when
    there is none (the job ended in C, by a signal, or without the wrapper) or it is not one
    the wrapper writes."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.loads(handle.read(65536))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    raised = data.get("raised")
    if isinstance(raised, dict) and isinstance(raised.get("type"), str) and raised["type"]:
        return {"raised": {"type": _short(raised["type"], 200), "message": _short(str(raised.get("message") or ""))}}
    code = data.get("exit")
    if isinstance(code, int) and not isinstance(code, bool):
        ended = data.get("ended")
        return {"exit": code, "ended": ended} if code == 0 and ended in SELF_ENDED_KINDS else {"exit": code}
    return None


def error_kind(qualified: str) -> str:
    """The kind of an uncaught exception by its qualified class name: TensorFlow's own
    peer and memory errors, Python's ``MemoryError``; anything else is the job's error."""
    module, name = qualified.rpartition(".")[::2]
    if name in OOM_EXCEPTIONS and (qualified == "MemoryError" or qualified.startswith(("builtins.", TENSORFLOW_PACKAGE))):
        return "out-of-memory"
    if name in PEER_EXCEPTIONS and module and qualified.startswith(TENSORFLOW_PACKAGE):
        return "peer-lost"
    return "job-error"


def last_exception(log_tail: list[str]) -> tuple[str, str] | None:
    """(exception's name as printed, qualified where Python printed it so, first line of
    its message) of the last traceback in the log's last lines; None when they hold none.
    The exception line is the first line after the last ``Traceback (most recent call
    last):`` that is not indented (a frame or its source); without that line in the
    tail, the last line that names an error."""
    lines = [line.rstrip("\r\n") for line in log_tail]
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")]
    start = starts[-1] if starts else None
    if start is not None:
        for line in lines[start + 1 :]:
            if not line.strip() or line[:1].isspace():
                continue
            found = _EXCEPTION_LINE.match(line)
            if found:
                return found["name"], (found["message"] or "").strip()
            break
    for line in reversed(lines):
        found = _BARE_EXCEPTION.match(line)
        if found:
            return found["name"], (found["message"] or "").strip()
    return None


def _peer_lost_line(log_tail: list[str]) -> str | None:
    return next((line.strip() for line in reversed(log_tail) if PEER_LOST_LINE.search(line)), None)


def _raised_cause(qualified: str, message: str, source: str) -> dict[str, Any]:
    name = qualified.rsplit(".", 1)[-1]
    text = f"{name}: {message}" if message else name
    return {"kind": error_kind(qualified), "detail": _short(text), "exception": name, "message": _short(message),
            "exception_type": qualified, "from": source}  # fmt: skip


def classify(
    record: dict[str, Any], log_tail: list[str], oom_kills: int | None = None, job_end: dict[str, Any] | None = None,
    oom_source: str | None = None,
) -> dict[str, Any]:
    """The cause of a worker's end from its exit record, what the wrapper saw end the
    job's Python (``job_end``, see ``read_job_end``), the log's last lines and how many
    times the kernel's OOM killer fired while the job ran (None: not readable).

    The process decides first: who stopped it, a signal, the uncaught exception or the
    job's own exit status. The log is read only when the wrapper recorded nothing (the job
    ended in C, re-executed itself without the wrapper, or ran without it), and then only
    TensorFlow's own classes (by qualified name) and lines count as a lost peer."""
    stopped_by = record.get("stopped_by")
    returncode = record.get("returncode")
    sig = record.get("signal")
    reason = str(record.get("reason") or "")
    if returncode == PREEMPTION_EXIT and stopped_by in (None, "signal", "peer"):
        detail = f"the job saved and exited {PREEMPTION_EXIT} (TensorFlow's preemption handler)"
        return {"kind": "preempted", "detail": detail}
    if stopped_by in STOPPED_BY_KINDS:
        kind = STOPPED_BY_KINDS[stopped_by]
        if kind == "preempted":
            return {"kind": kind, "detail": _short(f"{reason} from outside the runbook (a preemption or shutdown)")}
        return {"kind": kind, "detail": _short(reason or f"stopped by the {stopped_by}")}
    if stopped_by == "supervisor":
        return {"kind": "unknown", "detail": _short(reason or "the supervisor failed")}
    if returncode == 0:
        ended = _as_dict(job_end).get("ended")
        if ended in SELF_ENDED_KINDS:
            return {"kind": ended, "detail": SELF_ENDED_KINDS[ended]}
        return {"kind": "completed", "detail": "the job exited 0"}
    if reason.startswith(("refused to start", "cannot start the job")):
        return {"kind": "startup", "detail": _short(reason)}
    if sig == "SIGKILL":
        # Which evidence decided (tf_proc.oom_evidence): the kernel's log, which names the
        # process it killed, else an OOM counter (the job's cgroup's, else the host's).
        said = {"oom_source": oom_source} if oom_source else {}
        if oom_kills and oom_source == "the kernel's log":
            detail = "SIGKILL from the kernel's OOM killer: the kernel's log names the job's process"
            return {"kind": "out-of-memory", "detail": detail, "signal": sig, "oom_kills": oom_kills, **said}
        counter = oom_source or "the kernel's OOM count"
        if oom_kills:
            detail = (
                f"SIGKILL that the runbook did not send; the kernel's OOM killer fired {oom_kills} time(s) "
                f"during the job ({counter})"
            )
            return {"kind": "out-of-memory", "detail": detail, "signal": sig, "oom_kills": oom_kills, **said}
        if oom_kills == 0 and oom_source == "the kernel's log":
            count = "the kernel's log does not name the job's process as OOM-killed"
        elif oom_kills == 0:
            count = f"{counter} did not grow"
        else:
            count = "the kernel's OOM count is not readable"
        detail = f"SIGKILL that the runbook did not send ({count})"
        return {"kind": "killed", "detail": detail, "signal": sig, "oom_kills": oom_kills, **said}
    if sig == "SIGTERM":
        detail = "the job got SIGTERM from outside the runbook (a preemption or shutdown)"
        return {"kind": "preempted", "detail": detail}
    end = _as_dict(job_end)
    raised = _as_dict(end.get("raised"))
    if raised.get("type"):
        return _raised_cause(str(raised["type"]), str(raised.get("message") or ""), "the job's wrapper")
    if "exit" in end and not sig:
        status = returncode if isinstance(returncode, int) and not isinstance(returncode, bool) else end["exit"]
        detail = f"the job exited with its own status {status} (sys.exit), with no uncaught exception"
        return {"kind": "job-error", "detail": detail}
    exception = last_exception(log_tail)
    if exception is not None:
        name, message = exception
        return _raised_cause(name, message, "the log")
    peer_line = _peer_lost_line(log_tail)
    if peer_line is not None:
        return {"kind": "peer-lost", "detail": _short(peer_line)}
    if sig:
        return {"kind": "unknown", "detail": f"the job ended with signal {sig} and no traceback in its log"}
    if isinstance(returncode, int) and not isinstance(returncode, bool) and returncode > 0:
        # The job chose its own exit status (os._exit, a shell's exit): its own error.
        return {"kind": "job-error", "detail": f"the job exited with status {returncode} and no traceback in its log"}
    return {"kind": "unknown", "detail": f"the job ended with exit status {returncode} and no traceback in its log"}


# --- From any record ---------------------------------------------------------------------

# The exit statuses a shell reports for the two signals an outside stop sends, where a
# record carries no signal name (the wait's entries of older supervisors).
_STATUS_SIGNALS = {137: "SIGKILL", -9: "SIGKILL", 143: "SIGTERM", -15: "SIGTERM"}


def cause_of(record: Any) -> dict[str, Any]:
    """The cause of any record of a worker's end (exit.json, a status entry of the wait, a
    failed worker of the wait's outcome, a worker of summary.json or of an attempt's
    record): its own where it carries a valid one, else one told from its structured
    fields by ``classify`` (no log: the log decides nothing here)."""
    if not isinstance(record, dict):
        return {"kind": "unknown", "detail": "no exit record (still running or lost)"}
    cause = record.get("cause")
    if isinstance(cause, dict) and cause.get("kind") in CAUSES:
        return cause
    fields = dict(record)
    if not fields.get("signal") and fields.get("returncode") in _STATUS_SIGNALS:
        fields["signal"] = _STATUS_SIGNALS[fields["returncode"]]
    return classify(fields, [])


def cause_text(cause: dict[str, Any]) -> str:
    """A cause as one line, the one format everything prints: ``job-error
    (ModuleNotFoundError: No module named 'x')``, the kind and what it says."""
    if cause.get("exception"):
        said = f"{cause['exception']}: {cause['message']}" if cause.get("message") else str(cause["exception"])
    else:
        said = str(cause.get("detail") or "")
    return f"{cause.get('kind')} ({said})" if said else str(cause.get("kind"))


def judged_cause(record: Any, began_elsewhere: bool) -> dict[str, Any]:
    """A worker's cause as the verdict judges it: its record's, unless it began at another
    epoch than the chief (``restore-mismatch``, its exit's cause kept as ``exit_cause``)."""
    cause = cause_of(record)
    if began_elsewhere:
        return {"kind": "restore-mismatch", "detail": "began at another epoch than the chief", "exit_cause": cause}
    return cause


def stopped_as_victim(record: dict[str, Any]) -> bool:
    """Whether the runbook stopped this worker because of someone else: the record's
    structured ``stopped_by``, never its free-text reason."""
    return record.get("stopped_by") in VICTIM_STOPS


def is_victim(record: dict[str, Any], hosts_lost: bool = False) -> bool:
    """Stopped because of someone else (the runbook, an operator, a peer's failure heard),
    or, while a host of the run was lost, failed because that peer went away."""
    kind = cause_of(record)["kind"]
    return stopped_as_victim(record) or kind in VICTIM_KINDS or (hosts_lost and kind == "peer-lost")


# --- The culprit ---------------------------------------------------------------------------


def first_failed(failed: list[dict[str, Any]], hosts_lost: bool = False) -> dict[str, Any] | None:
    """The worker to blame among failed ones (records with ``index``, ``host`` and their
    exit fields): the first to fail by itself, by ``finished_at`` (list order where a
    record has no time), one that failed first-hand before one that only lost its peer;
    None when every failed worker is a victim."""
    culprits = [(n, w) for n, w in enumerate(failed) if isinstance(w, dict) and not is_victim(w, hosts_lost)]
    if not culprits:
        return None

    def order(item: tuple[int, dict[str, Any]]) -> tuple[bool, float, int]:
        number, worker = item
        finished = _number(worker.get("finished_at"))
        return (cause_of(worker)["kind"] == "peer-lost", finished if finished is not None else float("inf"), number)

    return min(culprits, key=order)[1]


def _frozen_text(frozen: dict[str, Any]) -> str:
    seconds = _number(frozen.get("seconds"))
    how = {"stopped": "its process was stopped (SIGSTOP or a debugger)",
           "uninterruptible": "its process was in uninterruptible sleep (D)"}.get(
        str(frozen.get("state")), f"its process was frozen ({frozen.get('state')})")  # fmt: skip
    return f"{how} for {seconds:.0f} s" if seconds is not None else how


def _workers_on(hosts: list[str], workers: list[dict[str, Any]] | None) -> list[int]:
    return sorted(int(w["index"]) for w in workers or [] if isinstance(w, dict) and w.get("host") in hosts)


def culprit(
    failed: list[dict[str, Any]], hosts_lost: bool = False, frozen: list[dict[str, Any]] | None = None
) -> dict[str, Any] | None:
    """The worker to blame for failed workers (``failed``: records with ``index``,
    ``host`` and their exit fields) and workers seen frozen while alive (``frozen``: the
    wait's ``frozen_workers``): ``{"index", "host", "cause", "record"}`` or None.

    A frozen worker whose peers failed waiting for it (they lost their peer, or were
    stopped) is to blame, as ``stalled``: it never fails by itself (FACTS.md). Else the
    first worker to fail by itself (``first_failed``)."""
    worker = first_failed(failed, hosts_lost)
    seen = [f for f in frozen or [] if isinstance(f, dict) and f.get("index") is not None
            and (f.get("state") == "stopped" or (_number(f.get("seconds")) or 0.0) >= FROZEN_MIN_SECONDS)]  # fmt: skip
    if seen and (worker is None or cause_of(worker)["kind"] == "peer-lost"):
        first = max(seen, key=lambda f: _number(f.get("seconds")) or 0.0)
        cause = {"kind": "stalled", "detail": _frozen_text(first), "frozen": first.get("state")}
        return {"index": first["index"], "host": first.get("host"), "cause": cause, "record": None}
    if worker is None:
        return None
    return {"index": worker.get("index"), "host": worker.get("host"), "cause": cause_of(worker), "record": worker}


def attempt_failure(outcome: dict[str, Any], workers: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """What made a failed attempt fail, the one rule the live decision applies (and writes
    into the attempt's record, which the verdict and the report read): ``{"kind",
    "cause", "who", "text", "culprit", "host", "unread"}``, with ``culprit`` the worker
    index (None when no single worker is to blame) and ``host`` its host (or the lost
    hosts, comma-separated).

    ``outcome`` is the wait's (tf_wait_outcome: failed_workers, lost_hosts, stalled,
    deadline_hosts, status_problems, frozen_workers); ``workers`` (the cluster spec's,
    index and host) names the worker of a lost host. In order: an operator's stop (a
    decision, never a failure); a lost host (its peers fail only because it went away); a
    stall (every worker alive and idle); a passed deadline; a host whose status could not
    be read; the culprit worker (``culprit``); else the victims' lost peer."""
    failed = [w for w in outcome.get("failed_workers") or [] if isinstance(w, dict)]
    blank = {"culprit": None, "host": None, "unread": False}

    def named(kind: str, detail: str, who: str, **more: Any) -> dict[str, Any]:
        cause = {"kind": kind, "detail": detail}
        return {**blank, "kind": kind, "cause": cause, "who": who, "text": cause_text(cause), **more}

    if outcome.get("stopped_by_operator") or any(cause_of(w)["kind"] == "operator" for w in failed):
        return {**named("operator", "stopped by an operator (stop.yml)", "the run"), "text": "operator"}
    lost = [str(h) for h in outcome.get("lost_hosts") or []]
    if lost:
        on = _workers_on(lost, workers)
        return named("host-lost", "it stopped answering", f"host {', '.join(lost)}",
                     culprit=on[0] if len(on) == 1 else None, host=", ".join(lost))  # fmt: skip
    stalled = outcome.get("stalled")
    if stalled:
        return named("stalled", str(_as_dict(stalled).get("detail") or ""), "the run")
    deadline = [str(h) for h in outcome.get("deadline_hosts") or []]
    if deadline:
        return named("deadline", "the job deadline passed", f"host {', '.join(deadline)}")
    if outcome.get("status_problems") or not failed:
        problems = "; ".join(str(p) for p in outcome.get("status_problems") or []) or "no worker failed"
        return named("unknown", problems, "the wait", unread=True)
    found = culprit(failed, False, outcome.get("frozen_workers"))
    if found is None:
        # Only victims: stopped because of a failure no status shows (a peer's, heard by
        # them): what a restart fixes when a peer went away.
        found = {"index": failed[0].get("index"), "host": failed[0].get("host"), "cause": {
            "kind": "peer-lost", "detail": f"stopped by the {failed[0].get('stopped_by') or 'runbook'} after a peer failed"}}
    cause = found["cause"]
    host = f" on {found['host']}" if found.get("host") else ""
    return {**blank, "kind": cause["kind"], "cause": cause, "who": f"worker {found['index']}{host}",
            "text": cause_text(cause), "culprit": found["index"], "host": found.get("host")}  # fmt: skip


# --- A lost host that runs only the sidecar evaluator --------------------------------------

EVALUATOR_TASK = "evaluator"


def optional_evaluator_hosts(workers: Any, required: Any) -> dict[str, list[int]]:
    """Host to its worker indices, for the hosts that run the sidecar evaluator and nothing
    else, when the user did not require it (tf_evaluator_required): losing such a host is
    reported, never the run's failure. ``workers`` is the cluster spec's (index, host,
    type); empty when the evaluator is required."""
    if required is True or str(required).strip().lower() in ("true", "yes", "1", "on"):
        return {}
    kinds: dict[str, set[str]] = {}
    indices: dict[str, list[int]] = {}
    for worker in workers if isinstance(workers, list) else []:
        if not isinstance(worker, dict) or worker.get("host") is None:
            continue
        host = str(worker["host"])
        kinds.setdefault(host, set()).add(str(worker.get("type") or "worker"))
        indices.setdefault(host, []).append(worker.get("index"))
    return {host: indices[host] for host, seen in kinds.items() if seen == {EVALUATOR_TASK}}


def only_optional_evaluator(types: Any, indices: list[Any], required: Any) -> bool:
    """Whether the workers ``indices`` of one host (their task ``types`` by index, the
    cluster spec's order) are the sidecar evaluator alone, not required."""
    kinds = [str(t) for t in types] if isinstance(types, list) else []
    own = [kinds[i] if isinstance(i, int) and 0 <= i < len(kinds) else None for i in indices]
    workers = [{"index": i, "host": "-", "type": kind} for i, kind in zip(indices, own)]
    return bool(own) and None not in own and bool(optional_evaluator_hosts(workers, required))


def host_lost_flag(host: str, error: Any, evaluator_optional: bool) -> dict[str, Any] | None:
    """The failure flag the wait of a host that stopped answering writes (cause
    ``host-lost``): every other host stops waiting and the attempt fails. None for a host
    that runs only the sidecar evaluator the user did not require: the training goes on."""
    if evaluator_optional:
        return None
    return {"host": host, "cause": "host-lost", "reason": f"host {host} unreachable: {error}"}


def evaluator_lost_text(host: str) -> str:
    """What the console says of a lost sidecar evaluator's host that was not required."""
    return f"{host} (the sidecar evaluator) stopped answering: the training goes on without it"


# --- Stacks --------------------------------------------------------------------------------


def _thread_blocks(text: str) -> list[tuple[str, list[tuple[str, str, str]]]]:
    """Every thread block of faulthandler's text, in order: (thread id, frames innermost
    first as (file, line, function))."""
    blocks: list[tuple[str, list[tuple[str, str, str]]]] = []
    for line in text.splitlines():
        header = _THREAD_LINE.match(line)
        if header:
            blocks.append((header.group(1).lower(), []))
            continue
        frame = _FRAME_LINE.match(line)
        if frame and blocks:
            blocks[-1][1].append((frame["file"], frame["line"], frame["func"]))
    return blocks


def _own(path: str, job_dir: str) -> bool:
    """A file of the job's own code: under ``job_dir`` (symlinks resolved on both sides:
    the frames name files as they were imported), the wrapper left out."""
    if not os.path.isabs(path):  # "<frozen runpy>", "<string>": no file
        return False
    root, path = os.path.realpath(job_dir), os.path.realpath(path)
    return path.startswith(root + os.sep) and os.path.basename(path) != JOB_WRAPPER


def parse_stacks(text: str, job_dir: str) -> dict[str, Any]:
    """``{"where", "frames"}`` from a stacks.txt: ``frames`` are the innermost frames of the
    job's own code (files under ``job_dir``, the wrapper left out) of the main thread's
    last dump, innermost last, at most MAX_FRAMES, as ``file:line in function`` with the
    file relative to ``job_dir``; ``where`` is ``tensorflow`` when the main thread is
    inside TensorFlow or Keras below its innermost own frame, ``own-code`` when it is in
    the job's own code (or the standard library called from it), else ``unknown``."""
    blocks = _thread_blocks(text)
    main = _MAIN_LINE.search(text)
    ident = main.group(1).lower() if main else None
    chosen = [frames for tid, frames in blocks if tid == ident] if ident else []
    if not chosen and blocks:
        # Without the wrapper's header: the main thread is listed last (the oldest).
        chosen = [blocks[-1][1]]
    frames = chosen[-1] if chosen else []
    own_at = [i for i, (path, _line, _func) in enumerate(frames) if _own(path, job_dir)]
    if not own_at:
        inside_tf = any(_TENSORFLOW_PATH.search(path) for path, _l, _f in frames)
        return {"where": "tensorflow" if inside_tf else "unknown", "frames": []}
    inner = frames[: own_at[0]]
    where = "tensorflow" if any(_TENSORFLOW_PATH.search(path) for path, _l, _f in inner) else "own-code"
    own = [frames[i] for i in own_at[:MAX_FRAMES]]
    root = os.path.realpath(job_dir)
    shown = [f"{os.path.relpath(os.path.realpath(path), root)}:{line} in {func}" for path, line, func in reversed(own)]
    return {"where": where, "frames": shown}


def stacks_dumped(text: str) -> bool:
    """Whether a stacks.txt holds a dump (not only the wrapper's first line)."""
    return any(_THREAD_LINE.match(line) for line in text.splitlines())


def request_stacks(pid: int, path: str, timeout: float, poll: float = 0.05) -> bool:
    """Ask the job ``pid`` (running under the wrapper) for its stacks: send it the stacks
    signal and wait, up to ``timeout`` seconds, until ``path`` grew and then stayed the
    same size for a few polls (the dump is written from a signal handler, at once or not
    at all). False when the job is gone or wrote nothing in time."""
    try:
        before = os.path.getsize(path)
    except OSError:
        before = 0
    try:
        os.kill(pid, stacks_signal())
    except OSError:
        return False
    end = time.monotonic() + timeout
    size, steady = before, 0
    while time.monotonic() < end:
        time.sleep(poll)
        try:
            now = os.path.getsize(path)
        except OSError:
            continue
        steady = steady + 1 if now == size and now > before else 0
        size = now
        if steady >= 4:
            return True
    return size > before
