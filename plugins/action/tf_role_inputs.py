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

With ``later``, the same task also checks the entry points of the roles a playbook run
reaches after this one (the preflight names the launch's, the wait's, the collect's, the
verdict's...), so that their bad values are refused before anything is launched instead
of after hours of training. Those roles are not in this play: only the values defined
here are checked (the user's; their defaults are the project's), none is required (the
runbook computes some later), a value whose template names what is not set yet is not
checked (the runbook sets it later), and their ranges are the contract's (role tf),
checked first (``contract``). The runbook's playbooks then enter those roles through
task files without a check of their own.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import yaml
from ansible.errors import AnsibleActionFail, AnsibleUndefinedVariable
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.utils.vars import load_extra_vars
from ansible.vars.hostvars import HostVarsVars
from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_controller_action import ControllerAction
from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_contract import (
    RunIdError,
    checked_run_id,
    new_run_id,
    pattern_problem,
)
from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_ranges import (
    RangesError,
    collection_ranges,
    hosts_range_problems,
    range_problems,
    role_ranges,
)
from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_host_views import host_views
from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_messages import plain_types, type_name
from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_role_files import read_yaml, runbook_names

# The options (documented in plugins/modules/tf_role_inputs.py, the documentation-only module).
ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "role_path": {"type": "path", "required": True},
    "entry_point": {"type": "str"},
    "hosts": {"type": "list", "elements": "str"},
    "problems": {"type": "list", "elements": "str", "default": []},
    "refusal": {"type": "str", "default": "Refused: "},
    "facts": {"type": "dict", "default": {}},
    "later": {"type": "list", "elements": "str", "default": []},
    "misspelled": {"type": "bool", "default": False},
    "contract": {"type": "bool", "default": False},
}
# The contract: role tf's entry point, checked by the first check of a playbook run that
# asks for it (`contract`), whichever role's door that is.
CONTRACT = "tf:contract"
# The variable that says the contract was checked in this playbook run (a fact on every host).
CONTRACT_CHECKED = "__tf_contract_checked"
# How close a name must come to one of the runbook's to be taken for a misspelling of it
# (difflib's ratio): one or two letters wrong, missing or swapped in a name of 12 or more.
# Names further off are left alone: tf_ is also Terraform's prefix in many inventories.
MISSPELLING_CUTOFF = 0.85

# The contract's variables that the runbook sets itself, and why a user's -e would break
# the run: extra vars outrank the facts the runbook sets.
RUNBOOK_OWN = {
    "tf_run_attempt": (
        "the runbook numbers a run's attempts itself (each restart, and a resume with -e tf_resume=true, "
        "takes the next number); an extra var outranks that, so every attempt would have this number "
        "and a restart would find its attempt's directories taken"
    ),
}


def entry_point_options(role_path: str, entry_point: str) -> dict[str, Any]:
    """The options of ``entry_point`` in the role's meta/argument_specs.yml."""
    path = os.path.join(role_path, "meta", "argument_specs.yml")
    try:
        specs = (read_yaml(path) or {}).get("argument_specs") or {}
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


# Ansible's check converts text where a list or a mapping is declared ("a,b" becomes
# [a, b], "k=v" becomes {k: v}) without changing the variable itself, which the roles
# then read as text: a list of arguments concatenated to a string, a loop over characters.
CONTAINER_WORDS = {"list": "a list", "dict": "a mapping"}


def _plain(value: Any) -> Any:
    """``value`` as plain Python containers and text, so that a message quotes it as the user wrote it."""
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return str(value) if isinstance(value, str) else value


# The other way round, Ansible's check turns a list or a mapping where text is declared
# into its Python spelling ("['a']"): a marker file named "['a']", a path never found.
TEXT_KINDS = {"str", "path"}


def text_for_container(options: dict[str, Any], values: dict[str, Any], host: str) -> tuple[list[str], set[str]]:
    """A message for each value given as text where ``options`` declares a list or a
    mapping, or as a list or a mapping where it declares text (the items of a list of text
    too), and their names (Ansible's check would accept them, turning a mapping into its
    text: ``{'a': 2}`` as an argument of the training script)."""
    errors, names = [], set()
    for name, value in values.items():
        kind = (options.get(name) or {}).get("type")
        if kind in TEXT_KINDS and isinstance(value, (Mapping, list, tuple)):
            errors.append(f"host {host}: {name} must be a string, got {type_name(value)}: {_plain(value)!r}")
            names.add(name)
            continue
        if kind == "list" and options[name].get("elements") in TEXT_KINDS and isinstance(value, (list, tuple)):
            for index, item in enumerate(value):
                if isinstance(item, (Mapping, list, tuple)):
                    errors.append(f"host {host}: {name} item {index} must be a string, got {type_name(item)}: "
                                  f"{_plain(item)!r}")
                    names.add(name)
            continue
        if kind in CONTAINER_WORDS and isinstance(value, str):
            example = '["..."]' if kind == "list" else '{"...": "..."}'
            errors.append(
                f"host {host}: {name} must be {CONTAINER_WORDS[kind]}, got a string: {value!r} (in YAML, "
                f"{CONTAINER_WORDS[kind]}; on the command line, -e '{{\"{name}\": {example}}}')"
            )
            names.add(name)
    return errors, names


