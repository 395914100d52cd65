"""Claim a run on the controller, in the task's own process: exclusively, or to resume it.

The preflight's last step: ``<runs_dir>`` and ``<runs_dir>/<run_id>``, mode 0700, made by
one ``mkdir`` that fails when the directory exists, so that of two playbooks started
with the same ``-e tf_run_id`` only one passes; the run's record (``run.json``: its
cluster's checksum) is written beside. With ``resume`` (``-e tf_resume=true``) it claims
an existing run instead, once every host's answer (tf_run_resume) and the controller's
records say it may be resumed, and takes the next attempt's number with a file made
``O_EXCL``. Either claim records the playbook that drives the run (``driver.json``: the
ansible-playbook process, which forked this action's worker), and a resume is refused
while the recorded driver still lives. Done here, on the controller, without a module
process. Its options and
results are documented in plugins/modules/tf_run_claim.py (a documentation-only module).
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.utils.display import Display
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_proc import PROC, process_start_time
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import (
    DRIVER_FILE,
    RUN_RECORD,
    SUMMARY_FILE,
    read_json,
    write_json_atomic,
)
from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_controller_action import ControllerAction

display = Display()

# The options (documented in plugins/modules/tf_run_claim.py, the documentation-only module).
ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "runs_dir": {"type": "path", "required": True},
    "run_id": {"type": "str", "required": True},
    "cluster_checksum": {"type": "str", "default": ""},
    "resume": {"type": "bool", "default": False},
    "hosts": {"type": "dict", "default": {}},
    "chief": {"type": "str", "default": ""},
    "from_scratch": {"type": "bool", "default": False},
    "ports": {"type": "dict", "default": {}},
}
# The verdict's summary.json status of a run that needs nothing more.
SUCCEEDED = "succeeded"
# Made O_EXCL in the run's directory by the resume that takes attempt n.
RESUME_CLAIM = ".resume-{attempt}.claim"


def playbook_pid() -> int:
    """The pid of the ansible-playbook process that runs this action: an action runs in a
    worker process that ansible-playbook forked (its multiprocessing context is 'fork'),
    as tf_worker_status's controller check also relies on."""
    return os.getppid()


def driver_record(pid: int, attempt: int, proc: str = PROC, host: str = "") -> dict[str, Any]:
    """What driver.json holds of the playbook ``pid`` that claims ``attempt``: its pid,
    its start time (None when it cannot be read), the controller's host name."""
    return {
        "pid": pid,
        "start_time": process_start_time(pid, proc),
        "host": host or socket.gethostname(),
        "attempt": attempt,
        "claimed_at": time.time(),
    }


def record_driver(run_dir: str, attempt: int, pid: int | None = None, proc: str = PROC) -> dict[str, Any]:
    """Write driver.json in ``run_dir`` for the playbook ``pid`` (this one by default)."""
    record = driver_record(playbook_pid() if pid is None else pid, attempt, proc)
    write_json_atomic(os.path.join(run_dir, DRIVER_FILE), record)
    return record


def live_driver(run_dir: str, proc: str = PROC, host: str = "", own_pid: int | None = None) -> dict[str, Any] | None:
    """The run's recorded driver when it still drives it: the process of its pid lives
    with the recorded start time, on this host. None for no record, a record without a
    start time, a dead playbook, a pid reused by another process (another start time),
    another controller's record (which this host cannot check), or this very playbook
    (``own_pid``)."""
    record = read_json(os.path.join(run_dir, DRIVER_FILE)) or {}
    pid, start = record.get("pid"), record.get("start_time")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0 or not isinstance(start, int):
        return None
    if record.get("host") != (host or socket.gethostname()) or pid == own_pid:
        return None
    return record if process_start_time(pid, proc) == start else None


def driver_problem(run_id: str, run_dir: str, proc: str = PROC, host: str = "",
                   own_pid: int | None = None) -> list[str]:  # fmt: skip
    """Why the run may not be resumed now: a playbook that still drives it."""
    driver = live_driver(run_dir, proc, host, playbook_pid() if own_pid is None else own_pid)
    if driver is None:
        return []
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(driver.get("claimed_at") or 0)))
    return [f"run {run_id!r} is still driven by the playbook that claimed attempt {driver.get('attempt')} at "
            f"{since} (ansible-playbook pid {driver['pid']} on {driver['host']}, recorded in "
            f"{os.path.join(run_dir, DRIVER_FILE)}): let it finish, or stop it (Ctrl-C it, or kill {driver['pid']}) "
            "and then resume"]  # fmt: skip


def check_run_id(run_id: str) -> None:
    if not run_id or "/" in run_id or run_id in (".", ".."):
        raise AnsibleActionFail(f"tf_run_claim: {run_id!r} is not a run id")


