#!/usr/bin/python
"""Report the state of this host's training workers; wait briefly for news."""

from __future__ import annotations

import os
import re
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import (
    EXIT_FILE,
    LOG_FILE,
    STATE_FILE,
    read_json,
    retry_index,
    worker_index,
)

DOCUMENTATION = r"""
module: tf_worker_status
short_description: Read the supervisor records of this host's workers
description:
  - Reads C(state.json), C(exit.json) and C(worker.log) of each worker directory and
    returns one entry per worker with its state, exit status and latest progress line.
  - Waits up to O(wait) seconds for any of them to change (a new log line that matches
    O(progress_pattern), an exit), so that the action of the same name, which calls it
    in a loop from the controller, shows progress as it happens instead of polling blindly.
  - A worker whose C(state.json) exists without C(exit.json) is only running while its
    supervisor is alive (the recorded pid, still working in that worker's directory);
    otherwise it is reported as exited with C(returncode) -1 and the reason.
  - With O(heartbeat_file), renews that file (its modification time) on every check: the
    supervisors of a run tied to the controller stop when it goes stale.
  - Without O(workers), finds the workers of the latest attempt of the run in
    O(run_dir) (reattaching from another controller) and returns them as C(workers_found)
    with what their supervisors recorded about the launch (C(launch)).
  - Read-only apart from the heartbeat; supports check mode (no heartbeat then).
options:
  workers:
    description: Worker entries with C(index) and C(dir), and optionally C(job_id), the
      Ansible async job id of its launch.
    type: list
    elements: dict
  run_dir:
    description: The run's directory on this host (C(~) allowed), to find the workers in
      when O(workers) is not given.
    type: str
  heartbeat_file:
    description: File whose modification time is renewed on every check; empty for none.
    type: str
    default: ""
  wait:
    description: Seconds to wait for a change before returning.
    type: float
    default: 0
  deadline:
    description: Epoch seconds after which C(deadline_passed) is true; 0 for none.
    type: float
    default: 0
  progress_pattern:
    description: Regular expression for the lines shown as progress.
    type: str
    default: 'epoch='
  tail_lines:
    description: How many of the log's last lines to return per worker.
    type: int
    default: 8
"""

RETURN = r"""
workers:
  description: One entry per worker, in the order given.
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
  returned: always
deadline_passed:
  description: O(deadline) is set and has passed.
  type: bool
  returned: always
joined:
  description: Every worker has joined the cluster (its supervisor saw the startup line).
  type: bool
  returned: always
workers_found:
  description: Without O(workers), the workers found in O(run_dir) (C(index), C(dir)).
  type: list
  returned: when O(run_dir) is used
launch:
  description: Without O(workers), the attempt, deadline and what the supervisors were
    started with (from the first worker's C(state.json)).
  type: dict
  returned: when O(run_dir) is used
"""


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


def _async_failure(job_id: str | None) -> str | None:
    """The error of a launch whose async job ended without starting the supervisor."""
    if not job_id:
        return None
    result = read_json(os.path.join(os.path.expanduser("~/.ansible_async"), job_id))
    # While the job runs the file holds {"started": 1, "finished": 0}; the module's final
    # result replaces it, with no "finished" key of its own.
    if not result or result.get("finished") == 0 or not (result.get("failed") or result.get("rc", 0) != 0):
        return None
    cmd = result.get("cmd")
    argv0 = cmd[0] if isinstance(cmd, list) and cmd else str(cmd or "").split(" ", 1)[0]
    detail = str(result.get("stderr") or result.get("msg") or "launch failed").strip()
    return (f"{argv0}: {detail}" if argv0 else detail)[-500:]


def supervisor_alive(pid: object, worker_dir: str) -> bool:
    """The recorded supervisor still runs, in that worker's directory (not a reused pid)."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            data = handle.read()
        if data[data.rfind(")") + 2 :].split()[0] in ("Z", "X"):
            return False
        return os.path.realpath(os.readlink(f"/proc/{pid}/cwd")) == os.path.realpath(worker_dir)
    except (OSError, IndexError):
        return False


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
    elif state is not None:
        info["state"] = "running"
    else:
        failure = _async_failure(entry.get("job_id"))
        if failure is not None:
            info.update(state="exited", returncode=-1, reason=f"the worker could not be launched: {failure}")
    return info


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
            "run_dir": {"type": "str"},
            "heartbeat_file": {"type": "str", "default": ""},
            "wait": {"type": "float", "default": 0},
            "deadline": {"type": "float", "default": 0},
            "progress_pattern": {"type": "str", "default": "epoch="},
            "tail_lines": {"type": "int", "default": 8},
        },
        required_one_of=[("workers", "run_dir")],
        supports_check_mode=True,
    )
    params = module.params
    progress = re.compile(params["progress_pattern"])
    extra: dict = {}
    workers = params["workers"]
    if workers is None:
        run_dir = os.path.abspath(os.path.expanduser(params["run_dir"]))
        workers, launch = find_workers(run_dir)
        extra = {"workers_found": workers, "launch": launch, "run_dir": run_dir}
    heartbeat = "" if module.check_mode else params["heartbeat_file"]
    heartbeat = os.path.expanduser(heartbeat) if heartbeat else ""

    def beat() -> None:
        if heartbeat:
            try:
                touch(heartbeat)
            except OSError as exc:
                module.fail_json(msg=f"cannot renew the controller heartbeat {heartbeat}: {exc}")

    beat()
    first = snapshot(workers, progress, params["tail_lines"])
    current = first
    key = [(w["state"], w["last_line"], w["joined"]) for w in first]
    stop_at = time.monotonic() + max(0.0, params["wait"])
    while time.monotonic() < stop_at and not all(w["state"] == "exited" for w in current):
        time.sleep(0.5)
        beat()
        current = snapshot(workers, progress, params["tail_lines"])
        if [(w["state"], w["last_line"], w["joined"]) for w in current] != key:
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
