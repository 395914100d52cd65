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
  - Sends SIGTERM (then SIGCONT, so that a stopped process acts on it), waits O(grace)
    seconds, then SIGKILL. Writes C(exit.json) for a worker whose supervisor could not
    write it any more.
  - With O(capture_stacks), first asks every running job of the run for its Python stacks
    (every thread's, through the job's wrapper, on a real-time signal that does not stop
    it), waits up to O(stacks_timeout) seconds for each C(stacks.txt) and returns them
    parsed per worker; with O(stop=false) it then stops nothing, so that a play can take
    every host's stacks before any worker is stopped.
  - A C(state.json) whose C(pid), C(pgid) or C(supervisor_pid) is not a whole number is
    refused (the module fails naming the file) and nothing of that worker is signalled;
    the other workers are still stopped.
  - Safe to run twice; a run with nothing alive reports no change. Supports check mode.
extends_documentation_fragment:
  - tf_runbook.multiworker.attributes
options:
  run_dir:
    description: The run's directory on this host (C(~) allowed).
    type: path
    required: true
  grace:
    description:
      - Seconds between SIGTERM and SIGKILL (the role passes C(tf_stop_grace)).
      - Required when O(stop) is true.
    type: float
  reason:
    description: Why the run is stopped; recorded in C(exit.json).
    type: str
    default: stopped by the runbook
  stopped_by:
    description: Who stops the run, recorded as C(stopped_by) in C(exit.json).
    type: str
    choices: [operator, runbook]
    default: runbook
  cause:
    description: Why the run is stopped, as a cause kind (for example C(stalled)),
      written into C(stop.json); the supervisor records it as the worker's cause in
      C(exit.json) instead of the one O(stopped_by) implies. Empty for none.
    type: str
    choices: ["", completed, job-error, peer-lost, out-of-memory, killed, preempted, stalled, deadline, startup,
      host-lost, controller-lost, operator, runbook, restore-mismatch, stopped, coordinator-gone, unknown]
    default: ""
  capture_stacks:
    description: Take every running job's stacks (into its worker directory's
      C(stacks.txt)) before anything is stopped, and return them.
    type: bool
    default: false
  stacks_timeout:
    description: Seconds to wait for each job's stacks.
    type: float
    default: 5
  stop:
    description: Stop the run's processes; false with O(capture_stacks) only takes the
      stacks.
    type: bool
    default: true
  release_ports:
    description: Once the run's processes are stopped, release the ports the run had
      reserved on this host (C(tf_worker_port auto), C(module_utils/tf_ports_auto.py)),
      since the stop ends the run (role tf_stop passes it for an operator's stop, after which
      nothing restarts the run).
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    details: Reports which workers it would stop; signals none.
  diff_mode:
    support: none
  platform:
    platforms: posix
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

- name: Take every worker's stacks on every host first (a stall), then stop them
  tf_runbook.multiworker.tf_worker_stop:
    run_dir: ~/tf-runbook/runs/20250114T100200Z-abc123
    capture_stacks: true
    stop: false
  register: stacks

