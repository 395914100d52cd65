#!/usr/bin/python
# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stop the processes of one run on this host, found through the run's own records."""

from __future__ import annotations

DOCUMENTATION = r"""
module: tf_worker_stop
short_description: Stop every live process of one training run on this host
version_added: "0.1.0"
author: tf-runbook contributors (!UNKNOWN)
description:
  - For each C(worker-*) directory of the run (and C(retry-*/worker-*) of its restarts), reads C(state.json) written by the
    supervisor and finds the supervisor and the training process group. The group is
    signalled as a whole (every process of the job, also one that changed directory)
    once one of its processes still works in that worker's directory, which shows that
    the group still belongs to the run; the supervisor is signalled when its working
    directory is that worker's directory. A reused PID of an unrelated process is never
    touched, and nothing is ever found by name.
  - Before signalling, writes the stop request C(stop.json) (O(stopped_by), O(reason))
    into the worker directory; the supervisor records it in C(exit.json) as
    C(stopped_by), and the wait never restarts a run an operator stopped.
  - Sends SIGTERM, waits O(grace) seconds, then SIGKILL. Writes C(exit.json) for a
    worker whose supervisor could not write it any more.
  - Safe to run twice; a run with nothing alive reports no change. Supports check mode.
options:
  run_dir:
    description: The run's directory on this host (C(~) allowed).
    type: path
    required: true
  grace:
    description: Seconds between SIGTERM and SIGKILL.
    type: float
    default: 5
  reason:
    description: Why the run is stopped; recorded in C(exit.json).
    type: str
    default: stopped by the runbook
  stopped_by:
    description: Who stops the run, recorded as C(stopped_by) in C(exit.json).
    type: str
    choices: [operator, runbook]
    default: runbook
"""

EXAMPLES = r"""
- name: Stop this host's workers of a run, as the runbook does at the end of a run
  tf_runbook.multiworker.tf_worker_stop:
    run_dir: ~/tf-runbook/runs/20250114T100200Z-abc123

- name: Stop a run by hand, recorded as stopped by an operator, with more time to save
  tf_runbook.multiworker.tf_worker_stop:
    run_dir: ~/tf-runbook/runs/20250114T100200Z-abc123
    stopped_by: operator
    reason: stopped by an operator to free the GPUs
    grace: 30

- name: Show what a stop would signal, without signalling anything
  tf_runbook.multiworker.tf_worker_stop:
    run_dir: ~/tf-runbook/runs/20250114T100200Z-abc123
  check_mode: true
"""

RETURN = r"""
stopped:
  description: Workers that had live processes, with the PIDs signalled (in check mode,
    the PIDs that would be).
  type: list
  elements: dict
  returned: always
  sample: [{"dir": "/home/train/tf-runbook/runs/r1/worker-0", "pids": [4242, 4243]}]
workers:
  description: Worker directories found for the run.
  type: list
  elements: str
  returned: always
  sample: ["/home/train/tf-runbook/runs/r1/worker-0"]
run_dir:
  description: The run's directory, absolute.
  type: str
  returned: always
  sample: /home/train/tf-runbook/runs/r1
"""

import glob
import os
import signal
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import (
    EXIT_FILE,
    RETRY_PREFIX,
    STATE_FILE,
    STOP_FILE,
    STOP_REQUESTERS,
    WORKER_PREFIX,
    killed_exit_record,
    read_json,
    write_json_atomic,
)
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_proc import (
    ENDED_STATES,
    group_members,
    process_cwd,
    process_ids,
    process_stat,
)


def run_processes(worker_dir: str, state: dict) -> list[int]:
    """PIDs of the supervisor and of the training group that still belong to this worker."""
    wanted_dir = os.path.realpath(worker_dir)
    pgid = state.get("pgid")
    supervisor = state.get("supervisor_pid")
    found = []
    for pid in process_ids():
        stat = process_stat(pid)
        if stat is None or stat[0] in ENDED_STATES:
            continue
        in_group = pgid is not None and stat[1] == int(pgid)
        if (in_group or pid == supervisor) and process_cwd(pid) == wanted_dir:
            found.append(pid)
    return found


