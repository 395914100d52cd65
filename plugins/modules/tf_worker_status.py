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
    returns one entry per worker with its state, exit status and latest progress line.
  - Waits up to O(wait) seconds on the host, so that the action of the same name, which
    calls it in a loop from the controller, costs one module run per window instead of
    polling blindly; it returns early when every worker has exited or one has failed.
  - The action of the same name runs on the controller and calls this module until the
    host's workers have exited, one of them failed, the deadline passed, or another host
    reported a failure through O(flag_file). Without O(flag_file) it checks once.
  - A worker whose C(state.json) exists without C(exit.json) is only running while its
    supervisor is alive (the recorded pid, still working in that worker's directory);
    otherwise it is reported as exited with C(returncode) -1 and the reason.
  - A worker with neither file is starting while the supervisor the launch started
    (C(supervisor_pid) of its entry) is alive; once that supervisor is gone, or when the
    launch could not start it (C(launch_error)), it is reported as exited with
    C(returncode) -1 and the reason (the end of the supervisor's own output,
    C(supervisor.out)).
  - With O(heartbeat_file), renews that file (its modification time) on every check, so
    that the supervisors of a run tied to the controller stop when it goes stale.
  - Without O(workers), finds the workers of the latest attempt of the run in
    O(run_dir) (reattaching from another controller) and returns them as C(workers_found)
    with what their supervisors recorded about the launch (C(launch)).
  - Read-only apart from the heartbeat; supports check mode (no heartbeat then).
options:
  workers:
    description: Worker entries with C(index) and C(dir), and optionally C(supervisor_pid),
      the pid the launch (M(tf_runbook.multiworker.tf_worker_launch)) started its
      supervisor with, and C(launch_error), why the launch could not start it.
    type: list
    elements: dict
  run_dir:
    description: The run's directory on this host (C(~) allowed), to find the workers in
      when O(workers) is not given.
    type: path
  heartbeat_file:
    description: File whose modification time is renewed on every check; empty for none.
    type: path
    default: ""
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
    description: Regular expression for the lines shown as progress.
    type: str
    default: epoch=
  tail_lines:
    description: How many of the log's last lines to return per worker.
    type: int
    default: 8
  flag_file:
    description:
      - Controller path of the run's failure flag for this attempt, used by the action on
        the controller. The first host that sees a failure writes it; every host stops
        waiting once it exists.
      - Without it, the host is checked once.
    type: path
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
attributes:
  action:
    description: The action of the same name runs on the controller and calls the module
      on the host.
    support: full
  check_mode:
    description: Reads only; the heartbeat is not renewed.
    support: full
"""

EXAMPLES = r"""
- name: Wait for this host's workers, renewing the controller heartbeat
  tf_runbook.multiworker.tf_worker_status:
    workers: "{{ tf_launch_jobs }}"
    wait: 10
    progress_pattern: "epoch="
    heartbeat_file: "{{ tf_worker_run_dir }}/controller.heartbeat"
    flag_file: "runs/{{ tf_run_id }}/.attempt-0.failed"
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
  description: One entry per worker, in the order given, with C(index), C(dir), C(pid),
    C(state) (starting, running or exited), C(returncode), C(reason), C(stopped_by),
    C(joined), C(last_line) and C(log_tail).
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
    started with (from the first worker's C(state.json)).
  type: dict
  returned: when O(run_dir) is used
run_dir:
  description: Without O(workers), the run's directory, absolute.
  type: str
  returned: when O(run_dir) is used
"""

import os
import re
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import (
    EXIT_FILE,
    LAUNCH_OUTPUT_FILE,
    LOG_FILE,
    STATE_FILE,
    printable,
    read_json,
    retry_index,
    worker_index,
)
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_proc import works_in

# How often the wait reads the workers' records: a written exit record is seen within this.
POLL_SECONDS = 0.25


def _tail(path: str, lines: int, max_bytes: int = 65536) -> list[str]:
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


def worker_state(entry: dict, progress: re.Pattern, tail_lines: int) -> dict:
    wdir = entry["dir"]
    state = read_json(os.path.join(wdir, STATE_FILE))
    exit_ = read_json(os.path.join(wdir, EXIT_FILE))
    tail = _tail(os.path.join(wdir, LOG_FILE), max(tail_lines, 50))
    progress_lines = [line for line in tail if progress.search(line)]
    info = {
        "index": int(entry["index"]),
        "dir": wdir,
        "pid": state.get("pid") if state else None,
        "state": "starting",
        "returncode": None,
        "reason": None,
        "stopped_by": None,
        "joined": bool(state and state.get("joined_at")),
        "last_line": progress_lines[-1] if progress_lines else None,
        "log_tail": tail[-tail_lines:],
    }
    if exit_ is None and state is not None and not supervisor_alive(state.get("supervisor_pid"), wdir):
        # It may have written exit.json just before it ended: read it again.
        exit_ = read_json(os.path.join(wdir, EXIT_FILE))
        if exit_ is None:
            info.update(
                state="exited",
                returncode=-1,
                reason=(
                    f"the supervisor (pid {state.get('supervisor_pid')}) died without recording an exit "
                    "(killed, or out of memory); its job was stopped with it"
                ),
            )
            return info
    if exit_ is not None:
        info.update(
            state="exited",
            returncode=exit_.get("returncode"),
            reason=exit_.get("reason"),
            stopped_by=exit_.get("stopped_by"),
            joined=bool(exit_.get("joined")) or info["joined"],
        )
    elif state is not None and state.get("pid") is None and entry.get("launch_error"):
        # Armed, and the launch's go never started it: failed now, not when it gives up.
        info.update(state="exited", returncode=-1, reason=f"the worker could not be launched: {entry['launch_error']}")
    elif state is not None:
        info["state"] = "running"
    else:
        failure = _launch_failure(entry)
        if failure is not None:
            info.update(state="exited", returncode=-1, reason=f"the worker could not be launched: {failure}")
    return info


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
    exited = {w["index"] for w in first if w["state"] == "exited"}
    if any(w["state"] == "exited" and w["index"] not in exited and w.get("returncode") != 0 for w in current):
        return True
    return bool(until_joined and current and all(w["joined"] for w in current))


def snapshot(workers: list[dict], progress: re.Pattern, tail_lines: int) -> list[dict]:
    return [worker_state(entry, progress, tail_lines) for entry in workers]


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
            "heartbeat_file": {"type": "path", "default": ""},
            "wait": {"type": "float", "default": 0},
            "deadline": {"type": "float", "default": 0},
            "progress_pattern": {"type": "str", "default": "epoch="},
            "tail_lines": {"type": "int", "default": 8},
            # Read by the action of the same name on the controller, never sent here.
            "flag_file": {"type": "path"},
            "until_joined": {"type": "bool", "default": False},
            "rounds": {"type": "int", "default": 100000},
        },
        required_one_of=[("workers", "run_dir")],
        supports_check_mode=True,
    )
    params = module.params
    progress = re.compile(params["progress_pattern"])
    extra: dict = {}
    workers = params["workers"]
    if workers is None:
        run_dir = os.path.abspath(params["run_dir"])
        workers, launch = find_workers(run_dir)
        extra = {"workers_found": workers, "launch": launch, "run_dir": run_dir}
    heartbeat = "" if module.check_mode else params["heartbeat_file"]

    def beat() -> None:
        if heartbeat:
            try:
                touch(heartbeat)
            except OSError as exc:
                module.fail_json(msg=f"cannot renew the controller heartbeat {heartbeat}: {exc}")

    beat()
    first = snapshot(workers, progress, params["tail_lines"])
    current = first
    stop_at = time.monotonic() + max(0.0, params["wait"])
    while time.monotonic() < stop_at and not all(w["state"] == "exited" for w in current):
        time.sleep(POLL_SECONDS)
        beat()
        current = snapshot(workers, progress, params["tail_lines"])
        if worth_returning(first, current, params["until_joined"]):
            break
    failed = [w["index"] for w in current if w["state"] == "exited" and w["returncode"] != 0]
    module.exit_json(
        changed=False,
        workers=current,
        done=all(w["state"] == "exited" for w in current),
        joined=bool(current) and all(w["joined"] for w in current),
        failed_workers=failed,
        deadline_passed=bool(params["deadline"]) and time.time() > params["deadline"],
        **extra,
    )


if __name__ == "__main__":
    main()