def _emptied(values: dict[str, Any], names: set[str], options: dict[str, Any]) -> dict[str, Any]:
    """``values`` for Ansible's check, once text_for_container named ``names``: text for a
    mapping replaced by an empty one (its conversion error would only say it again); text
    for a list kept, so that its items' choices are checked in the same refusal; a list or
    a mapping for text left out (Ansible would only convert it)."""
    return {name: {} if name in names and options[name].get("type") == "dict" else value
            for name, value in values.items()
            if not (name in names and options[name].get("type") in TEXT_KINDS)}


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
    errors, texts = text_for_container(options, own, own_host)
    result = ArgumentSpecValidator(options).validate(_emptied(own, texts, options), validate_role_argument_spec=True)
    errors.extend(f"host {own_host}: {plain_types(message)}" for message in result.error_messages)
    errors.extend(range_problems(_typed(result, own, ranges), own_host, ranges))
    for host, values in others.items():
        differing = {name: value for name, value in values.items()
                     if name in options and (name not in own or own[name] != value)}
        if differing:
            found, theirs = text_for_container(options, differing, host)
            errors.extend(found)
            subset = {name: options[name] for name in differing}
            result = ArgumentSpecValidator(subset).validate(_emptied(differing, theirs, options),
                                                            validate_role_argument_spec=True)
            errors.extend(f"host {host}: {plain_types(message)}" for message in result.error_messages)
            errors.extend(range_problems(_typed(result, differing, ranges), host, ranges))
    return errors


def misspelled_names(names_by_host: dict[str, Iterable[str]], known: Callable[[], set[str]],
                     checked: Iterable[str] = ()) -> list[str]:
    """A message for each ``tf_`` variable a host defines that is none of the runbook's
    names but comes close to one: a misspelling the run would ignore. ``names_by_host``
    starts with the task's host; on the others, only names it does not define (a group or
    extra variable is named once). ``known`` gives the runbook's names, asked only when
    a name is not among ``checked`` (the entry point's options) already."""
    checked = set(checked)
    messages: list[str] = []
    first: set[str] | None = None
    runbook: set[str] | None = None
    for host, names in names_by_host.items():
        names = set(names)
        for name in sorted(names - (first or set())):
            if not name.startswith("tf_") or name in checked:
                continue
            if runbook is None:
                runbook = known()
            if name in runbook:
                continue
            close = difflib.get_close_matches(name, sorted(runbook), n=1, cutoff=MISSPELLING_CUTOFF)
            if close:
                messages.append(f"host {host}: {name} is not a variable of the runbook, so the run would go on "
                                f"without it: did you mean {close[0]}?")
        if first is None:
            first = names
    return messages


def resume_problem(resume: Any, run_id: str, runs_dir: Any) -> str:
    """A resume names the run it continues: a run id generated for it would name none."""
    try:
        wanted = boolean(resume, strict=True) if resume is not None else False
    except TypeError:
        return ""  # its type check names it
    if wanted and not run_id:
        return f"tf_resume=true needs the run to resume: -e tf_run_id=<id> (the runs this controller launched are under {runs_dir})"
    return ""


def runbook_own_errors(extra_vars: Mapping[str, Any]) -> list[str]:
    """An extra var (-e) for a variable the runbook sets itself (RUNBOOK_OWN)."""
    return [f"-e {name}={_plain(extra_vars[name])!r} is refused: {why}; leave it out"
            for name, why in RUNBOOK_OWN.items() if name in extra_vars]


def without_named(errors: list[str], problems: list[str]) -> list[str]:
    """``problems`` less those about a host's value that ``errors`` names already (both
    start "host <host>: <name> "): a list given as text is refused once, by its type, not
    again by the check of what the text should have held."""
    named = {" ".join(error.split(" ", 3)[:3]) + " " for error in errors if error.startswith("host ")}
    return [problem for problem in problems
            if not any(problem.startswith(prefix) for prefix in named)]


def refusal_message(role: str, entry_point: str, errors: list[str], problems: list[str], refusal: str,
                    later: list[tuple[str, str, list[str]]] | None = None) -> str:
    """One message for every refusal at once: the argument errors as Ansible words its
    own check (those of each ``later`` role and entry point after this one's), then the
    caller's ``problems`` after ``refusal``, joined by '; '."""
    parts = []
    for name, point, found in [(role, entry_point, errors), *(later or [])]:
        if found:
            parts.append(f"Validation of arguments failed for role {name}, entry point {point}:\n" + "\n".join(found))
    if problems:
        parts.append(refusal + "; ".join(problems))
    return "\n".join(parts)


