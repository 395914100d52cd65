# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Why a worker ended, and where it was stuck, in one place (issue 23).

``classify`` turns a worker's exit record (``exit.json``'s fields) and the last lines of
its log into a cause: ``{"kind": one of tf_run.CAUSES, "detail": one line a human reads}``,
with ``exception`` and ``message`` for a job's own error and ``signal`` and ``oom_kills``
for a kill. ``parse_stacks`` reads the Python stacks that the job's wrapper
(``roles/tf_worker/files/tf_runbook_job.py``) dumps with ``faulthandler`` into
``stacks.txt`` when ``request_stacks`` sends it the stacks signal.

Standard library only: it is shipped next to the supervisor on the hosts, which writes
the cause into ``exit.json``; tf_worker_status asks it for records that have none.
"""

from __future__ import annotations

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


def _short(text: str, limit: int = MAX_DETAIL) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def last_exception(log_tail: list[str]) -> tuple[str, str] | None:
    """(exception's short name, first line of its message) of the last traceback in the
    log's last lines; None when they hold none. The exception line is the first line
    after the last ``Traceback (most recent call last):`` that is not indented (a frame
    or its source); without that line in the tail, the last line that names an error."""
    lines = [line.rstrip("\r\n") for line in log_tail]
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")]
    start = starts[-1] if starts else None
    if start is not None:
        for line in lines[start + 1 :]:
            if not line.strip() or line[:1].isspace():
                continue
            found = _EXCEPTION_LINE.match(line)
            if found:
                return found["name"].rsplit(".", 1)[-1], (found["message"] or "").strip()
            break
    for line in reversed(lines):
        found = _BARE_EXCEPTION.match(line)
        if found:
            return found["name"].rsplit(".", 1)[-1], (found["message"] or "").strip()
    return None


def _peer_lost_line(log_tail: list[str]) -> str | None:
    return next((line.strip() for line in reversed(log_tail) if PEER_LOST_LINE.search(line)), None)


def classify(record: dict[str, Any], log_tail: list[str], oom_kills: int | None = None) -> dict[str, Any]:
    """The cause of a worker's end from its exit record, its log's last lines and how many
    times the kernel's OOM killer fired while the job ran (None: not readable)."""
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
        return {"kind": "completed", "detail": "the job exited 0"}
    if reason.startswith(("refused to start", "cannot start the job")):
        return {"kind": "startup", "detail": _short(reason)}
    if sig == "SIGKILL":
        if oom_kills:
            detail = (
                f"SIGKILL that the runbook did not send; the kernel's OOM killer fired {oom_kills} time(s) "
                "during the job"
            )
            return {"kind": "out-of-memory", "detail": detail, "signal": sig, "oom_kills": oom_kills}
        count = "the kernel's OOM count did not grow" if oom_kills == 0 else "the kernel's OOM count is not readable"
        detail = f"SIGKILL that the runbook did not send ({count})"
        return {"kind": "killed", "detail": detail, "signal": sig, "oom_kills": oom_kills}
    if sig == "SIGTERM":
        detail = "the job got SIGTERM from outside the runbook (a preemption or shutdown)"
        return {"kind": "preempted", "detail": detail}
    exception = last_exception(log_tail)
    if exception is not None:
        name, message = exception
        text = f"{name}: {message}" if message else name
        if name in OOM_EXCEPTIONS:
            return {"kind": "out-of-memory", "detail": _short(text), "exception": name, "message": _short(message)}
        if name in PEER_EXCEPTIONS:
            return {"kind": "peer-lost", "detail": _short(text), "exception": name, "message": _short(message)}
        return {"kind": "job-error", "detail": _short(text), "exception": name, "message": _short(message)}
    peer_line = _peer_lost_line(log_tail)
    if peer_line is not None:
        return {"kind": "peer-lost", "detail": _short(peer_line)}
    if sig:
        return {"kind": "unknown", "detail": f"the job ended with signal {sig} and no traceback in its log"}
    if isinstance(returncode, int) and not isinstance(returncode, bool) and returncode > 0:
        # The job chose its own exit status (sys.exit(1), a shell's exit): its own error.
        return {"kind": "job-error", "detail": f"the job exited with status {returncode} and no traceback in its log"}
    return {"kind": "unknown", "detail": f"the job ended with exit status {returncode} and no traceback in its log"}


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
