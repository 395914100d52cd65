# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A worker's records on its host, read as the wait, the status, the logs and the reattach
see them (issue 40: the modules tf_worker_wait and tf_worker_status only dispatch here).

One entry per worker (``worker_state``): its state (starting, running, exited) from the
supervisor's ``state.json`` and ``exit.json``, checked against the supervisor's life (a
supervisor that died without an exit record, a launch that never started one), its
progress lines counted from the log once (``read_progress``, carried from one call to the
next in ``progress_marks``), the log's last lines, the cause and the progress. What
``/proc`` shows of each running job (``with_activity``), and the workers of a run's latest
attempt found from its directory alone (``find_workers``, the reattach's finder).
"""

from __future__ import annotations

import os
import re
import time

from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_causes import cause_of
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_gpu_use import gpu_use
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_logs import quiet_tail
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_metrics import progress_of, progress_pattern
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_proc import (
    PROC,
    busiest_thread_share,
    group_usage,
    thread_runnable_ns,
    works_in,
)
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import (
    CONFIG_FILE,
    EXIT_FILE,
    JOB_ENV_FILE,
    LAUNCH_OUTPUT_FILE,
    LOG_FILE,
    STATE_FILE,
    WORKER_EXITED,
    WORKER_RUNNING,
    WORKER_STARTING,
    killed_exit_record,
    printable,
    read_json,
    retry_index,
    worker_index,
)

# A log is read for progress lines once from its start (or from this many bytes before its
# end, for a larger one), then only what was appended since.
FIRST_SCAN_BYTES = 64 * 1024 * 1024
SCAN_CHUNK = 1024 * 1024
# A traceback's first line: its frames (indented) and its exception line are never progress,
# whatever they quote (``model.fit(x, epoch=3)``, ``ValueError: bad epoch=3``).
TRACEBACK_START = "Traceback (most recent call last):"


def progress_regex(extra: str) -> re.Pattern:
    """The progress lines of every registered format and the user's own (tf_stall_pattern),
    as one expression (tf_metrics.progress_pattern: a format registered there is seen by
    the wait and the stall watchdog too)."""
    return re.compile(progress_pattern(extra))


def progress_or_error(extra: str) -> tuple[re.Pattern | None, str]:
    """``progress_regex(extra)``, or None and why ``extra`` (a module's option
    ``progress_pattern``) is not a regular expression."""
    try:
        return progress_regex(extra), ""
    except re.error as exc:
        return None, f"progress_pattern {extra!r} is not a regular expression: {exc}"


# At most how much of a progress line the wait carries and prints.
MAX_PROGRESS_LINE = 500


def new_mark() -> dict:
    """Where the reading of a log stands: bytes read, progress lines counted, the latest
    one, and whether the last line read was inside a traceback."""
    return {"offset": 0, "count": 0, "last": None, "traceback": False}


def count_progress(lines: list[str], progress: re.Pattern, mark: dict) -> None:
    """Count the progress lines of ``lines`` (the log's next complete lines) into ``mark``."""
    for line in lines:
        if line.startswith(TRACEBACK_START):
            mark["traceback"] = True
            continue
        if mark["traceback"]:
            # Frames are indented; the first line that is not ends it (the exception).
            if not line.strip() or line[0] in " \t":
                continue
            mark["traceback"] = False
            continue
        if progress.search(line):
            mark["count"] += 1
            # Carried to the controller and back at every poll, and printed: a line of its
            # first MAX_PROGRESS_LINE characters, however long the job's line.
            mark["last"] = line if len(line) <= MAX_PROGRESS_LINE else line[: MAX_PROGRESS_LINE - 3] + "..."


def read_progress(path: str, progress: re.Pattern, mark: dict | None) -> dict:
    """``mark`` moved on over what ``path`` gained since: only complete lines are read; a
    log that shrank (replaced) is read again from its start."""
    mark = dict(mark) if mark else new_mark()
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size < mark["offset"]:
                mark = new_mark()
            if mark["offset"] == 0 and size > FIRST_SCAN_BYTES:
                # A huge log: its last part only, from the first complete line in it.
                handle.seek(size - FIRST_SCAN_BYTES)
                skipped = handle.readline()
                mark["offset"] = size - FIRST_SCAN_BYTES + len(skipped)
            handle.seek(mark["offset"])
            while mark["offset"] < size:
                data = handle.read(min(SCAN_CHUNK, size - mark["offset"]))
                end = data.rfind(b"\n")
                if not data or (end < 0 and len(data) < SCAN_CHUNK):
                    break  # the rest is a line still being written
                if end < 0:
                    end = len(data) - 1  # a line longer than a chunk: read as pieces
                text = data[: end + 1].decode("utf-8", errors="replace")
                count_progress(text.splitlines(), progress, mark)
                mark["offset"] += end + 1
                handle.seek(mark["offset"])
    except OSError:
        pass
    return mark


def log_tail(path: str, lines: int, max_bytes: int = 65536) -> list[str]:
    """The last ``lines`` non-blank lines of a log, from at most its last ``max_bytes`` bytes."""
    max_bytes = max(max_bytes, lines * 512)
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - max_bytes))
            data = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    return [line for line in data.splitlines() if line.strip()][-lines:]


