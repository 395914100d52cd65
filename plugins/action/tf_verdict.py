"""Judge a run on the controller, in the worker process of the task.

The module of the same name (plugins/modules/tf_verdict.py) holds the documentation, and
module_utils/tf_verdict_*.py the judgement; run as a module, it would start a Python
process on the controller and unpack itself there, about half a second of the
controller's CPU and of every run's wall time, for work that reads files already on the controller. This action runs the
same function, ``verdict()``, in-process.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_verdict_summary import ARGUMENT_SPEC, verdict
from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_controller_action import ControllerAction


class ActionModule(ControllerAction):
    ARGUMENT_SPEC = ARGUMENT_SPEC

    def work(self, args: dict[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        return verdict(args, self._task.check_mode)