def group_belongs(worker_dir: str, state: dict) -> bool:
    """The recorded group still belongs to this worker: one of its processes (the job or
    the supervisor's keeper) still works in the worker's directory."""
    wanted_dir = os.path.realpath(worker_dir)
    return any(process_cwd(pid) == wanted_dir for pid in group_members(state.get("pgid")))


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        _signal_all(group_members(pgid), sig)


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def write_stop_request(worker_dir: str, stopped_by: str, reason: str) -> None:
    """Tell the supervisor who stops it, before it gets the signal (first request wins)."""
    path = os.path.join(worker_dir, STOP_FILE)
    if os.path.exists(path):
        return
    write_json_atomic(path, {"by": stopped_by, "reason": reason, "at": time.time()})


def stop_worker(worker_dir: str, grace: float, stopped_by: str | None = None, reason: str = "") -> list[int]:
    state = read_json(os.path.join(worker_dir, STATE_FILE))
    if state is None:
        return []
    pgid = state.get("pgid")
    # Checked once, before anything is signalled: after SIGTERM the processes that show
    # the group is the run's may be gone while others of the group are still there.
    owned_group = pgid if group_belongs(worker_dir, state) else None

    def alive() -> list[int]:
        return sorted(set(run_processes(worker_dir, state)) | set(group_members(owned_group)))

    pids = alive()
    if not pids:
        return []
    if stopped_by:
        write_stop_request(worker_dir, stopped_by, reason)
    # The supervisor stops its group itself on SIGTERM; signalling the group directly
    # as well covers a supervisor that is gone or stuck.
    _signal_all(run_processes(worker_dir, state), signal.SIGTERM)
    if owned_group:
        _signal_group(owned_group, signal.SIGTERM)

    def adopt_started_job() -> None:
        """An armed supervisor (no job group when its state was read) may have started its
        job on the launch's go since: that job's group is the run's to stop as well."""
        nonlocal state, owned_group
        if owned_group is not None or state.get("pgid") is not None:
            return
        later = read_json(os.path.join(worker_dir, STATE_FILE))
        if later and later.get("pgid") is not None and group_belongs(worker_dir, later):
            state, owned_group = later, later["pgid"]
            _signal_group(owned_group, signal.SIGTERM)

    adopt_started_job()
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and alive():
        time.sleep(0.2)
    adopt_started_job()
    # Kill what is left of the training group first, so that a live supervisor still sees
    # its child exit and records exit.json itself; then the supervisor, if it lingers.
    supervisor = state.get("supervisor_pid")
    if owned_group:
        _signal_group(owned_group, signal.SIGKILL)
    _signal_all([pid for pid in run_processes(worker_dir, state) if pid != supervisor], signal.SIGKILL)
    for _attempt in range(30):
        if not alive():
            break
        time.sleep(0.1)
    _signal_all(alive(), signal.SIGKILL)
    return pids


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "run_dir": {"type": "path", "required": True},
            "grace": {"type": "float", "default": 5},
            "reason": {"type": "str", "default": "stopped by the runbook"},
            "stopped_by": {"type": "str", "default": "runbook", "choices": list(STOP_REQUESTERS)},
        },
        supports_check_mode=True,
    )
    run_dir = os.path.abspath(module.params["run_dir"])
    worker_dirs = sorted(
        glob.glob(os.path.join(run_dir, f"{WORKER_PREFIX}*"))
        + glob.glob(os.path.join(run_dir, f"{RETRY_PREFIX}*", f"{WORKER_PREFIX}*"))
    )
    stopped = []
    for worker_dir in worker_dirs:
        state = read_json(os.path.join(worker_dir, STATE_FILE))
        if state is None:
            continue
        if module.check_mode:
            pids = run_processes(worker_dir, state)
        else:
            pids = stop_worker(
                worker_dir, module.params["grace"], module.params["stopped_by"], module.params["reason"]
            )
        if pids:
            stopped.append({"dir": worker_dir, "pids": pids})
        exit_path = os.path.join(worker_dir, EXIT_FILE)
        if pids and not module.check_mode:
            # Give the supervisor a moment to record the exit itself.
            for _attempt in range(20):
                if os.path.exists(exit_path):
                    break
                time.sleep(0.1)
            if not os.path.exists(exit_path):
                record = killed_exit_record(
                    module.params["reason"], module.params["stopped_by"], state.get("started_at"), time.time()
                )
                write_json_atomic(exit_path, record)
    module.exit_json(changed=bool(stopped), stopped=stopped, workers=worker_dirs, run_dir=run_dir)


if __name__ == "__main__":
    main()
