#!/usr/bin/python
# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Report the state of this host's training workers; wait briefly for news."""

from __future__ import annotations

DOCUMENTATION = r"""
module: tf_worker_status
short_description: Read the supervisor records of this host's workers
version_added: "0.1.0"
author: tf-runbook contributors (!UNKNOWN)
description:
  - Reads C(state.json), C(exit.json) and C(worker.log) of each worker directory and
    returns one entry per worker with its state, exit status, why it ended (C(cause)),
    its latest progress line and how many progress lines it printed so far.
  - A progress line is one of the metrics contract's epoch lines (C(worker=0 epoch=2/5 ...))
    or Keras' epoch header (C(Epoch 2/5)), from every format of C(tf_metrics.FORMATS), or a
    line matching O(progress_pattern). The frames and the exception line of a Python
    traceback are never progress, whatever they quote.
  - A log is read once from its start (the last 64 MiB of a larger one), then only what
    was appended; O(progress_marks) carries where the reading stands from one call to the
    next.
  - Waits up to O(wait) seconds on the host, so that the action of the same name, which
    calls it in a loop from the controller, costs one module run per window instead of
    polling blindly; it returns early when every worker has exited or one has failed.
  - The action of the same name runs on the controller and calls this module until the
    host's workers have exited, one of them failed, the deadline passed, or another host
    reported a failure through the attempt's failure flag in O(controller_dir). Without
    O(controller_dir) it checks once.
  - A worker whose C(state.json) exists without C(exit.json) is only running while its
    supervisor is alive (the recorded pid, still working in that worker's directory);
    otherwise it is reported as exited with C(returncode) -1 and the reason.
  - A worker with neither file is starting while the supervisor the launch started
    (C(supervisor_pid) of its entry) is alive; once that supervisor is gone, or when the
    launch could not start it (C(launch_error)), it is reported as exited with
    C(returncode) -1 and the reason (the end of the supervisor's own output,
    C(supervisor.out)).
  - With O(heartbeat), renews the controller heartbeat in O(run_dir) (its modification
    time; the file's name is the contract's, C(tf_run.HEARTBEAT_FILE)) on every check, so
    that the supervisors of a run tied to the controller stop when it goes stale.
  - With O(collect), a call that ends with every worker of the host exited 0 also packs the
    host's collect bundle of the run in O(run_dir), with the rules of
    M(tf_runbook.multiworker.tf_collect_bundle) (one implementation, C(module_utils/tf_bundle.py)),
    and returns it as RV(bundle); the action fetches it in the same task and unpacks it
    under O(controller_dir)C(/<host>) (RV(collected)), so that the collect phase costs no
    module run on such a host. A packing error is returned as RV(bundle_error), and the
    collect then fetches the host's files itself.
  - Without O(workers), finds the workers of the latest attempt of the run in
    O(run_dir) (reattaching from another controller) and returns them as C(workers_found)
    with what their supervisors recorded about the launch (C(launch)).
  - With O(stall_timeout), the action is the run's stall watchdog; it records in the
    attempt's progress directory of O(controller_dir) (controller clock) when this host's
    workers last made progress, reads every host's record, and when no worker of the run
    made progress for O(stall_timeout) seconds it writes the attempt's failure flag with
    C(cause) C(stalled) and returns C(stalled). Progress is a new progress line or CPU
    use; a job whose processes used more than 5% of a core (C(tf_activity.BUSY_CPU_SHARE))
    between two of the module's readings at least 5 s apart is busy, not stalled.
  - Read-only apart from the heartbeat; supports check mode (no heartbeat then).
extends_documentation_fragment:
  - tf_runbook.multiworker.attributes
options:
  workers:
    description: Worker entries with C(index) and C(dir), and optionally C(supervisor_pid),
      the pid the launch (M(tf_runbook.multiworker.tf_worker_launch)) started its
      supervisor with, and C(launch_error), why the launch could not start it.
    type: list
    elements: dict
  run_dir:
    description: The run's directory on this host (C(~) allowed), to find the workers in
      when O(workers) is not given; where the heartbeat is renewed (O(heartbeat)) and what
      O(collect) packs.
    type: path
  heartbeat:
    description: Renew the controller heartbeat of O(run_dir) on every check (not in check
      mode).
    type: bool
    default: false
  collect:
    description:
      - The collect's options (tf_collect_files, tf_collect_artifacts, tf_collect_max_mb).
        A call that ends with every worker of the host exited 0 packs the run's bundle with
        them (needs O(run_dir)). Omitted for none.
    type: dict
    suboptions:
      patterns:
        description: Glob patterns of the files fetched from every worker directory.
        type: list
        elements: str
        required: true
      artifacts:
        description: Glob patterns, relative to each worker directory, of artifacts.
        type: list
        elements: str
        required: true
      max_mb:
        description: Most this host sends, in MB (the rules of M(tf_runbook.multiworker.tf_collect_bundle)).
        type: int
        required: true
  wait:
    description: Seconds to wait on the host before returning, unless every worker has
      exited, one has failed (exited other than 0) or, with O(until_joined), every worker
      has joined first. Progress in between is returned at the end of the wait.
    type: float
    default: 0
  deadline:
    description: Controller epoch seconds after which C(deadline_passed) is true; 0 for
      none. The action judges it on the controller's clock and never sends it to the host.
    type: float
    default: 0
  progress_pattern:
    description: Regular expression of the job's own progress lines (tf_stall_pattern),
      in addition to the registered formats' (C(tf_metrics.progress_pattern)); empty for none.
    type: str
    default: ""
  progress_marks:
    description: Where the reading of each worker's log stood (C(progress_marks) of the
      previous call, by worker directory); the action passes it on.
    type: dict
    default: {}
  tail_lines:
    description: How many of the log's last lines to return per worker.
    type: int
    default: 8
  log_filter:
    description:
      - Leave TensorFlow's C++ log lines (C(I0000 00:00:1733... 12345 file.cc:123] ...),
        C(W...), C(E...), and absl's warning that it logs to stderr before it was set up;
        C(tf_logs.CPP_LOG_LINE)) out of C(log_tail), which then holds the last
        O(tail_lines) other lines, and count them in C(log_hidden).
    type: bool
    default: false
  controller_dir:
    description:
      - Used by the action on the controller. The run's directory on the controller. With
        O(attempt) it names the attempt's failure flag and progress directory (the
        contract's C(tf_run.attempt_failed_flag) and C(tf_run.attempt_progress_dir)); the
        first host that sees a failure writes the flag, and every host stops waiting once
        it exists. The bundle O(collect) packed is unpacked under its C(<host>) directory.
      - Without it, the host is checked once.
    type: path
  attempt:
    description: Used by the action on the controller. The attempt waited for (0 for the
      first launch).
    type: int
    default: 0
  until_joined:
    description: Used by the action on the controller. Stop waiting once every worker of
      the host has joined the cluster (a detached run).
    type: bool
    default: false
  rounds:
    description: Used by the action on the controller. Upper bound of module calls (a
      backstop to the deadline).
    type: int
    default: 100000
  stall_timeout:
    description: Used by the action on the controller. Seconds without progress (a
      progress line or CPU use) on any worker of the run (every host's record in the attempt's progress directory of
      O(controller_dir), private, 0600 files in a 0700 directory) after which the run is
      stalled; 0 for no stall watchdog.
    type: int
    default: 0
  show_logs:
    description: Used by the action on the controller. Print each worker's O(tail_lines)
      last log lines, each prefixed C([<index> <host>]) and escaped, instead of progress.
    type: bool
    default: false
  log_workers:
    description: Used by the action on the controller. With O(show_logs), the indices of
      the workers to print; all when not given.
    type: list
    elements: int
attributes:
  action:
    description: The action of the same name runs on the controller and calls the module
      on the host.
    support: full
  check_mode:
    support: full
    details: Reads only; the heartbeat is not renewed.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Wait for this host's workers, renewing the controller heartbeat, and bring its files
  tf_runbook.multiworker.tf_worker_status:
    workers: "{{ tf_launch_jobs }}"
    run_dir: "{{ tf_worker_run_dir }}"
    heartbeat: true
    wait: 10
    progress_pattern: "{{ tf_stall_pattern }}"
    stall_timeout: 1800
    controller_dir: "runs/{{ tf_run_id }}"
    attempt: 0
    collect:
      patterns: [worker.log, exit.json, state.json]
      artifacts: [model]
      max_mb: 500
  register: tf_wait_status

- name: Find the workers of a run to reattach to it from another controller
  tf_runbook.multiworker.tf_worker_status:
    run_dir: ~/tf-runbook/runs/20250114T100200Z-abc123
  register: found

- name: Show the status of each worker
  ansible.builtin.debug:
    msg: "{{ found.workers | map(attribute='state') | list }}"
"""

