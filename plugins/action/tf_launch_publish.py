"""Publish a reattached run's facts on its host, as the launch does (tf_worker_launch's
ansible_facts): one controller action per host, no module run. Its options and results
are documented in the module of the same name (plugins/modules/tf_launch_publish.py)."""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run_files import reattach_facts

ARGUMENT_SPEC = {
    "found": {"type": "dict", "required": True},
    "run": {"type": "dict", "default": {}},
}


class ActionModule(ActionBase):
    """The reattach's finder result in, the run's facts out."""

    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        try:
            facts = reattach_facts(args["found"], args["run"])
        except (KeyError, TypeError, ValueError) as exc:
            return {**result, "failed": True, "msg": f"cannot publish the reattached run: {exc}"}
        return {**result, "changed": False, "ansible_facts": facts}