def claim(runs_dir: str, run_id: str, check_mode: bool = False, checksum: str = "",
          ports: dict[str, Any] | None = None) -> dict[str, Any]:
    """Make ``runs_dir`` (0700, also when it exists) and ``runs_dir/run_id`` (0700) with one
    ``mkdir`` that fails when it exists: a run id is claimed once per controller."""
    check_run_id(run_id)
    run_dir = os.path.join(runs_dir, run_id)
    if os.path.lexists(run_dir):
        raise AnsibleActionFail(
            f"run id {run_id!r} is already claimed on this controller ({run_dir} exists): another playbook "
            "runs or ran it; give a new -e tf_run_id, or -e tf_resume=true to continue it"
        )
    if check_mode:
        return {"changed": True, "path": run_dir, "attempt": 0}
    try:
        os.makedirs(runs_dir, mode=0o700, exist_ok=True)
        os.chmod(runs_dir, 0o700)
        os.mkdir(run_dir, 0o700)
    except FileExistsError as exc:
        raise AnsibleActionFail(
            f"run id {run_id!r} was claimed by another playbook just now ({run_dir} exists); give a new -e tf_run_id"
        ) from exc
    except OSError as exc:
        raise AnsibleActionFail(f"tf_run_claim: cannot create {run_dir}: {exc}") from exc
    os.chmod(run_dir, 0o700)
    write_json_atomic(os.path.join(run_dir, RUN_RECORD),
                      {"run_id": run_id, "cluster_checksum": checksum, "claimed_at": time.time(),
                       "ports": dict(ports or {})})
    record_driver(run_dir, 0)
    return {"changed": True, "path": run_dir, "attempt": 0}


def checkpoint_problems(host: str, run_id: str, found: dict[str, Any]) -> list[str]:
    """The checkpoint directory the latest attempt's workers recorded on ``host`` (their
    state.json) against the one this resume would use there (tf_run_resume, from this
    inventory's tf_checkpoint_dir): another one would start the job over, losing its
    progress. A worker without a record (an older supervisor) is not refused."""
    would = found.get("checkpoint_dir")
    if not would:
        return []
    root = found.get("checkpoint_root") or ""
    setting = f"tf_checkpoint_dir {root!r}" if root else "tf_checkpoint_dir '', under the run's directory"
    recorded = {os.path.normpath(w["checkpoint_dir"]) for w in found.get("workers") or []
                if isinstance(w, dict) and w.get("checkpoint_dir")}  # fmt: skip
    return [
        f"host {host}: run {run_id!r} kept its checkpoints in {kept} (attempt {found.get('last_attempt')}), and "
        f"this resume would use {would} ({setting}): resume with the tf_checkpoint_dir the run was launched with"
        for kept in sorted(recorded - {os.path.normpath(would)})
    ]


def host_problems(run_id: str, checksum: str, hosts: dict[str, Any]) -> list[str]:
    """What every host's answer (tf_run_resume) says against resuming the run."""
    problems = []
    for host, found in sorted(hosts.items()):
        if not isinstance(found, dict) or found.get("failed") or "exists" not in found:
            problems.append(f"host {host}: could not read the run there ({(found or {}).get('msg', 'no answer')})")
            continue
        if not found["exists"] or found.get("last_attempt", -1) < 0:
            problems.append(f"host {host}: run {run_id!r} was never launched there ({found.get('run_dir')} "
                            "holds no worker directory); resume it with the inventory it ran on")
            continue
        for worker in found.get("earlier_alive") or []:
            problems.append(f"host {host}: worker {worker.get('index')} of attempt {worker.get('attempt')} of run "
                            f"{run_id!r} is still running (supervisor pid {worker.get('supervisor_pid')} works in "
                            f"{worker.get('dir')}); stop it (kill {worker.get('supervisor_pid')}) before resuming")
        for worker in found.get("workers") or []:
            if worker.get("alive"):
                problems.append(f"host {host}: worker {worker.get('index')} of run {run_id!r} is still running "
                                f"(its supervisor works in {worker.get('dir')}); follow it with playbooks/wait.yml "
                                "or stop it with playbooks/stop.yml first")
            if checksum and worker.get("checksum") and worker["checksum"] != checksum:
                problems.append(f"host {host}: worker {worker.get('index')} ran in another cluster (TF_CONFIG "
                                f"checksum {worker['checksum'][:12]}, this inventory's {checksum[:12]}); resume "
                                "it with the inventory it ran on")
        problems += checkpoint_problems(host, run_id, found)
    return problems


def run_succeeded(run_dir: str, hosts: dict[str, Any]) -> bool:
    """The verdict said so, or every worker of the latest attempt on every host exited 0."""
    summary = read_json(os.path.join(run_dir, SUMMARY_FILE)) or {}
    if summary.get("status") == SUCCEEDED:
        return True
    workers = [w for found in hosts.values() if isinstance(found, dict) for w in found.get("workers") or []]
    return bool(workers) and all(w.get("returncode") == 0 for w in workers)