RETURN = r"""
workers:
  description:
    - One entry per worker, in the order given, with C(index), C(dir), C(pid),
      C(state) (starting, running or exited), C(returncode), C(reason), C(stopped_by),
      C(joined), C(last_line) (the latest progress line), C(progress_lines) (how many so
      far), C(log_tail), C(log_hidden) (how many C++ log lines O(log_filter) left out of it), C(cause) (why it ended, the mapping of exit.json or one told from
      the record, null while it runs), C(stacks) (exit.json's when its stacks were
      captured, else null), C(started_at) (when its job started, this host's clock) and
      C(progress) (where its training stands, C(tf_metrics.progress_of), the latest epoch,
      its total and metrics, and when epochs ended on this host's clock; from the
      supervisor's C(state.json) while it runs, from C(exit.json)'s timed lines once it
      ended; null before its first epoch).
    - While its job runs (else null), C(cpu_seconds), the CPU time (user and system, with
      that of the children they waited for) every process of the job's process group used
      so far, read from C(/proc) when the call returns; C(cpu_at), this host's monotonic
      clock (seconds) at that reading; and C(process_state), the state letter of the job's
      main process (from C(/proc/<pid>/stat), C(R) running, C(S) sleeping, C(D) uninterruptible
      sleep, C(T) or C(t) stopped, C(Z) zombie); C(gpu_util), where the host has
      C(nvidia-smi), the highest utilisation (percent) of the GPUs the job's processes
      compute on or it was pinned to (C(CUDA_VISIBLE_DEVICES)), null without either (or
      when nvidia-smi failed or did not answer within 5 s).
    - The action adds C(frozen) to every worker, C(state) (C(stopped) for T or t,
      C(uninterruptible) for D), C(since) (controller epoch seconds of the first check of
      this wait that saw it so, every check since agreeing), C(seconds) it was seen so and
      C(until) (the first check that no longer saw it frozen, kept for 60 s; null while it
      lasts); null when its job was not seen frozen.
  type: list
  elements: dict
  returned: always
done:
  description: Every worker has exited (or could not start).
  type: bool
  returned: always
failed_workers:
  description: Indices of workers that exited non-zero or could not start.
  type: list
  elements: int
  returned: always
deadline_passed:
  description: O(deadline) is set and has passed.
  type: bool
  returned: always
joined:
  description: Every worker has joined the cluster (its supervisor saw the startup line).
  type: bool
  returned: always
peer_failed:
  description: The failure flag another host wrote, when the action stopped waiting
    because of it.
  type: dict
  returned: when another host reported a failure
workers_found:
  description: Without O(workers), the workers found in O(run_dir) (C(index), C(dir)).
  type: list
  elements: dict
  returned: when O(run_dir) is used
launch:
  description: Without O(workers), the attempt, deadline and what the supervisors were
    started with (from the first worker's C(state.json)). The action adds
    C(deadline_at_controller), the host's C(deadline_at) on the controller's clock.
  type: dict
  returned: when O(run_dir) is used
run_dir:
  description: Without O(workers), the run's directory, absolute.
  type: str
  returned: when O(run_dir) is used
now:
  description: The host's clock (epoch seconds) when the module returned; the action
    converts the host's times (C(launch.deadline_at)) to the controller's clock with it.
  type: float
  returned: always
progress_marks:
  description: Where the reading of each worker's log stands, for the next call.
  type: dict
  returned: always
clock_offset:
  description: Controller's clock minus the host's, in seconds, measured by the action.
  type: float
  returned: always
controller_gone:
  description: Set by the action (with C(failed)) when C(ansible-playbook)'s main process
    ended while it waited (a C(kill -9)). It then calls the host no more, so that the
    controller heartbeat is no longer renewed and the supervisors stop the run within their
    controller timeout.
  type: bool
  returned: when ansible-playbook ended during the wait
stalled:
  description: Set by the action when the run stalled, C(seconds) without progress (no
    progress line, no CPU use) and C(detail), what was seen (C(no worker printed a
    progress line for 30 s and none used over 5% of a core (at most 0.2%, worker 1 on
    node1) (tf_stall_timeout 30 s))).
  type: dict
  returned: when the stall watchdog found the run stalled
bundle:
  description: The module's packed bundle (C(run_dir), C(files), C(left_out), C(truncated)
    and C(bundle), the archive's path on the host), as M(tf_runbook.multiworker.tf_collect_bundle)
    returns them. The action replaces it with RV(collected).
  type: dict
  returned: with O(collect), when every worker of the host exited 0 (module only)
bundle_error:
  description: Why the bundle could not be packed or brought; the collect fetches the
    host's files then.
  type: str
  returned: when packing or bringing the bundle failed
collected:
  description: What the action brought of the host's bundle, as the collect's action
    reports it, C(files), C(left_out), C(truncated), C(updated) and C(dest) (the host's
    directory under O(controller_dir)).
  type: dict
  returned: when the wait ended with every worker of the host exited 0, no other host
    failed, and the wait was not detached
"""

