#!/usr/bin/python
# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write an attempt's files and start the supervisor of every worker of this host in one
module run (issues 13 and 26): two jobs with their options apart, ``deploy`` (the run's
files, ``module_utils/tf_run_files``) and ``launch`` (the supervisors,
``module_utils/tf_worker_start``). The module only parses its options and calls them."""

from __future__ import annotations

DOCUMENTATION = r"""
module: tf_worker_launch
short_description: Write this host's part of an attempt and start its workers' supervisors, detached
version_added: "0.1.0"
author: tf-runbook contributors (!UNKNOWN)
description:
  - With O(deploy), first does what M(tf_runbook.multiworker.tf_run_dir) does with the same
    options (the run's private directories, the job's files, each worker's TF_CONFIG and
    environment, read back from disk), checks that every TF_CONFIG read back names the
    cluster O(launch.cluster) and its own worker's index, and only then starts the supervisors,
    in the same module run (deploy and launch cost one module run per host). The
    supervisor is then the job directory's C(tf_supervisor.py) and the module puts
    C(--python), C(--script), C(--heartbeat-file) (the contract's C(HEARTBEAT_FILE) in the
    run's directory) and C(--checkpoint-dir) before O(launch.args). A refusal of either step
    names the host and starts nothing.
  - Starts C(tf_supervisor.py) once per worker of the host, with the argv
    C([python, supervisor, --worker-dir, <dir>] + args) and the worker directory as its
    working directory, fully detached from the module (a new session, stdin from
    C(/dev/null) or, with O(launch.go_token) or O(launch.announce_key), a pipe that the module closes
    once it wrote the secrets, stdout and stderr appended to C(supervisor.out) in the
    worker directory, every other file descriptor closed), so that the SSH channel closes
    as soon as the module returns and the supervisors outlive it.
  - Every worker is started before any is checked, so no worker waits for another; then
    the module waits at most O(launch.settle) seconds for each supervisor to record its state
    (C(state.json)) or to end. A supervisor that could not be started, or that ended
    without recording its state, gets an C(error) naming the host, the worker, the reason
    and the tail of its C(supervisor.out), shown as a warning, and is listed in
    C(failed_workers);
    the task itself does not fail, so that the wait reports that worker as failed, stops
    the others at once and the run is collected and judged, as for any failed worker.
    One still starting after O(launch.settle) seconds counts as started (the wait sees it later
    through its pid).
  - Refuses, before it starts anything, a worker directory that holds an earlier
    launch's records (C(state.json), C(exit.json)) or is missing.
  - A plain module (no C(async)), so that Ansible runs it pipelined in one SSH round
    trip per host; one run per host returns at once, so with C(--forks) below the number
    of hosts a host still never waits for another's training.
  - The supervisors are started by a small waiter process that the module forks (its
    own session, no descriptor of the module's), which stays as their parent, reaps each
    as it ends, then exits.
  - With O(launch.go_token), the supervisors are armed rather than started (O(launch.args) then holds
    C(--go-timeout)); each holds its worker's TensorFlow port and records an
    armed C(state.json), and starts its job only on the go that M(tf_runbook.multiworker.tf_worker_go)
    sends every worker of the run at once, with this token.
  - With O(launch.announce_key), the supervisors authenticate the failure announcements they
    send and hear on the workers' ports (with C(--peer-timeout)).
  - O(launch.go_token) and O(launch.announce_key) reach each supervisor on a pipe, never its
    environment (which stays readable in C(/proc/<pid>/environ) for the process's whole
    life, by the job too, which runs as the same user) nor a command line; the module
    puts C(--secrets-stdin) after C(--worker-dir <dir>) in its argv and writes one JSON
    line (at most 4096 bytes) of the secrets on its stdin, then closes it. The job never
    gets them.
  - In check mode, reports what it would start and starts nothing; with O(deploy), writes
    nothing either and, in diff mode, shows this host's part of the run as
    M(tf_runbook.multiworker.tf_run_dir) does.
  - Returns, as C(facts), the facts a launched run publishes on its host
    (C(tf_worker_run_dir), C(tf_worker_job_dir), C(tf_worker_checkpoint_dir),
    C(tf_worker_dirs), C(tf_worker_interpreter), C(tf_launch_jobs)), for the launch role's
    one C(set_fact) (not as C(ansible_facts), since facts a module returns become host facts,
    whose injection as variables is deprecated).
extends_documentation_fragment:
  - tf_runbook.multiworker.attributes
  - tf_runbook.multiworker.run_dir.deploy
options:
  host:
    description: Name of this host in the messages of both jobs (the inventory name); empty
      for the machine's own host name.
    type: str
    default: ""
  launch:
    description: The launch's own options (the supervisors to start and how).
    type: dict
    required: true
    suboptions:
      workers:
        description: This host's workers, each with its C(index) (other keys are ignored).
        type: list
        elements: dict
        required: true
      dirs:
        description: Worker index (a string) to that worker's directory on the host; required
          without O(deploy), which gives them otherwise.
        type: dict
      python:
        description: Interpreter that runs the supervisor and the job (C(~) allowed).
        type: path
        required: true
      supervisor:
        description: Path of C(tf_supervisor.py) on the host; required without O(deploy),
          which puts it in the job directory.
        type: str
        default: ""
      script:
        description: With O(deploy), the job's script, relative to the job directory.
        type: str
        default: ""
      cluster:
        description: With O(deploy), every worker's address in index order, as TF_CONFIG lists
          them; each TF_CONFIG read back must name this list and its worker's index, or
          nothing starts. Empty to skip the check.
        type: list
        elements: str
        default: []
      args:
        description: The supervisor's arguments after C(--worker-dir <dir>), the same for
          every worker of the run.
        type: list
        elements: str
        default: []
      settle:
        description: Seconds to wait, after every worker was started, for the supervisors to
          record their state or end.
        type: float
        default: 2
      go_token:
        description: The run's secret for the go of an armed launch; empty to start the jobs
          at once.
        type: str
        default: ""
      announce_key:
        description: The run's secret for the failure announcements between supervisors
          (their C(--peer-timeout)); empty when the peers are not watched.
        type: str
        default: ""
attributes:
  check_mode:
    support: full
    details: Reports what would be started; starts nothing.
  diff_mode:
    support: full
    details: With O(deploy), this host's part of the run before and after.
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Write this attempt's files and start this host's workers
  tf_runbook.multiworker.tf_worker_launch:
    host: "{{ inventory_hostname }}"
    deploy:
      base_dir: ~/tf-runbook
      run_id: mnist-20260101-1200
      indices: [0, 1]
      job_files:
        - name: train.py
          content: "{{ lookup('ansible.builtin.file', 'files/train.py') }}"
      configs: "{{ tf_cluster_local_workers | tf_runbook.multiworker.tf_config_files(tf_cluster_spec) }}"
    launch:
      workers: "{{ tf_cluster_local_workers }}"
      python: /opt/tf/bin/python
      script: train.py
      cluster: "{{ tf_cluster_spec.cluster.worker }}"
      args: [--run-id, mnist-20260101-1200, --]

- name: Start this host's workers in directories made earlier
  tf_runbook.multiworker.tf_worker_launch:
    host: "{{ inventory_hostname }}"
    launch:
      workers: "{{ tf_cluster_local_workers }}"
      dirs: "{{ tf_worker_dirs }}"
      python: "{{ tf_worker_interpreter }}"
      supervisor: "{{ tf_worker_job_dir }}/tf_supervisor.py"
      args: [--python, "{{ tf_worker_interpreter }}", --script, "{{ tf_worker_job_script }}", --]
  register: launched
"""

RETURN = r"""
workers:
  description: One entry per worker, in index order, with C(index), C(dir), C(argv),
    C(supervisor_pid) (null in check mode, or when it could not be started), C(recorded)
    (the supervisor had recorded its state when the module returned) and C(error) (null,
    or why the supervisor could not be started or ended at once).
  type: list
  elements: dict
  returned: always
  sample:
    - index: 0
      dir: /home/tf/tf-runbook/runs/r1/worker-0
      argv: [python3, tf_supervisor.py, --worker-dir, /home/tf/tf-runbook/runs/r1/worker-0, --]
      supervisor_pid: 4242
      recorded: true
      error: null
failed_workers:
  description: Indices of the workers whose supervisor could not be started or ended at once.
  type: list
  elements: int
  returned: always
  sample: []
deploy:
  description: With O(deploy), the result of writing the attempt's files, as
    M(tf_runbook.multiworker.tf_run_dir) returns it (C(base_dir), C(run_dir), C(job_dir),
    C(checkpoint_dir), C(worker_dirs), C(written), C(read_back)).
  type: dict
  returned: with deploy
facts:
  description: The run's facts on this host, C(tf_worker_run_dir), C(tf_worker_job_dir),
    C(tf_worker_checkpoint_dir), C(tf_worker_dirs) (only with O(deploy)),
    C(tf_worker_interpreter) and C(tf_launch_jobs) (the launched workers, see the filter
    tf_runbook.multiworker.tf_launched_workers).
  type: dict
  returned: always
diff:
  description: With O(deploy) in diff mode, this host's part of the run before and after.
  type: dict
  returned: diff mode, with deploy
"""

import socket

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run_files import (
    RUN_FILES_SPEC,
    RunFilesError,
    deploy_attempt,
)
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_worker_start import (
    LAUNCH_SPEC,
    launch_detached,
    launch_facts,
    launch_slots,
    refusals,
)

ARGUMENT_SPEC = {
    "host": {"type": "str", "default": ""},
    "deploy": {"type": "dict", "options": RUN_FILES_SPEC},
    "launch": {"type": "dict", "required": True, "options": LAUNCH_SPEC, "required_by": {"dirs": ("supervisor",)}},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params, start = module.params, module.params["launch"]
    host = params["host"] or socket.gethostname()
    if params["deploy"] is None and not start["dirs"]:
        module.fail_json(msg=f"host {host}: one of the following is required: deploy, launch.dirs")
    deployed: dict = {}
    if params["deploy"] is not None:
        if module.no_log:
            # As in tf_run_dir: the task hides the whole result already, and masking
            # job_env's values would corrupt the TF_CONFIGs read back. go_token and
            # announce_key are hidden with it.
            module.no_log_values.clear()
        try:
            deployed = deploy_attempt(params["deploy"], start["cluster"], module.check_mode, module._diff)
        except RunFilesError as exc:
            module.fail_json(msg=f"host {host}: nothing was launched: {exc}", **exc.fields)
    try:
        slots = launch_slots(start, deployed)
    except (KeyError, TypeError, ValueError) as exc:
        module.fail_json(msg=f"host {host}: cannot launch: {exc}")
    extra = {"deploy": {k: v for k, v in deployed.items() if k != "diff"}} if deployed else {}
    if "diff" in deployed:
        extra["diff"] = deployed["diff"]
    if module.check_mode:
        planned = [{**slot, "supervisor_pid": None, "recorded": False, "error": None} for slot in slots]
        module.exit_json(changed=bool(slots), workers=planned, failed_workers=[],
                         msg=f"host {host}: would start {len(slots)} supervisor(s)",
                         facts=launch_facts(planned, deployed, start["python"]), **extra)
    problems = refusals(slots)
    if problems:
        module.fail_json(msg=f"host {host}: nothing was launched: " + "; ".join(problems), workers=[], **extra)
    # The module returns once every supervisor settled (at most `settle` seconds); it
    # never waits for training, so Ansible's next host (with --forks below the number of
    # hosts) starts right after, as with the async launch this replaced.
    try:
        results, failures = launch_detached(slots, start["settle"], start["go_token"], start["announce_key"])
    except (OSError, RuntimeError) as exc:
        module.fail_json(msg=f"host {host}: cannot launch: {exc}", **extra)
    for failure in failures:
        module.warn(f"host {host}: {failure}")
    module.exit_json(
        changed=any(r["supervisor_pid"] is not None for r in results),
        workers=results,
        failed_workers=[r["index"] for r in results if r["error"] is not None],
        facts=launch_facts(results, deployed, start["python"]),
        **extra,
    )


if __name__ == "__main__":
    main()
