#!/usr/bin/python
# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write an attempt's files and start the supervisor of every worker of this host in one
module run (issues 13 and 26)."""

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
    cluster O(cluster) and its own worker's index, and only then starts the supervisors,
    in the same module run (deploy and launch cost one module run per host). The
    supervisor is then the job directory's C(tf_supervisor.py) and the module puts
    C(--python), C(--script), C(--heartbeat-file) (the contract's C(HEARTBEAT_FILE) in the
    run's directory) and C(--checkpoint-dir) before O(args). A refusal of either step
    names the host and starts nothing.
  - Starts C(tf_supervisor.py) once per worker of the host, with the argv
    C([python, supervisor, --worker-dir, <dir>] + args) and the worker directory as its
    working directory, fully detached from the module (a new session, stdin from
    C(/dev/null) or, with O(go_token) or O(announce_key), a pipe that the module closes
    once it wrote the secrets, stdout and stderr appended to C(supervisor.out) in the
    worker directory, every other file descriptor closed), so that the SSH channel closes
    as soon as the module returns and the supervisors outlive it.
  - Every worker is started before any is checked, so no worker waits for another; then
    the module waits at most O(settle) seconds for each supervisor to record its state
    (C(state.json)) or to end. A supervisor that could not be started, or that ended
    without recording its state, gets an C(error) naming the host, the worker, the reason
    and the tail of its C(supervisor.out), shown as a warning, and is listed in
    C(failed_workers);
    the task itself does not fail, so that the wait reports that worker as failed, stops
    the others at once and the run is collected and judged, as for any failed worker.
    One still starting after O(settle) seconds counts as started (the wait sees it later
    through its pid).
  - Refuses, before it starts anything, a worker directory that holds an earlier
    launch's records (C(state.json), C(exit.json)) or is missing.
  - A plain module (no C(async)), so that Ansible runs it pipelined in one SSH round
    trip per host; one run per host returns at once, so with C(--forks) below the number
    of hosts a host still never waits for another's training.
  - The supervisors are started by a small waiter process that the module forks (its
    own session, no descriptor of the module's), which stays as their parent, reaps each
    as it ends, then exits.
  - With O(go_token), the supervisors are armed rather than started (O(args) then holds
    C(--go-timeout)); each holds its worker's TensorFlow port and records an
    armed C(state.json), and starts its job only on the go that M(tf_runbook.multiworker.tf_worker_go)
    sends every worker of the run at once, with this token.
  - With O(announce_key), the supervisors authenticate the failure announcements they
    send and hear on the workers' ports (with C(--peer-timeout)).
  - O(go_token) and O(announce_key) reach each supervisor on a pipe, never its
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
    description: With O(deploy), every worker's address in index order, as TF_CONFIG lists them; each
      TF_CONFIG read back must name this list and its worker's index, or nothing starts.
      Empty to skip the check.
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
  host:
    description: Name of this host in messages (the inventory name); empty for the
      machine's own host name.
    type: str
    default: ""
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
    workers: "{{ tf_cluster_local_workers }}"
    python: /opt/tf/bin/python
    deploy:
      base_dir: ~/tf-runbook
      run_id: mnist-20260101-1200
      indices: [0, 1]
      job_files:
        - name: train.py
          content: "{{ lookup('ansible.builtin.file', 'files/train.py') }}"
      configs: "{{ tf_cluster_local_workers | tf_runbook.multiworker.tf_config_files(tf_cluster_spec) }}"
    script: train.py
    cluster: "{{ tf_cluster_spec.cluster.worker }}"
    args: [--run-id, mnist-20260101-1200, --]
    host: "{{ inventory_hostname }}"

- name: Start this host's workers in directories made earlier
  tf_runbook.multiworker.tf_worker_launch:
    workers: "{{ tf_cluster_local_workers }}"
    dirs: "{{ tf_worker_dirs }}"
    python: "{{ tf_worker_interpreter }}"
    supervisor: "{{ tf_worker_job_dir }}/tf_supervisor.py"
    args: [--python, "{{ tf_worker_interpreter }}", --script, "{{ tf_worker_job_script }}", --]
    host: "{{ inventory_hostname }}"
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

import contextlib
import json
import os
import socket
import subprocess
import time
from typing import Callable

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import (
    EXIT_FILE,
    HEARTBEAT_FILE,
    LAUNCH_OUTPUT_FILE,
    LAUNCH_RECORDS,
    SECRETS_FLAG,
    STATE_FILE,
    SUPERVISOR_FILE,
    printable,
    read_json,
    secrets_line,
)
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run_files import (
    RUN_FILES_SPEC,
    RunFilesError,
    launched_workers,
    prepare_run,
    read_back_problems,
    run_facts,
)

POLL_SECONDS = 0.02
# Descriptors the waiter closes above its pipe's.
MAX_FD = 65536
TAIL_BYTES = 2000


def plan(workers: list[dict], dirs: dict, python: str, supervisor: str, args: list[str]) -> list[dict]:
    """One slot per worker, in index order: its index, directory and supervisor argv
    (the argv today's launch gave each worker). Raises ValueError naming a worker
    without a directory."""
    slots = []
    for worker in workers:
        index = int(worker["index"])
        wdir = dirs.get(str(index))
        if not wdir:
            raise ValueError(f"worker {index} has no directory in dirs ({sorted(dirs)})")
        argv = [python, supervisor, "--worker-dir", str(wdir), *[str(arg) for arg in args]]
        slots.append({"index": index, "dir": str(wdir), "argv": argv})
    return sorted(slots, key=lambda slot: slot["index"])


def refusals(slots: list[dict]) -> list[str]:
    """Why a slot cannot be launched, checked before anything starts: a missing worker
    directory, or one that an earlier launch already used (its records are kept)."""
    problems = []
    for slot in slots:
        if not os.path.isdir(slot["dir"]):
            problems.append(f"worker {slot['index']}: {slot['dir']} is not a directory")
            continue
        used = [name for name in LAUNCH_RECORDS if os.path.exists(os.path.join(slot["dir"], name))]
        if used:
            problems.append(f"worker {slot['index']}: {slot['dir']} was already launched ({', '.join(used)})")
    return problems


def supervisor_argv(argv: list[str], secrets: bool) -> list[str]:
    """A slot's argv (plan()'s: interpreter, supervisor, --worker-dir <dir>, then the
    options and the job's arguments) as started: with secrets, SECRETS_FLAG right after
    the worker directory, before any ``--``."""
    return [*argv[:4], SECRETS_FLAG, *argv[4:]] if secrets else list(argv)


def spawn(slot: dict, secrets: bytes = b"") -> subprocess.Popen:
    """Start one supervisor detached from this process: its own session (no SIGHUP when
    the SSH session ends), stdout and stderr appended to the worker directory's launch
    output, no other inherited descriptor (the SSH channel's stay with the module, so the
    channel closes when the module returns). Its stdin is /dev/null, or with ``secrets``
    (a secrets_line()) a pipe that gets that line and is closed: the secrets never reach
    its environment, readable in /proc/<pid>/environ. ``slot["argv"]`` must then carry
    SECRETS_FLAG (supervisor_argv())."""
    fd = os.open(os.path.join(slot["dir"], LAUNCH_OUTPUT_FILE), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        # Not run_command: that waits for the process and reads its output; the point
        # here is a process that outlives the module.
        proc = subprocess.Popen(  # pylint: disable=ansible-bad-function
            slot["argv"],
            cwd=slot["dir"],
            stdin=subprocess.PIPE if secrets else subprocess.DEVNULL,
            stdout=fd,
            stderr=fd,
            close_fds=True,
            start_new_session=True,
        )
    finally:
        os.close(fd)
    if secrets and proc.stdin is not None:
        # The line fits in a pipe's buffer: this never waits for the supervisor. One
        # that ended already (a broken pipe) is reported by the settle loop.
        with contextlib.suppress(OSError), proc.stdin:
            proc.stdin.write(secrets)
    return proc


def output_tail(wdir: str, max_bytes: int = TAIL_BYTES) -> str:
    """The end of a worker's launch output, printable; empty when there is none."""
    try:
        with open(os.path.join(wdir, LAUNCH_OUTPUT_FILE), "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - max_bytes))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return printable(text.strip())


def launch(
    slots: list[dict],
    settle: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    go_token: str = "",
    announce_key: str = "",
) -> tuple[list[dict], list[str]]:
    """Start every slot, then check each: (one result per slot, in order; the failures).

    All are started before any is checked, so no slot waits for another. A slot settles
    when its supervisor recorded its state (started) or ended without one (failed); one
    still running unrecorded after ``settle`` seconds counts as started. The secrets
    given reach each supervisor on its stdin (spawn())."""
    results, failures, _procs = _launch(slots, settle, clock, sleep, go_token, announce_key)
    return results, failures


def _launch(
    slots: list[dict],
    settle: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    go_token: str = "",
    announce_key: str = "",
) -> tuple[list[dict], list[str], list]:
    """launch(), also returning the supervisors' processes (None where none started)."""
    procs: list[subprocess.Popen | None] = []
    errors: list[str | None] = []
    secrets = secrets_line(go_token, announce_key)
    slots = [{**slot, "argv": supervisor_argv(slot["argv"], bool(secrets))} for slot in slots]
    for slot in slots:
        try:
            procs.append(spawn(slot, secrets))
            errors.append(None)
        except OSError as exc:
            procs.append(None)
            errors.append(f"the supervisor could not be started: {exc}")
    results = [
        {"index": s["index"], "dir": s["dir"], "argv": s["argv"], "supervisor_pid": p.pid if p else None,
         "recorded": False, "error": None}
        for s, p in zip(slots, procs)
    ]  # fmt: skip
    pending = {i for i, proc in enumerate(procs) if proc is not None}
    stop_at = clock() + max(0.0, settle)
    while pending:
        for i in sorted(pending):
            wdir = slots[i]["dir"]
            if os.path.exists(os.path.join(wdir, STATE_FILE)):
                results[i]["recorded"] = True
                pending.discard(i)
                continue
            code = procs[i].poll()
            if code is None:
                continue
            pending.discard(i)
            # It may have recorded its state just before it ended (a job that failed at once).
            if os.path.exists(os.path.join(wdir, STATE_FILE)):
                results[i]["recorded"] = True
                continue
            refused = read_json(os.path.join(wdir, EXIT_FILE)) or {}
            reason = refused.get("reason") or "it recorded no state"
            errors[i] = f"the supervisor ended at once (status {code}): {reason}"
        if not pending or clock() >= stop_at:
            break
        sleep(POLL_SECONDS)
    failures = []
    for slot, result, error in zip(slots, results, errors):
        if error is not None:
            tail = output_tail(slot["dir"])
            result["error"] = error + (f"; its output ({LAUNCH_OUTPUT_FILE}) ends: {tail}" if tail else "")
            failures.append(f"worker {slot['index']} ({slot['dir']}): {result['error']}")
    return results, failures, procs


def launch_detached(
    slots: list[dict], settle: float, go_token: str = "", announce_key: str = ""
) -> tuple[list[dict], list[str]]:
    """launch() in a waiter process of its own, forked from the module: it starts and
    checks the supervisors, hands the module the results through a pipe, and then stays,
    out of the module's session and away from its descriptors (the SSH channel), as the
    supervisors' parent until they end, so that each is reaped the moment it exits (an
    orphan would stay a zombie until init reaps it, at once on a host with systemd,
    later or never under a container's init), as Ansible's async wrapper did."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the waiter: never returns into the module
        try:
            os.close(read_end)
            os.setsid()
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.closerange(3, write_end)
            os.closerange(write_end + 1, MAX_FD)
            results, failures, procs = _launch(slots, settle, time.monotonic, time.sleep, go_token, announce_key)
            with os.fdopen(write_end, "w", encoding="utf-8") as pipe:
                json.dump({"results": results, "failures": failures}, pipe)
            for proc in procs:
                if proc is not None:
                    proc.wait()
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, encoding="utf-8") as pipe:
        text = pipe.read()
    try:
        data = json.loads(text)
        return data["results"], data["failures"]
    except (ValueError, KeyError, TypeError):
        raise RuntimeError("the launch's waiter process ended without reporting what it started") from None


def deployed_args(paths: dict, python: str, script: str, args: list[str]) -> list[str]:
    """The supervisor's arguments for an attempt whose files this module run wrote: the
    interpreter, the job's script, the heartbeat and the checkpoint directory, all
    derived from the run's paths and the contract, then ``args``."""
    return [
        "--python", python,
        "--script", os.path.join(paths["job_dir"], script),
        "--heartbeat-file", os.path.join(paths["run_dir"], HEARTBEAT_FILE),
        "--checkpoint-dir", paths["checkpoint_dir"],
        *[str(arg) for arg in args],
    ]  # fmt: skip


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "workers": {"type": "list", "elements": "dict", "required": True},
            "dirs": {"type": "dict"},
            "python": {"type": "path", "required": True},
            "supervisor": {"type": "str", "default": ""},
            "deploy": {"type": "dict", "options": RUN_FILES_SPEC},
            "script": {"type": "str", "default": ""},
            "cluster": {"type": "list", "elements": "str", "default": []},
            "args": {"type": "list", "elements": "str", "default": []},
            "settle": {"type": "float", "default": 2},
            "host": {"type": "str", "default": ""},
            "go_token": {"type": "str", "default": "", "no_log": True},
            "announce_key": {"type": "str", "default": "", "no_log": True},
        },
        required_one_of=[("deploy", "dirs")],
        required_by={"dirs": ("supervisor",)},
        supports_check_mode=True,
    )
    params = module.params
    host = params["host"] or socket.gethostname()
    python, args, dirs, supervisor = params["python"], params["args"], params["dirs"], params["supervisor"]
    deployed: dict = {}
    if params["deploy"] is not None:
        if module.no_log:
            # As in tf_run_dir: the task hides the whole result already, and masking
            # job_env's values would corrupt the TF_CONFIGs read back. go_token and
            # announce_key are hidden with it.
            module.no_log_values.clear()
        try:
            deployed = prepare_run(params["deploy"], module.check_mode, module._diff)
        except RunFilesError as exc:
            module.fail_json(msg=f"host {host}: nothing was launched: {exc}", **exc.fields)
        problems = [] if module.check_mode else read_back_problems(deployed["read_back"], params["cluster"])
        if params["cluster"] and problems:
            module.fail_json(
                msg=f"host {host}: nothing was launched: TF_CONFIG check failed: " + "; ".join(problems),
                deploy={k: v for k, v in deployed.items() if k != "diff"},
            )
        dirs = deployed["worker_dirs"]
        supervisor = supervisor or os.path.join(deployed["job_dir"], SUPERVISOR_FILE)
        args = deployed_args(deployed, python, params["script"], args)
    try:
        slots = plan(params["workers"], dirs, python, supervisor, args)
        secrets_line(params["go_token"], params["announce_key"])
    except (KeyError, TypeError, ValueError) as exc:
        module.fail_json(msg=f"host {host}: cannot launch: {exc}")
    extra: dict = {}
    if deployed:
        extra["deploy"] = {k: v for k, v in deployed.items() if k != "diff"}
        if "diff" in deployed:
            extra["diff"] = deployed["diff"]

    def facts(workers: list[dict]) -> dict:
        jobs = launched_workers({"workers": workers})
        if not deployed:
            return {"tf_worker_interpreter": python, "tf_launch_jobs": jobs}
        return run_facts(deployed["run_dir"], deployed["job_dir"], deployed["checkpoint_dir"],
                         deployed["worker_dirs"], python, jobs)  # fmt: skip

    if module.check_mode:
        planned = [{**slot, "supervisor_pid": None, "recorded": False, "error": None} for slot in slots]
        module.exit_json(
            changed=bool(slots),
            workers=planned,
            failed_workers=[],
            msg=f"host {host}: would start {len(slots)} supervisor(s)",
            facts=facts(planned),
            **extra,
        )
    problems = refusals(slots)
    if problems:
        module.fail_json(msg=f"host {host}: nothing was launched: " + "; ".join(problems), workers=[], **extra)
    # The module returns once every supervisor settled (at most `settle` seconds); it
    # never waits for training, so Ansible's next host (with --forks below the number of
    # hosts) starts right after, as with the async launch this replaced.
    try:
        results, failures = launch_detached(slots, params["settle"], params["go_token"], params["announce_key"])
    except (OSError, RuntimeError) as exc:
        module.fail_json(msg=f"host {host}: cannot launch: {exc}", **extra)
    for failure in failures:
        module.warn(f"host {host}: {failure}")
    module.exit_json(
        changed=any(r["supervisor_pid"] is not None for r in results),
        workers=results,
        failed_workers=[r["index"] for r in results if r["error"] is not None],
        facts=facts(results),
        **extra,
    )


if __name__ == "__main__":
    main()
