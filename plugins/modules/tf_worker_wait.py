#!/usr/bin/python
# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Wait for this host's training workers (and bring its files when all of them succeeded)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: tf_worker_wait
short_description: Wait for this host's workers, and pack its files when they all succeeded
version_added: "0.2.0"
author: tf-runbook contributors (!UNKNOWN)
description:
  - The wait of an attempt. The action of the same name runs on the controller and calls
    this module until the host's workers have exited, one of them failed, the deadline
    passed, the run stalled, or another host reported a failure through the attempt's
    failure flag in O(controller_dir). Without O(controller_dir) it checks once.
  - Each module run waits up to O(wait) seconds on the host, and returns early when every
    worker has exited or one has failed (with O(until_joined), when every worker has
    joined), so that the wait costs one module run per window instead of polling blindly.
    What it reads of a worker (its state, exit, cause, progress lines and the last 8
    lines of its log) is C(module_utils/tf_worker_records.py), the same reading as
    M(tf_runbook.multiworker.tf_worker_status); the window is C(module_utils/tf_worker_watch.py).
  - A progress line is a line of any format of C(tf_metrics.FORMATS), or one matching
    O(progress_pattern). A log is read once, then only what was appended;
    O(progress_marks) carries where the reading stands from one call to the next.
  - Renews the controller heartbeat in O(run_dir) (its modification time; the file's
    name is the contract's, C(tf_run.HEARTBEAT_FILE)) before every reading, so that the
    supervisors of a run tied to the controller stop when it goes stale.
  - B(The wait also collects.) With O(collect), the module run that ends with every worker
    of the host exited 0 also packs the host's collect bundle of the run in O(run_dir), with
    the rules of M(tf_runbook.multiworker.tf_collect_bundle) (one implementation,
    C(module_utils/tf_bundle.py)), and the action fetches it in the same task and unpacks it
    under O(controller_dir)C(/<host>) (RV(collected)), so that the collect phase costs no
    module run on such a host. A packing error is returned as RV(bundle_error), and the
    collect then fetches the host's files itself.
  - With O(stall_timeout), the action is the run's stall watchdog; it records in the
    attempt's progress directory of O(controller_dir) (controller clock) when this host's
    workers last made progress, reads every host's record, and when no worker of the run
    made progress for O(stall_timeout) seconds it writes the attempt's failure flag with
    C(cause) C(stalled) and returns RV(stalled). Progress is a new progress line or CPU
    use; a job whose processes used more than 5% of a core (C(tf_activity.BUSY_CPU_SHARE))
    between two of the module's readings at least 5 s apart is busy, not stalled.
  - Read-only apart from the heartbeat and the bundle; supports check mode (neither then).
extends_documentation_fragment:
  - tf_runbook.multiworker.attributes
  - tf_runbook.multiworker.progress
options:
  workers:
    description: Worker entries with C(index) and C(dir), and optionally C(supervisor_pid),
      the pid the launch (M(tf_runbook.multiworker.tf_worker_launch)) started its
      supervisor with, and C(launch_error), why the launch could not start it.
    type: list
    elements: dict
    required: true
  run_dir:
    description: The run's directory on this host (C(~) allowed), where the heartbeat is
      renewed and what O(collect) packs.
    type: path
    required: true
  wait:
    description: Seconds to wait on the host before returning, unless every worker has
      exited, one has failed (exited other than 0) or, with O(until_joined), every worker
      has joined first. Progress in between is returned at the end of the wait.
    type: float
    default: 0
  progress_marks:
    description: Where the reading of each worker's log stood (C(progress_marks) of the
      previous call, by worker directory); the action passes it on.
    type: dict
    default: {}
  collect:
    description:
      - The collect's options (tf_collect_files, tf_collect_artifacts, tf_collect_max_mb).
        The module run that ends with every worker of the host exited 0 packs the run's
        bundle with them. Omitted for none.
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
  deadline:
    description: Used by the action on the controller. Controller epoch seconds after
      which C(deadline_passed) is true; 0 for none. Judged on the controller's clock, never
      sent to the host.
    type: float
    default: 0
  controller_dir:
    description:
      - Used by the action on the controller. The run's directory on the controller. With
        O(attempt) it names the attempt's failure flag and progress directory (the
        contract's C(tf_run.attempt_failed_flag) and C(tf_run.attempt_progress_dir)); the
        first host that sees a failure writes the flag, and every host stops waiting once
        it exists. The bundle O(collect) packed is unpacked under its C(<host>) directory.
      - Without it, the host is checked once and nothing is collected.
    type: path
  attempt:
    description: Used by the action on the controller. The attempt waited for (0 for the
      first launch).
    type: int
    default: 0
  until_joined:
    description: Used by the action on the controller. Stop waiting once every worker of
      the host has joined the cluster (a detached run); nothing is collected then.
    type: bool
    default: false
  coordinator:
    description:
      - Used by the action on the controller. A ParameterServerStrategy run, whose chief (the
        coordinator, worker 0) ends it. The wait of the chief's host records in O(controller_dir)
        (the contract's C(tf_run.attempt_coordinator_ended)) that the chief exited 0, unless a host
        flagged a failure first; the wait of every host whose workers (the servers) still run then stops
        them with M(tf_runbook.multiworker.tf_worker_stop), recorded as stopped by the runbook with
        the cause C(stopped), and waits for their exit records (RV(servers_stopped)).
      - Not with O(until_joined) (a detached run), where a server ends by itself once the
        chief's port stayed shut (cause C(coordinator-gone)).
    type: bool
    default: false
  task_types:
    description: Used by the action on the controller. The task type of each worker of the
      cluster spec, in index order (C(chief), C(worker), C(ps)); where any is not C(worker),
      each progress line names the worker's task (C(worker-3 (ps:0))), and each worker of
      RV(workers) gets C(task). A list of strings, or that list as one JSON string (what
      the runbook passes, as a string costs the controller less than a list of every worker
      in every host's arguments).
    type: raw
    default: []
  evaluator_required:
    description:
      - Used by the action on the controller (C(tf_evaluator_required)). Whether the sidecar
        evaluator's host lost fails the run. A host whose workers are the sidecar evaluator
        alone (by O(task_types)) that stops answering, when not required, writes no failure
        flag; the other hosts go on waiting and the training goes on; the console says so.
        Any other host that stops answering flags the attempt failed (cause C(host-lost)).
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
attributes:
  action:
    description: The action of the same name runs on the controller and calls the module
      on the host.
    support: full
  check_mode:
    support: full
    details: Reads only; the heartbeat is not renewed and nothing is packed.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Wait for this host's workers and bring its files when they all succeed
  tf_runbook.multiworker.tf_worker_wait:
    workers: "{{ tf_launch_jobs }}"
    run_dir: "{{ tf_worker_run_dir }}"
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
"""

RETURN = r"""
workers:
  description:
    - One entry per worker, in the order given, with C(index), C(dir), C(pid),
      C(state) (starting, running or exited), C(returncode), C(reason), C(stopped_by),
      C(joined), C(last_line) (the latest progress line), C(progress_lines) (how many so
      far), C(log_tail) (its last 8 lines), C(cause) (why it ended, the mapping of exit.json or one told from
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
      when nvidia-smi failed or did not answer within 5 s); C(runnable_share), the largest
      share of this call's window (when 0.5 s or longer) that one thread of the job was
      runnable (running on a CPU or waiting in a run queue for one, from
      C(/proc/<pid>/task/<tid>/schedstat)), null without a reading; a job that computes on a
      host with more busy processes than CPUs gets little CPU time but stays runnable.
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
now:
  description: The host's clock (epoch seconds) when the module returned; the action
    judges the host's times on the controller's clock with it.
  type: float
  returned: always
progress_marks:
  description: Where the reading of each worker's log stands, for the next call.
  type: dict
  returned: always
controller_gone:
  description: Set by the action (with C(failed)) when C(ansible-playbook)'s main process
    ended while it waited (a C(kill -9)). It then calls the host no more, so that the
    controller heartbeat is no longer renewed and the supervisors stop the run within their
    controller timeout.
  type: bool
  returned: when ansible-playbook ended during the wait
servers_stopped:
  description: Set by the action when it stopped this host's servers once the coordinator
    ended (O(coordinator)), C(workers) (their indices), C(failed) and C(msg) (the stop's).
  type: dict
  returned: when the action stopped this host's servers
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
ports_released:
  description: The ports of C(tf_worker_port auto) that this run had reserved on the host
    (in this user's register, C(module_utils/tf_ports_auto.py)) and that this module run
    released, the run having ended here; a port still listened on stays reserved.
  type: list
  elements: int
  returned: with O(collect), when every worker of the host exited 0 (the run ended well here)
collected:
  description: What the action brought of the host's bundle, as the collect's action
    reports it, C(files), C(left_out), C(truncated), C(updated) and C(dest) (the host's
    directory under O(controller_dir)).
  type: dict
  returned: when the wait ended with every worker of the host exited 0, no other host
    failed, and the wait was not detached
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_ports_auto import end_run
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import HEARTBEAT_FILE
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_worker_records import (
    TAIL_LINES,
    new_mark,
    progress_or_error,
    report,
    thread_sample,
    with_activity,
)
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_worker_watch import packed_bundle, touch, watch

ARGUMENT_SPEC = {
    "workers": {"type": "list", "elements": "dict", "required": True},
    "run_dir": {"type": "path", "required": True},
    "wait": {"type": "float", "default": 0},
    "progress_pattern": {"type": "str", "default": ""},
    "progress_marks": {"type": "dict", "default": {}},
    "collect": {
        "type": "dict",
        "options": {
            "patterns": {"type": "list", "elements": "str", "required": True},
            "artifacts": {"type": "list", "elements": "str", "required": True},
            "max_mb": {"type": "int", "required": True},
        },
    },
    # Read by the action of the same name on the controller, never sent here.
    "deadline": {"type": "float", "default": 0},
    "controller_dir": {"type": "path"},
    "attempt": {"type": "int", "default": 0},
    "until_joined": {"type": "bool", "default": False},
    "rounds": {"type": "int", "default": 100000},
    "coordinator": {"type": "bool", "default": False},
    "task_types": {"type": "raw", "default": []},
    "evaluator_required": {"type": "bool", "default": False},
    "stall_timeout": {"type": "int", "default": 0},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    run_dir = os.path.abspath(params["run_dir"])
    heartbeat = "" if module.check_mode else os.path.join(run_dir, HEARTBEAT_FILE)
    marks = {path: {**new_mark(), **mark} for path, mark in params["progress_marks"].items() if isinstance(mark, dict)}
    progress, error = progress_or_error(params["progress_pattern"])
    if error:
        module.fail_json(msg=error)

    def beat() -> None:
        if heartbeat:
            try:
                touch(heartbeat)
            except OSError as exc:
                module.fail_json(msg=f"cannot renew the controller heartbeat {heartbeat}: {exc}")

    started = thread_sample(params["workers"])
    current = watch(params["workers"], progress, TAIL_LINES, marks, params["wait"], params["until_joined"], beat)
    current = with_activity(current, before=started)
    bundle = packed_bundle(run_dir, params["collect"], current) if params["collect"] and not module.check_mode else {}
    if bundle:
        # Every worker of the host exited 0: the run ended well here, its ports are free.
        bundle["ports_released"] = end_run(run_dir)
    module.exit_json(changed=False, workers=current, progress_marks=marks, now=time.time(), **report(current), **bundle)


if __name__ == "__main__":
    main()
