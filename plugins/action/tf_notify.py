# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run the operator's notify command (tf_notify_command) for an event of a run, on the
controller, in the task's own process (issue 39).

The command is an argv list, never a shell string: the runbook appends the event, the run
id and the path of the run's ``summary.json`` (its directory while there is no summary
yet) and sets them in its environment too (``TF_RUNBOOK_EVENT``, ``TF_RUNBOOK_RUN_ID``,
``TF_RUNBOOK_SUMMARY``, ``TF_RUNBOOK_RUN_DIR``), so that a script reads whichever it likes
and a tool that takes its own arguments first (``curl ... -d``) can ignore the rest by
reading the environment.

A notification never holds or fails the run: the command runs in its own session, its
standard input and output closed, for at most ``timeout`` seconds, after which it is
killed with whatever it started in its session; a command that cannot start, exits
non-zero or is killed makes one warning line (its last line of standard error quoted) and
an ``ok`` task. Its options and results are documented in plugins/modules/tf_notify.py (a
documentation-only module).
"""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Any

from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import SUMMARY_FILE, printable
from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_controller_action import ControllerAction

# The events the runbook notifies, in the order a run can reach them.
EVENTS = ("started", "restarted", "stalled", "stopped", "succeeded", "failed")
# The options (documented in plugins/modules/tf_notify.py, the documentation-only module).
ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "command": {"type": "list", "elements": "str", "required": True},
    "event": {"type": "str", "required": True, "choices": list(EVENTS)},
    "run_id": {"type": "str", "required": True},
    "run_dir": {"type": "path", "required": True},
    "timeout": {"type": "int", "default": 10},
}
# How much of the command's standard error is kept for its one line (its last line).
STDERR_KEPT = 4096
# How long a killed command's pipes are waited for, at most, before they are left.
REAP_SECONDS = 1.0


def event_path(run_dir: str) -> str:
    """The path handed to the command: the run's summary.json once the verdict wrote it,
    else the run's directory on the controller."""
    summary = os.path.join(run_dir, SUMMARY_FILE)
    return summary if os.path.isfile(summary) else run_dir


def notify_call(command: list[str], event: str, run_id: str, run_dir: str,
                base_env: dict[str, str]) -> tuple[list[str], dict[str, str]]:  # fmt: skip
    """The argv (``command`` with the event, the run id and event_path appended) and the
    environment (``base_env`` with the same values named, and the run's directory) of one
    notification."""
    path = event_path(run_dir)
    env = {**base_env, "TF_RUNBOOK_EVENT": event, "TF_RUNBOOK_RUN_ID": run_id, "TF_RUNBOOK_SUMMARY": path,
           "TF_RUNBOOK_RUN_DIR": run_dir}  # fmt: skip
    return [*command, event, run_id, path], env


def _last_line(data: bytes) -> str:
    lines = [line.strip() for line in data.decode("utf-8", "replace").splitlines() if line.strip()]
    return printable(lines[-1])[:200] if lines else ""


def run_notify(argv: list[str], env: dict[str, str], timeout: float) -> str:
    """Run ``argv`` for at most ``timeout`` seconds; '' when it exited 0, else why not in
    one line (its last line of standard error, where it printed one)."""
    try:
        process = subprocess.Popen(  # pylint: disable=consider-using-with
            argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            start_new_session=True,
        )  # fmt: skip
    except OSError as exc:
        return f"cannot be started: {exc.strerror or exc}"
    try:
        _out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            process.communicate(timeout=REAP_SECONDS)
        except subprocess.TimeoutExpired:
            # Something it started outside its session holds the pipe: left to itself.
            if process.stderr is not None:
                process.stderr.close()
        return f"did not end within {timeout:g} s and was killed"
    if process.returncode == 0:
        return ""
    said = _last_line(err[-STDERR_KEPT:])
    how = f"was killed by signal {-process.returncode}" if process.returncode < 0 else f"exited {process.returncode}"
    return f"{how}: {said}" if said else how


class ActionModule(ControllerAction):
    ARGUMENT_SPEC = ARGUMENT_SPEC

    def work(self, args: dict[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        command = [str(part) for part in args["command"]]
        if not command or self._task.check_mode:
            why = "no tf_notify_command" if not command else "not run in check mode"
            return {"changed": False, "notified": False, "msg": f"{args['event']}: {why}"}
        argv, env = notify_call(command, args["event"], args["run_id"], args["run_dir"], dict(os.environ))
        problem = run_notify(argv, env, max(1, args["timeout"]))
        result: dict[str, Any] = {"changed": False, "notified": not problem, "event": args["event"], "path": argv[-1]}
        if problem:
            # One line, and the run goes on: a notification is never a reason to fail it.
            line = f"Run {args['run_id']}: tf_notify_command for {args['event']} {problem}"
            result.update(msg=line, warnings=[line])
        else:
            result["msg"] = f"Run {args['run_id']}: tf_notify_command told {args['event']}"
        return result
