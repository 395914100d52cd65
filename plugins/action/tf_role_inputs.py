"""Check a role's inputs for every host of the play in one task, on the controller.

Ansible checks a role's ``main`` argument spec with a task of its own on every host, and
each task on each host costs the controller a forked worker process: at 32 hosts about
1.2 CPU seconds per role and play, for values that are, except for host variables, the
same on every host. This action checks them once: the values as this task's host sees
them (role defaults, play and role variables, extra vars), and for every other host of
the play the values it sets itself (inventory, facts, set_fact), each against the same
entry point of ``meta/argument_specs.yml``, and the whole numbers among them against the
ranges the role declares beside it in ``meta/ranges.yml`` (argument specs check types
only). Its options and results are documented in plugins/modules/tf_role_inputs.py (a
documentation-only module).
"""

from __future__ import annotations

import os
from typing import Any

import yaml
from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import VariableLayer
from ansible.utils.vars import validate_variable_name
from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_controller_action import ControllerAction
from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_ranges import (
    RangesError,
    range_problems,
    role_ranges,
)

# The options (documented in plugins/modules/tf_role_inputs.py, the documentation-only module).
ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "role_path": {"type": "path", "required": True},
    "entry_point": {"type": "str", "required": True},
    "hosts": {"type": "list", "elements": "str"},
    "problems": {"type": "list", "elements": "str", "default": []},
    "refusal": {"type": "str", "default": "Refused: "},
    "facts": {"type": "dict", "default": {}},
}


def entry_point_options(role_path: str, entry_point: str) -> dict[str, Any]:
    """The options of ``entry_point`` in the role's meta/argument_specs.yml."""
    path = os.path.join(role_path, "meta", "argument_specs.yml")
    try:
        with open(path, encoding="utf-8") as handle:
            specs = (yaml.safe_load(handle) or {}).get("argument_specs") or {}
    except (OSError, yaml.YAMLError) as exc:
        raise AnsibleActionFail(f"tf_role_inputs: cannot read the argument specs {path}: {exc}") from exc
    if entry_point not in specs:
        raise AnsibleActionFail(
            f"tf_role_inputs: {path} has no entry point {entry_point!r} (it has {', '.join(sorted(specs)) or 'none'})")
    return (specs[entry_point] or {}).get("options") or {}


def _typed(result: Any, values: dict[str, Any], ranges: dict[str, Any]) -> dict[str, Any]:
    """The range-checked values that passed the type check, as given (so that a message
    quotes what the user wrote); a value of the wrong type is named once, by its type error."""
    return {name: values[name] for name in ranges
            if name in values and not any(f"'{name}'" in message for message in result.error_messages)}


def input_errors(options: dict[str, Any], own_host: str, own: dict[str, Any],
                 others: dict[str, dict[str, Any]], ranges: dict[str, Any] | None = None) -> list[str]:
    """Every error of ``options`` over the play's hosts, each prefixed with its host.

    ``own`` is every option's value on ``own_host`` (all of them, so that a missing
    required option shows); ``others`` maps each other host to the options it sets
    itself, which are all that can differ from ``own_host``'s values. On another host only
    the values that differ from ``own_host``'s are checked: a value every host inherits
    (a group variable of all hosts, an extra var) is named once, on ``own_host``.
    ``ranges`` (the role's meta/ranges.yml) bounds the options of this entry point it names.
    """
    ranges = {name: entry for name, entry in (ranges or {}).items() if name in options}
    result = ArgumentSpecValidator(options).validate(own, validate_role_argument_spec=True)
    errors = [f"host {own_host}: {message}" for message in result.error_messages]
    errors.extend(range_problems(_typed(result, own, ranges), own_host, ranges))
    for host, values in others.items():
        differing = {name: value for name, value in values.items()
                     if name in options and (name not in own or own[name] != value)}
        if differing:
            subset = {name: options[name] for name in differing}
            result = ArgumentSpecValidator(subset).validate(differing, validate_role_argument_spec=True)
            errors.extend(f"host {host}: {message}" for message in result.error_messages)
            errors.extend(range_problems(_typed(result, differing, ranges), host, ranges))
    return errors


def refusal_message(role: str, entry_point: str, errors: list[str], problems: list[str], refusal: str) -> str:
    """One message for every refusal at once: the argument errors as Ansible words its
    own check, then the caller's ``problems`` after ``refusal``, joined by '; '."""
    parts = []
    if errors:
        parts.append(f"Validation of arguments failed for role {role}, entry point {entry_point}:\n" + "\n".join(errors))
    if problems:
        parts.append(refusal + "; ".join(problems))
    return "\n".join(parts)


class ActionModule(ControllerAction):
    ARGUMENT_SPEC = ARGUMENT_SPEC

    def work(self, args: dict[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = {}
        role = os.path.basename(os.path.normpath(args["role_path"]))
        options = entry_point_options(args["role_path"], args["entry_point"])
        own_host = task_vars.get("inventory_hostname", "localhost")
        hosts = args["hosts"] if args["hosts"] is not None else task_vars.get("ansible_play_hosts", [own_host])
        own = self._templar.template({name: task_vars[name] for name in options if name in task_vars})
        hostvars = task_vars.get("hostvars", {})
        others: dict[str, dict[str, Any]] = {}
        for host in hosts:
            if host == own_host or host not in hostvars:
                continue
            variables = hostvars[host]
            others[host] = {name: variables[name] for name in options if name in variables}
        try:
            ranges = role_ranges(args["role_path"])
        except RangesError as exc:
            raise AnsibleActionFail(f"tf_role_inputs: {exc}") from exc
        errors = input_errors(options, own_host, own, others, ranges)
        result["validate_args_context"] = {"type": "role", "name": role, "argument_spec_name": args["entry_point"],
                                           "path": args["role_path"]}
        result["changed"] = False
        result["hosts"] = [own_host, *others]
        problems = [problem for problem in args["problems"] if problem]
        result["problems"] = problems
        if errors or problems:
            result["failed"] = True
            result["argument_errors"] = errors
            result["msg"] = refusal_message(role, args["entry_point"], errors, problems, args["refusal"])
        else:
            result["msg"] = f"The inputs of role {role} ({args['entry_point']}) are valid on {len(others) + 1} host(s)"
            if args["facts"]:
                result["ansible_facts"] = self.publish(args["facts"])
        return result

    def publish(self, facts: dict[str, Any]) -> dict[str, Any]:
        """Set ``facts`` as ansible.builtin.set_fact does: not cached, at set_fact's
        precedence (a cached fact would outlive the playbook run in a fact cache)."""
        for name in facts:
            validate_variable_name(name)
        self.register_host_variables({}, VariableLayer.CACHEABLE_FACT)
        self.register_host_variables(facts, VariableLayer.EPHEMERAL_FACT)
        return facts