def resumes_from(run_id: str, hosts: dict[str, Any], chief: str, from_scratch: bool) -> tuple[str, str | None]:
    """What the resumed job restores from, as the output says it, and the refusal when the
    chief's checkpoint directory holds nothing (the job would train from its first epoch
    while the output said "resumed"), unless ``from_scratch``. Nothing is said of a host
    whose answer has no ``checkpoint`` (an older module)."""
    found = hosts.get(chief) if isinstance(hosts.get(chief), dict) else {}
    held = found.get("checkpoint") if isinstance(found.get("checkpoint"), dict) else None
    if not chief or held is None:
        return "from its checkpoints", None
    if not held.get("files"):
        where = found.get("checkpoint_dir") or "its checkpoint directory"
        if from_scratch:
            return f"from scratch: the chief's checkpoint directory on {chief} ({where}) holds nothing", None
        return "", (
            f"host {chief}: run {run_id!r} has no checkpoint to resume from ({where}, the chief's checkpoint "
            "directory, holds nothing): the job would train again from its first epoch. Make the job save its "
            "training state in TF_RUNBOOK_CHECKPOINT_DIR (Keras' BackupAndRestore), or resume it anyway with "
            "-e tf_resume_from_scratch=true")
    numbers = sorted(set((held.get("numbers") or {}).values()))
    named = f"; it names checkpoint {numbers[-1]}" if numbers else ""
    size = int(held.get("bytes") or 0)
    return (f"from the chief's checkpoint on {chief} ({held['files']} file(s), {size / 1e6:.1f} MB, newest "
            f"{held.get('newest')}{named})"), None


def resume(runs_dir: str, run_id: str, checksum: str, hosts: dict[str, Any], check_mode: bool, chief: str = "",
           from_scratch: bool = False) -> dict[str, Any]:
    """Claim the existing run ``run_id`` for its next attempt, or refuse with every reason."""
    check_run_id(run_id)
    run_dir = os.path.join(runs_dir, run_id)
    if not os.path.isdir(run_dir):
        raise AnsibleActionFail(
            f"Preflight refused the resume: run {run_id!r} has no directory on this controller ({run_dir}); "
            "resume from the controller (and tf_runs_dir) that launched it")
    problems = driver_problem(run_id, run_dir)
    recorded = (read_json(os.path.join(run_dir, RUN_RECORD)) or {}).get("cluster_checksum")
    if recorded and checksum and recorded != checksum:
        problems.append(f"run {run_id!r} ran in another cluster (recorded checksum {recorded[:12]}, this "
                        f"inventory's {checksum[:12]}); resume it with the inventory it ran on")
    problems += host_problems(run_id, checksum, hosts)
    if not problems and run_succeeded(run_dir, hosts):
        problems.append(f"run {run_id!r} succeeded: there is nothing to resume")
    source, refusal = resumes_from(run_id, hosts, chief, from_scratch)
    if refusal and not problems:
        problems.append(refusal)
    if problems:
        raise AnsibleActionFail(f"Preflight refused the resume: {'; '.join(problems)}")
    attempt = max(int(found.get("last_attempt", -1)) for found in hosts.values()) + 1 if hosts else 1
    path = os.path.join(run_dir, RESUME_CLAIM.format(attempt=attempt))
    if check_mode:
        return {"changed": True, "path": run_dir, "attempt": attempt, "resumes_from": source}
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError as exc:
        raise AnsibleActionFail(
            f"Preflight refused the resume: another playbook is resuming run {run_id!r} as attempt {attempt} "
            f"({path} exists; remove it if no other playbook is resuming the run)") from exc
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(f"{time.time()}\n")
    record_driver(run_dir, attempt)
    return {"changed": True, "path": run_dir, "attempt": attempt, "resumes_from": source}


def run_id_line(run_id: str) -> str:
    """The line that tells the operator the run id, as soon as the run is claimed."""
    return f"Run id: {run_id}"


class ActionModule(ControllerAction):
    ARGUMENT_SPEC = ARGUMENT_SPEC

    def work(self, args: dict[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        if args["resume"]:
            result = resume(args["runs_dir"], args["run_id"], args["cluster_checksum"], args["hosts"],
                            self._task.check_mode, args["chief"], args["from_scratch"])
        else:
            result = claim(args["runs_dir"], args["run_id"], self._task.check_mode, args["cluster_checksum"],
                           args["ports"])
        # The run id, once and early, on a line of its own: what every later command of the
        # run (status, logs, stop, collect, resume) is given, copied from here.
        if not self._task.check_mode:
            display.display(run_id_line(args["run_id"]))
        return result