- name: Stop the stalled run, recorded as stalled
  tf_runbook.multiworker.tf_worker_stop:
    run_dir: ~/tf-runbook/runs/20250114T100200Z-abc123
    cause: stalled
    reason: no worker printed progress for 1800 s

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
ports_released:
  description: The ports of C(tf_worker_port auto) that this run had reserved on the host
    (in this user's register, C(module_utils/tf_ports_auto.py)) and that this module run
    released, the run having ended here; a port still listened on stays reserved.
  type: list
  elements: int
  returned: with O(release_ports), not in check mode
stacks:
  description: With O(capture_stacks), each running job's stacks, per worker directory
    (C(stacks) is null when the job wrote none in time, or runs without the wrapper, and
    C(missing) then says which; the stop request carries it into the worker's exit record);
    C(frames) are the innermost frames of the job's own code in its main thread,
    innermost last, and C(where) is C(own-code), C(tensorflow) or C(unknown).
  type: list
  elements: dict
  returned: always
  sample: [{"dir": "/home/train/tf-runbook/runs/r1/worker-1", "index": 1, "stacks": {"file": "stacks.txt",
    "captured_at": 1736848920.5, "where": "own-code", "frames": ["train.py:41 in load_batch"]}, "missing": null}]
"""

import glob
import os
import signal
import threading
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_causes import (
    CAUSES,
    classify,
    parse_stacks,
    request_stacks,
    stacks_dumped,
)
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import (
    EXIT_FILE,
    JOB_DIR,
    RETRY_PREFIX,
    STACKS_FILE,
    STATE_FILE,
    STOP_FILE,
    STOP_REQUESTERS,
    WORKER_PREFIX,
    killed_exit_record,
    read_json,
    worker_index,
    write_json_atomic,
)
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_ports_auto import end_run
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_proc import (
    ENDED_STATES,
    group_members,
    process_cwd,
    process_ids,
    process_stat,
    signal_caught,
)

# The fields of state.json that name processes: each a whole number, or null.
PROCESS_FIELDS = ("pid", "pgid", "supervisor_pid", "keeper_pid")


def state_problem(path: str, state: dict) -> str | None:
    """Why a state.json cannot be trusted to name processes (a field that is not a whole
    number: a corrupt or foreign file); None when it can."""
    for name in PROCESS_FIELDS:
        value = state.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
            return f"{path}: {name} {value!r} is not a process id: nothing of this worker was signalled"
    return None


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
        in_group = pgid is not None and stat[1] == pgid
        if (in_group or pid == supervisor) and process_cwd(pid) == wanted_dir:
            found.append(pid)
    return found


def group_belongs(worker_dir: str, state: dict) -> bool:
    """The recorded group still belongs to this worker: one of its processes (the job or
    the supervisor's keeper) still works in the worker's directory."""
    wanted_dir = os.path.realpath(worker_dir)
    return any(process_cwd(pid) == wanted_dir for pid in group_members(state.get("pgid")))


def _with_continue(sig: int) -> tuple[int, ...]:
    """The signals a stop sends for ``sig``: a SIGTERM is followed by a SIGCONT, since a
    stopped process (SIGSTOP, a debugger's) acts on a SIGTERM it handles only once
    continued."""
    return (sig, signal.SIGCONT) if sig == signal.SIGTERM else (sig,)


def _signal_group(pgid: int, sig: int) -> None:
    for each in _with_continue(sig):
        try:
            os.killpg(pgid, each)
        except (ProcessLookupError, PermissionError):
            _signal_all(group_members(pgid), each)


def _signal_all(pids: list[int], sig: int) -> None:
    for each in _with_continue(sig):
        for pid in pids:
            try:
                os.kill(pid, each)
            except (ProcessLookupError, PermissionError):
                pass


def write_stop_request(
    worker_dir: str, stopped_by: str, reason: str, cause: str = "", stacks_missing: str | None = None
) -> None:
    """Tell the supervisor who stops it and why, before it gets the signal (first request
    wins); ``cause``, a cause kind, is recorded as the worker's cause, and
    ``stacks_missing``, why no stacks were taken, with its exit record."""
    path = os.path.join(worker_dir, STOP_FILE)
    if os.path.exists(path):
        return
    request = {"by": stopped_by, "reason": reason, "at": time.time()}
    if cause:
        request["cause"] = cause
    if stacks_missing:
        request["stacks_missing"] = stacks_missing
    write_json_atomic(path, request)


def capture_stacks(worker_dirs: list[str], job_dir: str, timeout: float) -> list[dict]:
    """Every running job's stacks, asked of all at once (a thread per job): per worker
    directory, the parsed stacks or None (the job is gone, runs without the wrapper, or
    wrote nothing within ``timeout`` seconds)."""
    found: dict[str, dict | None] = {}

    def one(worker_dir: str, pid: int) -> None:
        path = os.path.join(worker_dir, STACKS_FILE)
        found[worker_dir] = None
        if request_stacks(pid, path, timeout):
            with open(path, encoding="utf-8", errors="replace") as handle:
                text = handle.read()
            if stacks_dumped(text):
                found[worker_dir] = {
                    "file": STACKS_FILE, "captured_at": os.path.getmtime(path), **parse_stacks(text, job_dir)
                }  # fmt: skip

    threads = []
    missing: dict[str, str] = {}
    for worker_dir in worker_dirs:
        state = read_json(os.path.join(worker_dir, STATE_FILE)) or {}
        found[worker_dir] = None
        why = stacks_refusal(worker_dir, state)
        if why is None:
            threads.append(threading.Thread(target=one, args=(worker_dir, state["pid"]), daemon=True))
        else:
            missing[worker_dir] = why
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout + 5)
    for worker_dir in worker_dirs:
        if found.get(worker_dir) is None and worker_dir not in missing:
            missing[worker_dir] = f"no stacks: the job wrote none within {timeout:g} s"
    return [
        {"dir": d, "index": worker_index(os.path.basename(d)), "stacks": found.get(d), "missing": missing.get(d)}
        for d in worker_dirs
    ]  # fmt: skip


def stacks_refusal(worker_dir: str, state: dict) -> str | None:
    """Why the stacks signal is not sent to this worker's job, or None when it may be: the
    job must run under the wrapper (state.json records the signal, and the process has a
    handler for it) and be this worker's own: the recorded group's leader (the job
    starts its own session), alive, in a group the worker's keeper still works in. The
    job's own working directory does not count: many scripts change it at their start."""
    pid = state.get("pid")
    if not state.get("stacks_signal"):
        return "no stacks: the job runs without the wrapper"
    if state_problem("", state) is not None or not isinstance(pid, int):
        return "no stacks: the worker's state.json names no process"
    stat = process_stat(pid)
    if stat is None or stat[0] in ENDED_STATES or stat[1] != state.get("pgid") or not group_belongs(worker_dir, state):
        return "no stacks: the job is gone"
    if signal_caught(pid, int(state["stacks_signal"])) is False:
        return "no stacks: the job runs without the wrapper (it does not catch the stacks signal)"
    return None


def stop_worker(
    worker_dir: str, grace: float, stopped_by: str | None = None, reason: str = "", cause: str = "",
    stacks_missing: str | None = None,
) -> list[int]:
    state = read_json(os.path.join(worker_dir, STATE_FILE))
    if state is None or state_problem(worker_dir, state) is not None:
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
        write_stop_request(worker_dir, stopped_by, reason, cause, stacks_missing)
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
            "grace": {"type": "float"},
            "reason": {"type": "str", "default": "stopped by the runbook"},
            "stopped_by": {"type": "str", "default": "runbook", "choices": list(STOP_REQUESTERS)},
            "cause": {"type": "str", "default": "", "choices": ["", *CAUSES]},
            "capture_stacks": {"type": "bool", "default": False},
            "stacks_timeout": {"type": "float", "default": 5},
            "stop": {"type": "bool", "default": True},
            "release_ports": {"type": "bool", "default": False},
        },
        required_if=[("stop", True, ("grace",))],
        supports_check_mode=True,
    )
    params = module.params
    run_dir = os.path.abspath(params["run_dir"])
    worker_dirs = sorted(
        glob.glob(os.path.join(run_dir, f"{WORKER_PREFIX}*"))
        + glob.glob(os.path.join(run_dir, f"{RETRY_PREFIX}*", f"{WORKER_PREFIX}*"))
    )
    problems = []
    usable = []
    for worker_dir in worker_dirs:
        path = os.path.join(worker_dir, STATE_FILE)
        state = read_json(path)
        if state is None:
            continue
        problem = state_problem(path, state)
        if problem:
            problems.append(problem)
        else:
            usable.append((worker_dir, state))
    stacks = []
    if params["capture_stacks"] and not module.check_mode:
        stacks = capture_stacks([d for d, _state in usable], os.path.join(run_dir, JOB_DIR), params["stacks_timeout"])
    stopped = []
    for worker_dir, state in usable if params["stop"] else []:
        if module.check_mode:
            pids = run_processes(worker_dir, state)
        else:
            missing = next((entry["missing"] for entry in stacks if entry["dir"] == worker_dir), None)
            pids = stop_worker(worker_dir, params["grace"], params["stopped_by"], params["reason"], params["cause"], missing)
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
                    params["reason"], params["stopped_by"], state.get("started_at"), time.time()
                )
                record["cause"] = (
                    {"kind": params["cause"], "detail": params["reason"]} if params["cause"] else classify(record, [])
                )
                write_json_atomic(exit_path, record)
    result = {
        "changed": bool(stopped), "stopped": stopped, "workers": worker_dirs, "run_dir": run_dir, "stacks": stacks,
    }  # fmt: skip
    if params["release_ports"] and params["stop"] and not module.check_mode:
        result["ports_released"] = end_run(run_dir)
    if problems:
        module.fail_json(msg="; ".join(problems), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