def launch_failure(entry: dict) -> str | None:
    """Why a worker that recorded nothing never will: the launch could not start its
    supervisor (the entry's ``launch_error``), or the supervisor it started (the entry's
    ``supervisor_pid``) is gone; None while it lives, or with no pid to go by.
    The state is read again after the check: it may have been written just before."""
    if entry.get("launch_error"):
        return str(entry["launch_error"])
    pid = entry.get("supervisor_pid")
    if pid is None or supervisor_alive(int(pid), entry["dir"]):
        return None
    if any(os.path.exists(os.path.join(entry["dir"], name)) for name in (STATE_FILE, EXIT_FILE)):
        return None
    tail = log_tail(os.path.join(entry["dir"], LAUNCH_OUTPUT_FILE), 3)
    detail = printable(" / ".join(tail))[-500:]
    return f"its supervisor (pid {pid}) ended before it recorded anything" + (f": {detail}" if detail else "")


def supervisor_alive(pid: object, worker_dir: str) -> bool:
    """The recorded supervisor still runs, in that worker's directory (not a reused pid)."""
    return works_in(pid, worker_dir)


def supervisors_exit(state: dict | None, exit_: dict | None) -> dict | None:
    """exit.json when its supervisor wrote it: it carries state.json's ``nonce`` (a record
    the job wrote into its working directory does not, and is no exit: the supervisor's
    record guard stops such a job and writes the real one). A record of a supervisor older
    than the nonce is taken as it is."""
    if exit_ is None or not state or not state.get("nonce"):
        return exit_
    return exit_ if exit_.get("nonce") == state["nonce"] else None


def exit_status(value: object) -> int | None:
    """An exit record's ``returncode`` as the int it must be; None for anything else."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def exit_progress(exit_: dict) -> dict | None:
    """Where an ended worker's training stood, from its exit record's timed lines (the
    running supervisor's state.json ``progress`` stops at its last write)."""
    timed = [
        (float(entry[0]), str(entry[1]))
        for entry in exit_.get("timed_lines") or []
        if isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], (int, float)) and not isinstance(entry[0], bool)
    ]
    return progress_of(timed) if timed else None


# How many of a log's last lines a worker's entry carries, unless asked for another number.
TAIL_LINES = 8
# With log_filter, how many more lines than asked for are read to find them among
# TensorFlow's C++ log lines.
FILTER_WINDOW_FACTOR = 4


