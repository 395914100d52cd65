# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Describe the workers every host of the play offers and compute the cluster spec, in
one task on the controller.

A host's entry (its address, first port, number of slots, task type, and whether it is a
spare) comes from that host's variables as a task of this play on that host sees them:
role defaults, play variables, inventory, facts (``tf_host_views.task_variables``). The
runbook described each host with a ``set_fact`` on every host before, a worker process
each: about 30 ms of the controller's CPU per host at 16 hosts, for five values (issue 42).
Its options and results are documented in plugins/modules/tf_cluster_describe.py (a
documentation-only module).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleActionFail, AnsibleError, AnsibleFilterError
from ansible.template import Templar
from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_cluster_build import tf_cluster_spec
from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_controller_action import ControllerAction
from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_host_views import (
    HostVariablesError,
    task_variables,
)

# The options (documented in plugins/modules/tf_cluster_describe.py).
ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "hosts": {"type": "list", "elements": "str", "required": True},
    "resolve": {"type": "bool", "default": True},
}
# The groups that give a host its task type, in the order the runbook asks them (a host of
# none of them but the spares' group is a spare), each named by a variable of role tf.
TYPE_GROUPS = (("chief", "tf_chief_group"), ("ps", "tf_ps_group"), ("evaluator", "tf_evaluator_group"))
WORKERS_GROUP = "tf_workers_group"
# What a host's entry reads of its variables, and the name each has in the entry.
ENTRY_VARIABLES = (("address", "tf_worker_address"), ("port", "tf_worker_port"), ("slots", "tf_worker_slots"))


def host_entry(host: str, value: Any, groups: Mapping[str, Any]) -> dict[str, Any]:
    """``host``'s entry of the worker list, ``value`` giving each of its variables templated
    and ``groups`` the inventory's groups (Ansible's ``groups``, plain names: read as they are,
    not templated, which would copy every group's list of hosts for every host).

    Its type is that of the first group of TYPE_GROUPS that holds it (a host of tf_workers, or
    of none of them, is a worker); a host of none of them and not of tf_workers is a spare."""

    def members(variable: str) -> Any:
        return groups.get(value(variable)) or ()

    kind = next((kind for kind, variable in TYPE_GROUPS if host in members(variable)), "worker")
    in_cluster = host in members(WORKERS_GROUP) or any(host in members(variable) for _kind, variable in TYPE_GROUPS)
    entry = {"host": host, **{key: value(variable) for key, variable in ENTRY_VARIABLES}}
    return {**entry, "type": kind, "spare": not in_cluster}


def templated(variables: Mapping[str, Any], templar: Any) -> Any:
    """A reader of a host's ``variables``, each templated in the host's own context."""

    def value(name: str) -> Any:
        if name not in variables:
            raise AnsibleError(f"{name} is not set")
        return templar.template(variables[name])

    return value


class ActionModule(ControllerAction):
    ARGUMENT_SPEC = ARGUMENT_SPEC

    def work(self, args: dict[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        try:
            variables = task_variables(self._task, task_vars, args["hosts"])
        except HostVariablesError as exc:
            raise AnsibleActionFail(f"tf_cluster_describe: {exc}") from exc
        described, problems = {}, []
        for host, host_vars in variables.items():
            try:
                reader = templated(host_vars, Templar(loader=self._loader, variables=host_vars))
                described[host] = host_entry(host, reader, host_vars.get("groups") or {})
            except AnsibleError as exc:
                problems.append(f"host {host}: {exc.message}")
        if problems:
            return {"failed": True, "changed": False,
                    "msg": "Cannot describe the workers of every host: " + "; ".join(problems)}
        # In the order given, a host listed twice (in two groups) twice: the spec refuses it.
        entries = [described[host] for host in args["hosts"]]
        try:
            spec = tf_cluster_spec(entries, args["resolve"])
        except AnsibleFilterError as exc:
            return {"failed": True, "changed": False, "msg": str(exc.message)}
        return {"changed": False, "ansible_facts": self.publish_facts({"tf_cluster_spec": spec}),
                "msg": f"The cluster spec of {len(entries)} host(s)"}