def later_role(role_path: str, spec: str) -> tuple[str, str, str]:
    """A ``later`` entry, ``role:entry_point`` of a role beside ``role_path`` (a role of
    the same collection or roles directory): its name, entry point and directory."""
    role, separator, entry_point = str(spec).partition(":")
    if not separator or not role or not entry_point or "/" in role or role in (".", ".."):
        raise AnsibleActionFail(f"tf_role_inputs: later entry {spec!r} must be role:entry_point, a role beside this one")
    return role, entry_point, os.path.join(os.path.dirname(os.path.normpath(role_path)), role)


def none_required(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` of which none is required: a later phase's value the runbook computes
    first is not there yet, and a missing one is the role's own check's to name."""
    return {name: {key: value for key, value in (spec or {}).items() if key != "required"}
            for name, spec in options.items()}


def defined(names: list[str], read: Callable[[str], Any]) -> dict[str, Any]:
    """Each of ``names`` as ``read`` gives it (templated), leaving out those whose template
    names a variable that is not set yet: a later phase sets it, and its role checks it then."""
    values = {}
    for name in names:
        try:
            values[name] = read(name)
        except AnsibleUndefinedVariable:
            continue
    return values


def with_own(hostvars: Mapping[str, Any], own_host: str, views: dict[str, Any]) -> dict[str, Any]:
    """Every host's variables: ``own_host``'s first (where it has them), then ``views``."""
    return {**({own_host: hostvars[own_host]} if own_host in hostvars else {}), **views}


class ActionModule(ControllerAction):
    ARGUMENT_SPEC = ARGUMENT_SPEC

    def _templating_view(self, variables: Mapping[str, Any], host: str) -> Mapping[str, Any]:
        """A host's raw variables as ``hostvars[host]`` gives them: templated as read."""
        return HostVarsVars(variables, loader=self._loader, host=host)

    def work(self, args: dict[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        if not args.get("entry_point") and not args.get("contract"):
            raise AnsibleActionFail("tf_role_inputs: entry_point is required unless the task checks the contract")
        own_host = task_vars.get("inventory_hostname", "localhost")
        hosts = args["hosts"] if args["hosts"] is not None else task_vars.get("ansible_play_hosts", [own_host])
        # Each host's variables, gathered once (each lookup of hostvars[host] computes all
        # of them): its own entry point's and every later one's are read from the same.
        # A value set once for every host (the cluster spec) is read on this host alone.
        views = host_views(task_vars.get("hostvars", {}), [host for host in hosts if host != own_host], task_vars,
                           self._templar.is_template, self._templating_view)
        facts = dict(args["facts"])
        if args.get("contract") and not task_vars.get(CONTRACT_CHECKED):
            refused = self.contract(args, task_vars, own_host, views, facts)
            if refused:
                return refused
        result = self.entry_point_result(args, task_vars, own_host, views) if args.get("entry_point") else {
            "changed": False, "msg": "The contract of the run is valid"}
        if not result.get("failed") and facts:
            result["ansible_facts"] = self.publish_facts(facts)
        return result

    def contract(self, args: dict[str, Any], task_vars: dict[str, Any], own_host: str, views: dict[str, Any],
                 facts: dict[str, Any]) -> dict[str, Any] | None:
        """Role tf's contract, for the first check of a playbook run: its types, every
        role's ranges and the stall pattern, on every host; no host variable a
        misspelling of the runbook's; then the run id settled (the first play generates
        it, ``-e tf_run_id`` overrides; an unsafe one is refused). Adds the run id and
        the note that the contract was checked to ``facts``; the refusal, if any."""
        name, entry_point, tf_path = later_role(args["role_path"], CONTRACT)
        options = entry_point_options(tf_path, entry_point)
        own = self._templar.template({key: task_vars[key] for key in options if key in task_vars})
        others = {host: {key: variables[key] for key in options if key in variables} for host, variables in views.items()}
        # Types only: every role's ranges, role tf's included, are checked below, once.
        errors = input_errors(options, own_host, own, others)
        hostvars = task_vars.get("hostvars", {})
        # Each lookup of hostvars[host] computes all of that host's variables again: every
        # host's are looked up once for the whole contract (views, and this host's here).
        every = with_own(hostvars, own_host, views)
        errors += self.misspelled(own_host, every, tf_path, options)
        errors += runbook_own_errors(load_extra_vars(self._loader))
        # Every role's ranges, as this host sees the values (a name no role of this play
        # defaults is empty: nothing to check) and as each host sets them itself.
        range_names = sorted(collection_ranges())
        values = defined([key for key in range_names if key in task_vars], lambda key: self._templar.template(task_vars[key]))
        problems = hosts_range_problems({key: values.get(key, "") for key in range_names}, own_host,
                                        {host: every[host] if host in every else hostvars[host]
                                         for host in task_vars.get("ansible_play_hosts_all", []) if host in hostvars})
        pattern = self._templar.template(task_vars.get("tf_stall_pattern", ""))
        problems.append(pattern_problem(pattern, "tf_stall_pattern", own_host))
        given_run_id = self._templar.template(task_vars.get("tf_run_id") or "")
        try:
            facts["tf_run_id"] = checked_run_id(given_run_id or new_run_id())
        except RunIdError as exc:
            problems.append(str(exc))
        problems.append(resume_problem(own.get("tf_resume"), given_run_id, own.get("tf_runs_dir") or "tf_runs_dir"))
        problems = [problem for problem in problems if problem]
        if errors or problems:
            # The message names every error and problem once; no list repeats them beside it
            # (Ansible prints a failed result whole, after its message).
            return {"failed": True, "changed": False,
                    "validate_args_context": {"type": "role", "name": name, "argument_spec_name": entry_point,
                                              "path": tf_path},
                    "msg": refusal_message(name, entry_point, errors, problems, "Refused: ")}
        facts[CONTRACT_CHECKED] = True
        return None

    @staticmethod
    def misspelled(own_host: str, variables: dict[str, Any], role_path: str, options: dict[str, Any]) -> list[str]:
        """misspelled_names over the hosts' own variables (inventory, extra vars, facts:
        role defaults are the runbook's; ``variables``, each host's hostvars, ``own_host``'s
        first where it has them), against the names of the roles beside ``role_path``."""
        found = {host: [name for name in names if name.startswith("tf_")] for host, names in variables.items()}
        roles_dir = os.path.dirname(os.path.normpath(role_path))
        return misspelled_names(found, lambda: runbook_names(roles_dir), options)

    def entry_point_result(self, args: dict[str, Any], task_vars: dict[str, Any], own_host: str,
                           views: dict[str, Any]) -> dict[str, Any]:
        """The check of this role's entry point (and of the ``later`` ones) over the play's hosts."""
        result: dict[str, Any] = {}
        role = os.path.basename(os.path.normpath(args["role_path"]))
        options = entry_point_options(args["role_path"], args["entry_point"])
        own = self._templar.template({name: task_vars[name] for name in options if name in task_vars})
        others: dict[str, dict[str, Any]] = {
            host: {name: variables[name] for name in options if name in variables} for host, variables in views.items()
        }
        try:
            ranges = role_ranges(args["role_path"])
        except RangesError as exc:
            raise AnsibleActionFail(f"tf_role_inputs: {exc}") from exc
        errors = input_errors(options, own_host, own, others, ranges)
        if args.get("misspelled"):
            errors += self.misspelled(own_host, with_own(task_vars.get("hostvars", {}), own_host, views),
                                      args["role_path"], options)
        later = [self.later_errors(spec, args["role_path"], own_host, views, task_vars) for spec in args["later"]]
        result["validate_args_context"] = {"type": "role", "name": role, "argument_spec_name": args["entry_point"],
                                           "path": args["role_path"]}
        result["changed"] = False
        result["hosts"] = [own_host, *others]
        result["later"] = [f"{name}:{point}" for name, point, _errors in later]
        all_errors = errors + [error for _name, _point, found in later for error in found]
        problems = without_named(all_errors, [problem for problem in args["problems"] if problem])
        if all_errors or problems:
            # Every error and problem once, in the message (as above).
            result["failed"] = True
            result["msg"] = refusal_message(role, args["entry_point"], errors, problems, args["refusal"], later)
        else:
            checked = ", ".join([f"role {role} ({args['entry_point']})", *(f"{name} ({point})" for name, point, _errors in later)])
            result["msg"] = f"The inputs of {checked} are valid on {len(others) + 1} host(s)"
            result["problems"] = []
        return result

    def later_errors(self, spec: str, role_path: str, own_host: str, views: dict[str, Any],
                     task_vars: dict[str, Any]) -> tuple[str, str, list[str]]:
        """The errors of a ``later`` role's entry point over the same hosts (``views``, each
        other host's variables): the values defined here, types only (their ranges are the
        contract's), none required."""
        name, entry_point, path = later_role(role_path, spec)
        options = none_required(entry_point_options(path, entry_point))
        own = defined([key for key in options if key in task_vars], lambda key: self._templar.template(task_vars[key]))
        theirs = {host: defined([key for key in options if key in variables], variables.__getitem__)
                  for host, variables in views.items()}
        return name, entry_point, input_errors(options, own_host, own, theirs)
