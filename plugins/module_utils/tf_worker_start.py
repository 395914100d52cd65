# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The launch's job on a host: plan one supervisor per worker, refuse a worker directory an
earlier launch used, start every supervisor detached (armed with the go's token, or at once),
and check that each recorded its state (the module ``tf_worker_launch`` calls it, after its
deploy: ``tf_run_files.deploy_attempt``)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from typing import Any, Callable

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
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run_files import launched_workers, run_facts

# The options of the launch (tf_worker_launch's ``launch``); the deploy's are RUN_FILES_SPEC.
LAUNCH_SPEC: dict[str, dict[str, Any]] = {
    "workers": {"type": "list", "elements": "dict", "required": True},
    "dirs": {"type": "dict"},
    "python": {"type": "path", "required": True},
    "supervisor": {"type": "str", "default": ""},
    "script": {"type": "str", "default": ""},
    "cluster": {"type": "list", "elements": "str", "default": []},
    "args": {"type": "list", "elements": "str", "default": []},
    "settle": {"type": "float", "default": 2},
    "go_token": {"type": "str", "default": "", "no_log": True},
    "announce_key": {"type": "str", "default": "", "no_log": True},
}

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


def launch_slots(options: dict[str, Any], deployed: dict[str, Any]) -> list[dict]:
    """The slots of ``options`` (LAUNCH_SPEC's): in the directories and with the supervisor
    the deploy of this module run made (``deployed``, prepare_run's result), with the
    arguments derived from them, or without a deploy in ``dirs`` with ``supervisor``.
    Raises ValueError (or KeyError, TypeError) on a worker without a directory or secrets
    that do not fit the supervisor's pipe."""
    python, args, dirs, supervisor = options["python"], options["args"], options["dirs"], options["supervisor"]
    if deployed:
        dirs = deployed["worker_dirs"]
        supervisor = supervisor or os.path.join(deployed["job_dir"], SUPERVISOR_FILE)
        args = deployed_args(deployed, python, options["script"], args)
    slots = plan(options["workers"], dirs or {}, python, supervisor, args)
    secrets_line(options["go_token"], options["announce_key"])
    return slots


def launch_facts(workers: list[dict], deployed: dict[str, Any], python: str) -> dict[str, Any]:
    """The facts a launch publishes on its host (for the launch role's one set_fact): the
    run's paths where this module run deployed, the interpreter and the jobs launched."""
    jobs = launched_workers({"workers": workers})
    if not deployed:
        return {"tf_worker_interpreter": python, "tf_launch_jobs": jobs}
    return run_facts(deployed["run_dir"], deployed["job_dir"], deployed["checkpoint_dir"],
                     deployed["worker_dirs"], python, jobs)  # fmt: skip
