#!/usr/bin/python
"""Report the state of this host's training workers; wait briefly for news."""

from __future__ import annotations

import json
import os
import re
import time

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: tf_worker_status
short_description: Read the supervisor records of this host's workers
description:
  - Reads C(state.json), C(exit.json) and C(worker.log) of each worker directory and
    returns one entry per worker with its state, exit status and latest progress line.
  - Waits up to O(wait) seconds for any of them to change (a new log line that matches
    O(progress_pattern), an exit), so that the action of the same name, which calls it
    in a loop from the controller, shows progress as it happens instead of polling blindly.
  - Read-only; supports check mode.
options:
  workers:
    description: Worker entries with C(index) and C(dir), and optionally C(job_id), the
      Ansible async job id of its launch.
    type: list
    elements: dict
    required: true
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
"""


def _read_json(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


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
    result = _read_json(os.path.join(os.path.expanduser("~/.ansible_async"), job_id))
    # While the job runs the file holds {"started": 1, "finished": 0}; the module's final
    # result replaces it, with no "finished" key of its own.
    if not result or result.get("finished") == 0 or not (result.get("failed") or result.get("rc", 0) != 0):
        return None
    cmd = result.get("cmd")
    argv0 = cmd[0] if isinstance(cmd, list) and cmd else str(cmd or "").split(" ", 1)[0]
    detail = str(result.get("stderr") or result.get("msg") or "launch failed").strip()
    return (f"{argv0}: {detail}" if argv0 else detail)[-500:]


def worker_state(entry: dict, progress: re.Pattern, tail_lines: int) -> dict:
    wdir = entry["dir"]
    state = _read_json(os.path.join(wdir, "state.json"))
    exit_ = _read_json(os.path.join(wdir, "exit.json"))
    tail = _tail(os.path.join(wdir, "worker.log"), max(tail_lines, 50))
    progress_lines = [line for line in tail if progress.search(line)]
    info = {
        "index": int(entry["index"]),
        "dir": wdir,
        "pid": state.get("pid") if state else None,
        "state": "starting",
        "returncode": None,
        "reason": None,
        "last_line": progress_lines[-1] if progress_lines else None,
        "log_tail": tail[-tail_lines:],
    }
    if exit_ is not None:
        info.update(state="exited", returncode=exit_.get("returncode"), reason=exit_.get("reason"))
    elif state is not None:
        info["state"] = "running"
    else:
        failure = _async_failure(entry.get("job_id"))
        if failure is not None:
            info.update(state="exited", returncode=-1, reason=f"the worker could not be launched: {failure}")
    return info


def snapshot(workers: list[dict], progress: re.Pattern, tail_lines: int) -> list[dict]:
    return [worker_state(entry, progress, tail_lines) for entry in workers]


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "workers": {"type": "list", "elements": "dict", "required": True},
            "wait": {"type": "float", "default": 0},
            "deadline": {"type": "float", "default": 0},
            "progress_pattern": {"type": "str", "default": "epoch="},
            "tail_lines": {"type": "int", "default": 8},
        },
        supports_check_mode=True,
    )
    params = module.params
    progress = re.compile(params["progress_pattern"])
    first = snapshot(params["workers"], progress, params["tail_lines"])
    current = first
    key = [(w["state"], w["last_line"]) for w in first]
    stop_at = time.monotonic() + max(0.0, params["wait"])
    while time.monotonic() < stop_at and not all(w["state"] == "exited" for w in current):
        time.sleep(0.5)
        current = snapshot(params["workers"], progress, params["tail_lines"])
        if [(w["state"], w["last_line"]) for w in current] != key:
            break
    failed = [w["index"] for w in current if w["state"] == "exited" and w["returncode"] != 0]
    module.exit_json(
        changed=False,
        workers=current,
        done=all(w["state"] == "exited" for w in current),
        failed_workers=failed,
        deadline_passed=bool(params["deadline"]) and time.time() > params["deadline"],
    )


if __name__ == "__main__":
    main()
