# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shape shared by this collection's actions that work on the controller alone.

Such an action never contacts its host and never runs a module: it checks its options
against ``ARGUMENT_SPEC`` (documented in the documentation-only module of its name) and
returns what ``work()`` returns, merged into Ansible's base result.
"""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase, VariableLayer
from ansible.utils.vars import validate_variable_name


class ControllerAction(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False
    # The options, as documented in plugins/modules/<name>.py.
    ARGUMENT_SPEC: dict[str, dict[str, Any]] = {}

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        _validation, args = self.validate_argument_spec(argument_spec=self.ARGUMENT_SPEC)
        result.update(self.work(args, task_vars))
        return result

    def work(self, args: dict[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        """The action's result for its validated ``args``."""
        raise NotImplementedError

    def publish_facts(self, facts: dict[str, Any]) -> dict[str, Any]:
        """Set ``facts`` as ansible.builtin.set_fact does: not cached, at set_fact's
        precedence (a cached fact would outlive the playbook run in a fact cache). With
        ``run_once``, on every host of the play, as set_fact sets them."""
        for name in facts:
            validate_variable_name(name)
        self.register_host_variables({}, VariableLayer.CACHEABLE_FACT)
        self.register_host_variables(facts, VariableLayer.EPHEMERAL_FACT)
        return facts
