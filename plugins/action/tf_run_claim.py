"""Claim a run's private directory on the controller, in the task's own process.

The preflight's last step: ``<runs_dir>`` and ``<runs_dir>/<run_id>``, mode 0700, so that
the run id cannot be used again from this controller. Done here, on the controller,
without a module process (``install -d`` through the command module cost about half a
second of the controller's CPU and of every run's wall time). Its options and results are
documented in plugins/modules/tf_run_claim.py (a documentation-only module).
"""

from __future__ import annotations

import os
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_controller_action import ControllerAction

# The options (documented in plugins/modules/tf_run_claim.py, the documentation-only module).
ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "runs_dir": {"type": "path", "required": True},
    "run_id": {"type": "str", "required": True},
}


def claim(runs_dir: str, run_id: str, check_mode: bool = False) -> dict[str, Any]:
    """Make ``runs_dir`` (0700, also when it exists) and ``runs_dir/run_id`` (0700).

    A run directory that exists already is left as it is (``changed`` false): the
    preflight refused an id whose directory exists before it got here.
    """
    if not run_id or "/" in run_id or run_id in (".", ".."):
        raise AnsibleActionFail(f"tf_run_claim: {run_id!r} is not a run id")
    run_dir = os.path.join(runs_dir, run_id)
    if os.path.isdir(run_dir):
        return {"changed": False, "path": run_dir}
    if check_mode:
        return {"changed": True, "path": run_dir}
    try:
        os.makedirs(runs_dir, mode=0o700, exist_ok=True)
        os.chmod(runs_dir, 0o700)
        os.mkdir(run_dir, 0o700)
        os.chmod(run_dir, 0o700)
    except OSError as exc:
        raise AnsibleActionFail(f"tf_run_claim: cannot create {run_dir}: {exc}") from exc
    return {"changed": True, "path": run_dir}


class ActionModule(ControllerAction):
    ARGUMENT_SPEC = ARGUMENT_SPEC

    def work(self, args: dict[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        return claim(args["runs_dir"], args["run_id"], self._task.check_mode)