import os
import re
import tarfile
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_bundle import pack_run
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_causes import cause_of
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_gpu_use import gpu_use
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_logs import quiet_tail
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_metrics import progress_of, progress_pattern
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_proc import PROC, group_usage, works_in
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import (
    EXIT_FILE,
    HEARTBEAT_FILE,
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

# How often the wait reads the workers' records (state, log, supervisor).
POLL_SECONDS = 0.25
# How often, between two reads, it looks for a new exit record (one stat per worker): a
# worker's exit is seen within this, and the last one ends the call at once.
EXIT_POLL_SECONDS = 0.05
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


def _tail(path: str, lines: int, max_bytes: int = 65536) -> list[str]:
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


def _launch_failure(entry: dict) -> str | None:
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
    tail = _tail(os.path.join(entry["dir"], LAUNCH_OUTPUT_FILE), 3)
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
        tail, hidden = quiet_tail(_tail(log_path, FILTER_WINDOW_FACTOR * tail_lines + 200), tail_lines)
    else:
        tail = _tail(log_path, max(tail_lines, 50))
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
        )
    elif state is not None and state.get("pid") is None and entry.get("launch_error"):
        # Armed, and the launch's go never started it: failed now, not when it gives up.
        reason = f"the worker could not be launched: {entry['launch_error']}"
        info.update(state=WORKER_EXITED, returncode=-1, reason=reason, cause={"kind": "startup", "detail": reason})
    elif state is not None:
        info["state"] = WORKER_RUNNING
    else:
        failure = _launch_failure(entry)
        if failure is not None:
            reason = f"the worker could not be launched: {failure}"
            info.update(state=WORKER_EXITED, returncode=-1, reason=reason, cause={"kind": "startup", "detail": reason})
    return info