def worker_state(entry: dict, progress: re.Pattern, tail_lines: int, marks: dict | None = None,
                 log_filter: bool = False) -> dict:  # fmt: skip
    """One worker's entry. ``marks`` (a worker directory's reading of its log, see
    read_progress) is moved on in place, so that a log is read once, not at every check.
    With ``log_filter``, ``log_tail`` leaves TensorFlow's C++ log lines out
    (tf_logs.quiet_tail) and ``log_hidden`` says how many it left out."""
    wdir = entry["dir"]
    marks = {} if marks is None else marks
    state = read_json(os.path.join(wdir, STATE_FILE))
    exit_ = supervisors_exit(state, read_json(os.path.join(wdir, EXIT_FILE)))
    log_path = os.path.join(wdir, LOG_FILE)
    hidden = 0
    if log_filter:
        tail, hidden = quiet_tail(log_tail(log_path, FILTER_WINDOW_FACTOR * tail_lines + 200), tail_lines)
    else:
        tail = log_tail(log_path, max(tail_lines, 50))
    marks[wdir] = read_progress(log_path, progress, marks.get(wdir))
    info = {
        "index": int(entry["index"]),
        "dir": wdir,
        "pid": state.get("pid") if state else None,
        "state": WORKER_STARTING,
        "returncode": None,
        "reason": None,
        "stopped_by": None,
        "joined": bool(state and state.get("joined_at")),
        "last_line": marks[wdir]["last"],
        "progress_lines": marks[wdir]["count"],
        "log_tail": tail[-tail_lines:],
        "log_hidden": hidden,
        "cause": None,
        "stacks": None,
        "finished_at": None,
        "started_at": state.get("started_at") if state else None,
        "progress": state.get("progress") if state and isinstance(state.get("progress"), dict) else None,
        # The sidecar evaluator (its launch record says so), and whether the user made it
        # required (tf_evaluator_required): see ``counts_failed``.
        "evaluator": bool(launch_of(state).get("evaluator")),
        "required": bool(launch_of(state).get("required")),
        "training_ended": False,
    }
    if exit_ is None and state is not None and not supervisor_alive(state.get("supervisor_pid"), wdir):
        # It may have written exit.json just before it ended: read it again.
        exit_ = supervisors_exit(state, read_json(os.path.join(wdir, EXIT_FILE)))
        if exit_ is None:
            reason = (
                f"the supervisor (pid {state.get('supervisor_pid')}) died without recording an exit "
                "(killed, or out of memory); its job was stopped with it"
            )
            # Its job got the keeper's SIGKILL, which nobody in the runbook asked for.
            record = killed_exit_record(reason, None, state.get("started_at"), time.time())
            cause = {"kind": "killed", "detail": reason, "signal": record["signal"]}
            info.update(state=WORKER_EXITED, returncode=-1, reason=reason, cause=cause, finished_at=record["finished_at"])
            return info
    if exit_ is not None:
        info.update(
            state=WORKER_EXITED,
            returncode=exit_status(exit_.get("returncode")),
            reason=printable(exit_.get("reason")) if exit_.get("reason") is not None else None,
            stopped_by=exit_.get("stopped_by") if isinstance(exit_.get("stopped_by"), str) else None,
            finished_at=exit_.get("finished_at"),
            joined=bool(exit_.get("joined")) or info["joined"],
            cause=cause_of(exit_),
            stacks=exit_.get("stacks") if isinstance(exit_.get("stacks"), dict) else None,
            started_at=exit_.get("started_at", info["started_at"]),
            progress=exit_progress(exit_) or info["progress"],
            training_ended=exit_.get("training_ended") is True,
        )
    elif state is not None and state.get("pid") is None and entry.get("launch_error"):
        # Armed, and the launch's go never started it: failed now, not when it gives up.
        reason = f"the worker could not be launched: {entry['launch_error']}"
        info.update(state=WORKER_EXITED, returncode=-1, reason=reason, cause={"kind": "startup", "detail": reason})
    elif state is not None:
        info["state"] = WORKER_RUNNING
    else:
        failure = launch_failure(entry)
        if failure is not None:
            reason = f"the worker could not be launched: {failure}"
            info.update(state=WORKER_EXITED, returncode=-1, reason=reason, cause={"kind": "startup", "detail": reason})
    return info


