# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Follow a pip install that runs in the background (``async``, ``poll: 0``) on a host,
saying how far it is, until it ends; its result is the install's (issue 39).

A first TensorFlow install takes minutes, and ``ansible.builtin.pip`` says nothing until it
ends. The deploy starts it as an async job with ``pip install --log <file>``; this action
then asks the job's status (``ansible.builtin.async_status``) every ``interval`` seconds
and, between two asks, reads the lines of pip's log that tell its steps (a filter in the
host's own Python, so that pip's verbose log does not cross the network whole). It prints
a line when the step changes, and at least every ``every`` seconds while it does not
(tf_pip_progress.progress_line). The job's own time limit (``async``) ends a pip that
hangs; this action gives up ``grace`` seconds after it, should the job's record never
come. Its options and results are documented in plugins/modules/tf_pip_follow.py (a
documentation-only module).
"""

from __future__ import annotations

import shlex
import time
from typing import Any

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_pip_progress import pip_progress, progress_line

display = Display()

ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "job": {"type": "str", "required": True},
    "log": {"type": "path", "required": True},
    "python": {"type": "path", "required": True},
    "pins": {"type": "int", "default": 0},
    "target": {"type": "str", "default": ""},
    "timeout": {"type": "int", "required": True},
    "interval": {"type": "float", "default": 5.0},
    "every": {"type": "float", "default": 30.0},
}
# Seconds past the job's own time limit before the action stops waiting for its record.
GRACE = 60.0
# The lines of pip's log that tell its steps, printed by the host's Python (the log's
# path is its one argument); a log not written yet prints nothing.
STEP_FILTER = (
    "import re, sys\n"
    "pattern = re.compile(r'^\\S+ (Collecting |Processing |\\s+Downloading |Installing collected|Successfully installed)')\n"
    "try:\n"
    "    with open(sys.argv[1], errors='replace') as log:\n"
    "        sys.stdout.write(''.join(line for line in log if pattern.match(line)))\n"
    "except OSError:\n"
    "    pass\n"
)
# What async_status adds to the job's own result.
ASYNC_KEYS = ("ansible_job_id", "finished", "started", "results_file", "stdout_lines", "stderr_lines")


def _step(progress: dict[str, Any]) -> tuple[Any, ...]:
    return (progress["done"], progress["installing"], progress["collected"] > 0,
            (progress["downloading"] or {}).get("file"))


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        host = task_vars.get("inventory_hostname", "?")
        started = time.monotonic()
        shown_step: tuple[Any, ...] | None = None
        shown_at = started
        # Where the job's record is, as ansible.builtin.async_status's own action finds it.
        async_dir = self._remote_expand_user(self.get_shell_option("async_dir", default="~/.ansible_async"))
        while True:
            status = self._execute_module(module_name="ansible.legacy.async_status", task_vars=task_vars,
                                          module_args={"jid": args["job"], "mode": "status", "_async_dir": async_dir})
            elapsed = time.monotonic() - started
            if status.get("finished"):
                self._execute_module(module_name="ansible.legacy.async_status", task_vars=task_vars,
                                     module_args={"jid": args["job"], "mode": "cleanup", "_async_dir": async_dir})
                result.update({key: value for key, value in status.items() if key not in ASYNC_KEYS})
                result["seconds"] = round(elapsed, 1)
                return result
            if status.get("failed"):  # no such job: its record is gone
                result.update(failed=True, msg=f"host {host}: the install's job {args['job']} has no record: "
                                               f"{status.get('msg', '')}; pip's log: {args['log']}")
                return result
            if elapsed > args["timeout"] + GRACE:
                result.update(failed=True, msg=f"host {host}: the install did not end within {args['timeout']} s "
                                               f"(tf_worker_install_timeout); pip's log: {args['log']}")
                return result
            read = self._low_level_execute_command(shlex.join([args["python"], "-c", STEP_FILTER, args["log"]]))
            progress = pip_progress(read.get("stdout", "") if read.get("rc") == 0 else "")
            step = _step(progress)
            now = time.monotonic()
            if step != shown_step or now - shown_at >= args["every"]:
                # The first line says where the packages go.
                display.display(progress_line(host, progress, elapsed, args["pins"],
                                              args["target"] if shown_step is None else ""))
                shown_step, shown_at = step, now
            time.sleep(args["interval"])