def with_activity(current: list[dict], proc: str = PROC, smi: str | None = None) -> list[dict]:
    """Each worker of ``current`` with what ``/proc`` shows of its job (the process group
    and the pid its ``state.json`` records), read once per call, at its end, in one pass
    over the process table: ``cpu_seconds`` (the CPU time the group's processes used so
    far, tf_proc.group_usage), ``cpu_at`` (this host's monotonic clock at the reading) and
    ``process_state`` (the job's main process's state letter) and ``gpu_util`` (the
    highest utilisation, in percent, of the job's GPUs, tf_gpu_use; None without
    nvidia-smi or a GPU of its own); None where the job does not run. ``smi``: the
    nvidia-smi to ask (found on the host when None, not asked when empty)."""
    jobs = {}
    for worker in current:
        if worker["state"] == WORKER_RUNNING:
            state = read_json(os.path.join(worker["dir"], STATE_FILE)) or {}
            jobs[worker["index"]] = (state.get("pid"), state.get("pgid"))
    usage = group_usage([pgid for _pid, pgid in jobs.values()], proc)
    at = time.monotonic()
    gpus = gpu_use(gpu_jobs(current, jobs, usage), smi) if smi != "" else {}
    result = []
    for worker in current:
        pid, pgid = jobs.get(worker["index"], (None, None))
        group = usage.get(pgid) if isinstance(pgid, int) else None
        result.append({
            **worker,
            "cpu_seconds": round(group["cpu_seconds"], 2) if group else None,
            "cpu_at": at if group else None,
            "process_state": group["states"].get(pid) if group else None,
            "gpu_util": gpus.get(worker["index"]) if group else None,
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


def worth_returning(first: list[dict], current: list[dict], until_joined: bool) -> bool:
    """Whether the wait must hear now rather than at the end of its window.

    A worker that failed (exited other than 0) since the call began, and, for a detached
    run, every worker having joined. A worker that exits 0 while others of the host still
    run is not news worth a return: the others of a healthy run end with it, and the
    call returns by itself once all have exited (an early return there cost one more
    module run before the verdict). Progress (a new epoch line, a worker running or
    joining) also waits for the window's end: each early return starts the module again
    on the host, which took CPU from the training itself (on a host that trains two
    workers on two cores, the job ran about 15 % slower than launched by hand).
    """
    exited = {w["index"] for w in first if w["state"] == WORKER_EXITED}
    if any(w["state"] == WORKER_EXITED and w["index"] not in exited and w.get("returncode") != 0 for w in current):
        return True
    return bool(until_joined and current and all(w["joined"] for w in current))


def snapshot(workers: list[dict], progress: re.Pattern, tail_lines: int, marks: dict | None = None,
             log_filter: bool = False) -> list[dict]:  # fmt: skip
    return [worker_state(entry, progress, tail_lines, marks, log_filter) for entry in workers]


def all_exited(current: list[dict]) -> bool:
    return all(w["state"] == WORKER_EXITED for w in current)


def exit_records(workers: list[dict]) -> frozenset:
    """The worker directories that hold an exit record: one stat each, cheap enough to ask
    every `EXIT_POLL_SECONDS` while the job trains beside it."""
    return frozenset(entry["dir"] for entry in workers if os.path.exists(os.path.join(entry["dir"], EXIT_FILE)))


def wait_for_news(workers: list[dict], seen: frozenset, until: float) -> frozenset:
    """Sleep until monotonic time ``until``, or until a worker directory gains an exit
    record not in ``seen``; the directories with one now."""
    current = exit_records(workers)
    while current == seen and time.monotonic() < until:
        time.sleep(max(0.0, min(EXIT_POLL_SECONDS, until - time.monotonic())))
        current = exit_records(workers)
    return current


def packed_bundle(run_dir: str, collect: dict, current: list[dict]) -> dict:
    """With every worker of ``current`` exited 0, the host's collect bundle (pack_run's
    result, as ``bundle``), or why it could not be packed (``bundle_error``); else nothing."""
    if not current or any(w["state"] != WORKER_EXITED or w["returncode"] != 0 for w in current):
        return {}
    try:
        return {"bundle": pack_run(run_dir, collect["patterns"], collect["artifacts"], collect["max_mb"])}
    except (OSError, tarfile.TarError) as exc:
        return {"bundle_error": f"cannot pack the collect bundle in {run_dir}: {exc}"}


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


def touch(path: str) -> None:
    """Renew the heartbeat: create the file or update its modification time."""
    with open(path, "a", encoding="utf-8"):
        pass
    os.utime(path, None)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "workers": {"type": "list", "elements": "dict"},
            "run_dir": {"type": "path"},
            "heartbeat": {"type": "bool", "default": False},
            "collect": {
                "type": "dict",
                "options": {
                    "patterns": {"type": "list", "elements": "str", "required": True},
                    "artifacts": {"type": "list", "elements": "str", "required": True},
                    "max_mb": {"type": "int", "required": True},
                },
            },
            "wait": {"type": "float", "default": 0},
            "deadline": {"type": "float", "default": 0},
            "progress_pattern": {"type": "str", "default": ""},
            "progress_marks": {"type": "dict", "default": {}},
            "tail_lines": {"type": "int", "default": 8},
            "log_filter": {"type": "bool", "default": False},
            # Read by the action of the same name on the controller, never sent here.
            "controller_dir": {"type": "path"},
            "attempt": {"type": "int", "default": 0},
            "until_joined": {"type": "bool", "default": False},
            "rounds": {"type": "int", "default": 100000},
            "stall_timeout": {"type": "int", "default": 0},
            "show_logs": {"type": "bool", "default": False},
            "log_workers": {"type": "list", "elements": "int"},
        },
        required_one_of=[("workers", "run_dir")],
        required_if=[("heartbeat", True, ("run_dir",))],
        required_by={"collect": ("run_dir",)},
        supports_check_mode=True,
    )
    params = module.params
    try:
        progress = progress_regex(params["progress_pattern"])
    except re.error as exc:
        module.fail_json(msg=f"progress_pattern {params['progress_pattern']!r} is not a regular expression: {exc}")
    marks = {path: {**new_mark(), **mark} for path, mark in params["progress_marks"].items() if isinstance(mark, dict)}
    extra: dict = {}
    workers = params["workers"]
    run_dir = os.path.abspath(params["run_dir"]) if params["run_dir"] else ""
    if workers is None:
        workers, launch = find_workers(run_dir)
        extra = {"workers_found": workers, "launch": launch, "run_dir": run_dir}
    heartbeat = os.path.join(run_dir, HEARTBEAT_FILE) if params["heartbeat"] and not module.check_mode else ""

    def beat() -> None:
        if heartbeat:
            try:
                touch(heartbeat)
            except OSError as exc:
                module.fail_json(msg=f"cannot renew the controller heartbeat {heartbeat}: {exc}")

    beat()
    first = snapshot(workers, progress, params["tail_lines"], marks, params["log_filter"])
    current = first
    exits = exit_records(workers)
    stop_at = time.monotonic() + max(0.0, params["wait"])
    while time.monotonic() < stop_at and not all_exited(current):
        exits = wait_for_news(workers, exits, min(stop_at, time.monotonic() + POLL_SECONDS))
        beat()
        current = snapshot(workers, progress, params["tail_lines"], marks, params["log_filter"])
        if worth_returning(first, current, params["until_joined"]):
            break
    current = with_activity(current)
    failed = [w["index"] for w in current if w["state"] == WORKER_EXITED and w["returncode"] != 0]
    if params["collect"] and not module.check_mode:
        extra.update(packed_bundle(run_dir, params["collect"], current))
    module.exit_json(
        changed=False,
        workers=current,
        done=all_exited(current),
        joined=bool(current) and all(w["joined"] for w in current),
        failed_workers=failed,
        deadline_passed=bool(params["deadline"]) and time.time() > params["deadline"],
        progress_marks=marks,
        now=time.time(),
        **extra,
    )


if __name__ == "__main__":
    main()