def job_groups(workers: list[dict]) -> dict:
    """Per worker index of ``workers`` whose ``state.json`` names its job: (pid, process
    group) of the job, as its supervisor recorded them."""
    jobs = {}
    for worker in workers:
        state = read_json(os.path.join(worker["dir"], STATE_FILE)) or {}
        jobs[int(worker["index"])] = (state.get("pid"), state.get("pgid"))
    return jobs


def thread_sample(workers: list[dict], proc: str = PROC) -> dict:
    """What a window's runnable shares start from (with_activity's ``before``): this
    host's monotonic clock (``at``) and, per worker index whose job runs, each thread's
    runnable time so far (tf_proc.thread_runnable_ns)."""
    jobs = job_groups(workers)
    usage = group_usage([pgid for _pid, pgid in jobs.values()], proc)
    threads = {
        index: thread_runnable_ns(usage[pgid]["states"], proc)
        for index, (_pid, pgid) in jobs.items() if isinstance(pgid, int) and pgid in usage
    }  # fmt: skip
    return {"at": time.monotonic(), "threads": threads}


def with_activity(current: list[dict], proc: str = PROC, smi: str | None = None, before: dict | None = None) -> list[dict]:
    """Each worker of ``current`` with what ``/proc`` shows of its job (the process group
    and the pid its ``state.json`` records), read once per call, at its end, in one pass
    over the process table: ``cpu_seconds`` (the CPU time the group's processes used so
    far, tf_proc.group_usage), ``cpu_at`` (this host's monotonic clock at the reading) and
    ``process_state`` (the job's main process's state letter) and ``gpu_util`` (the
    highest utilisation, in percent, of the job's GPUs, tf_gpu_use; None without
    nvidia-smi or a GPU of its own); and ``runnable_share``, given ``before`` (the
    thread_sample taken when the window began), the largest share of the window one of
    the job's threads was runnable (tf_proc.busiest_thread_share: a job that computes on
    a host loaded past its CPUs gets little CPU but stays runnable); None where the job
    does not run. ``smi``: the nvidia-smi to ask (found on the host when None, not asked
    when empty)."""
    running = [worker for worker in current if worker["state"] == WORKER_RUNNING]
    jobs = job_groups(running)
    usage = group_usage([pgid for _pid, pgid in jobs.values()], proc)
    at = time.monotonic()
    gpus = gpu_use(gpu_jobs(current, jobs, usage), smi) if smi != "" else {}
    result = []
    for worker in current:
        pid, pgid = jobs.get(worker["index"], (None, None))
        group = usage.get(pgid) if isinstance(pgid, int) else None
        started = (before or {}).get("threads", {}).get(worker["index"])
        runnable = None
        if group and started is not None:
            now = thread_runnable_ns(group["states"], proc)
            runnable = busiest_thread_share(started, now, time.monotonic() - float(before["at"]))
        result.append({
            **worker,
            "cpu_seconds": round(group["cpu_seconds"], 2) if group else None,
            "cpu_at": at if group else None,
            "process_state": group["states"].get(pid) if group else None,
            "gpu_util": gpus.get(worker["index"]) if group else None,
            "runnable_share": runnable,
        })  # fmt: skip
    return result


def gpu_jobs(current: list[dict], jobs: dict, usage: dict) -> dict:
    """Per running worker's index, what tf_gpu_use needs to find its job's GPUs: the pids
    of its process group and the CUDA_VISIBLE_DEVICES it was given (its job_env.json,
    whose other values are never returned)."""
    found = {}
    for worker in current:
        pgid = jobs.get(worker["index"], (None, None))[1]
        group = usage.get(pgid) if isinstance(pgid, int) else None
        if group:
            env = read_json(os.path.join(worker["dir"], JOB_ENV_FILE)) or {}
            found[worker["index"]] = {"pids": list(group["states"]), "visible": env.get("CUDA_VISIBLE_DEVICES")}
    return found


