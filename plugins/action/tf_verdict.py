"""Judge a run on the controller, in the worker process of the task.

The module of the same name (plugins/modules/tf_verdict.py) holds the judgement and its
documentation; run as a module, it would start a Python process on the controller and
unpack itself there, about half a second of the controller's CPU and of every run's
wall time, for work that reads files already on the controller. This action runs the
same function, ``verdict()``, in-process.
"""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase

from ansible_collections.tf_runbook.multiworker.plugins.modules.tf_verdict import ARGUMENT_SPEC, verdict


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        result.update(verdict(args, self._task.check_mode))
        return result
