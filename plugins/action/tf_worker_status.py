# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read a run's workers on one host once, and print their progress or their logs' last lines.

The module of the same name reads the workers of the run's latest attempt on the host;
this action calls it once and prints, on the controller, each worker's progress (the
status, the reattach's finder) or, with ``logs``, the last lines of each chosen worker's
log (module_utils/tf_status_lines.py). Times the host records on its own clock (the
supervisors' ``deadline_at``) are converted to the controller's with the host's clock read
in the same module run (``now``): a reattach to a host whose clock is off keeps the
run's deadline.

Its options are documented in plugins/modules/tf_worker_status.py.
"""

from __future__ import annotations

import time
from typing import Any

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_activity import frozen_entry, frozen_since
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_status_lines import log_lines, progress_lines
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_wait_control import to_controller_clock

display = Display()


class ActionModule(ActionBase):
    """Controller side of the tf_worker_status module: one call, then print."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("run_dir", "progress_pattern", "logs"))

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        logs = args.get("logs")
        host = task_vars.get("inventory_hostname", "?") if task_vars else "?"
        status = self._execute_module(module_name="tf_runbook.multiworker.tf_worker_status", module_args=args, task_vars=task_vars)
        if status.get("failed"):
            return {**result, **status}
        now = time.time()
        status["clock_offset"] = now - float(status.get("now") or now)
        if isinstance(status.get("launch"), dict):
            launch = status["launch"]
            launch["deadline_at_controller"] = to_controller_clock(launch.get("deadline_at"), status.get("now"), now)
        frozen = frozen_since({}, status.get("workers", []), now)
        for worker in status.get("workers", []):
            worker["frozen"] = frozen_entry(frozen, worker, now)
        if logs:
            indices = [int(i) for i in logs["workers"]] if logs.get("workers") is not None else None
            lines = log_lines(host, status, indices)
        else:
            lines = progress_lines(host, status, None, now)[0]
        for line in lines:
            display.display(line)
        result.update(status)
        result["changed"] = False
        return result