def snapshot(workers: list[dict], progress: re.Pattern, tail_lines: int, marks: dict | None = None,
             log_filter: bool = False) -> list[dict]:  # fmt: skip
    return [worker_state(entry, progress, tail_lines, marks, log_filter) for entry in workers]


def all_exited(current: list[dict]) -> bool:
    return all(w["state"] == WORKER_EXITED for w in current)


def find_workers(run_dir: str) -> tuple[list[dict], dict]:
    """The worker directories of the run's latest attempt, and its launch record."""
    attempts = [(0, run_dir)]
    for name in os.listdir(run_dir) if os.path.isdir(run_dir) else []:
        retry = retry_index(name)
        if retry is not None:
            attempts.append((retry, os.path.join(run_dir, name)))
    attempt, attempt_dir = max(attempts)
    workers = []
    for name in sorted(os.listdir(attempt_dir)) if os.path.isdir(attempt_dir) else []:
        index = worker_index(name)
        if index is not None:
            workers.append({"index": index, "dir": os.path.join(attempt_dir, name)})
    workers.sort(key=lambda w: w["index"])
    launch: dict = {"attempt": attempt}
    for worker in workers:
        state = read_json(os.path.join(worker["dir"], STATE_FILE))
        if state and isinstance(state.get("launch"), dict):
            launch = {**state["launch"], "attempt": attempt}
            break
    return workers, launch


def task_label(config: object) -> str | None:
    """A worker's task (``chief:0``, ``worker:1``, ``ps:0``, ``evaluator:0``) from the
    TF_CONFIG its launch wrote, where the cluster has task types (the inventory's
    tf_chief, tf_ps or tf_evaluator); None for the first shape (every task a ``worker``,
    whose lines stay as they were) or a TF_CONFIG that does not say."""
    if not isinstance(config, dict) or not isinstance(config.get("task"), dict) or not isinstance(config.get("cluster"), dict):
        return None
    kind, index = config["task"].get("type"), config["task"].get("index")
    if not isinstance(kind, str) or isinstance(index, bool) or not isinstance(index, int):
        return None
    if kind == "worker" and set(config["cluster"]) == {"worker"}:
        return None
    return printable(f"{kind}:{index}")


def with_tasks(current: list[dict]) -> list[dict]:
    """``current`` with each worker's ``task`` read from the TF_CONFIG in its directory,
    for a status read without the cluster spec (status.yml, logs.yml); the wait takes the
    tasks from the spec instead (tf_status_lines.task_labels)."""
    for worker in current:
        label = task_label(read_json(os.path.join(worker["dir"], CONFIG_FILE))) if worker.get("dir") else None
        if label:
            worker["task"] = label
    return current


def launch_of(state: dict | None) -> dict:
    launch = state.get("launch") if isinstance(state, dict) else None
    return launch if isinstance(launch, dict) else {}


def counts_failed(worker: dict) -> bool:
    """Whether a worker's end fails the run: exited non-zero, except the sidecar
    evaluator stopped by the runbook once the training ended, and a failed evaluator the
    user did not require (tf_evaluator_required), reported by the verdict instead."""
    if worker["state"] != WORKER_EXITED or worker["returncode"] == 0:
        return False
    if worker.get("evaluator"):
        return bool(worker.get("required")) and not worker.get("training_ended")
    return True


def report(current: list[dict]) -> dict:
    """What a reading says of the host as a whole: every worker exited (``done``), every
    one joined the cluster (``joined``), the indices of those that failed (counts_failed)."""
    return {
        "done": all_exited(current),
        "joined": bool(current) and all(w["joined"] for w in current),
        "failed_workers": [w["index"] for w in current if counts_failed(w)],
    }
