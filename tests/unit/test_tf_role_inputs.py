"""Role inputs checked once for every host (issue 13): the tf_role_inputs action.

Ansible checks a role's `main` entry point with a task on every host, a worker process
each. Every role here names its entry points after what they do instead, and checks them
with one run_once tf_role_inputs task. These tests check the action's judgement of the
hosts' values, and that no role has an entry point Ansible would check per host again.
"""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest
import yaml
from ansible.errors import AnsibleActionFail, AnsibleError, AnsibleUndefinedVariable
from ansible.plugins.action import VariableLayer

import tf_role_inputs_action as action

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "roles"

OPTIONS = {
    "tf_x_timeout": {"type": "int", "required": True},
    "tf_x_flag": {"type": "bool", "default": True},
    "tf_x_mode": {"type": "str", "choices": ["a", "b"], "default": "a"},
}


def test_valid_values_on_every_host_give_no_error() -> None:
    own = {"tf_x_timeout": 5, "tf_x_flag": "yes"}
    others = {"w2": {"tf_x_timeout": "7"}, "w3": {}}
    assert action.input_errors(OPTIONS, "w1", own, others) == []


def test_a_bad_value_on_the_tasks_host_names_that_host_and_the_value() -> None:
    errors = action.input_errors(OPTIONS, "w1", {"tf_x_timeout": "soon"}, {"w2": {}})
    assert len(errors) == 1
    assert errors[0].startswith("host w1: argument 'tf_x_timeout' is of type str")
    assert "soon" in errors[0]


def test_a_bad_host_variable_on_another_host_names_that_host() -> None:
    own = {"tf_x_timeout": 5}
    errors = action.input_errors(OPTIONS, "w1", own, {"w2": {}, "w3": {"tf_x_mode": "c"}, "w4": {"tf_x_flag": "maybe"}})
    assert [error.split(":")[0] for error in errors] == ["host w3", "host w4"]
    assert "tf_x_mode" in errors[0] and "c" in errors[0]
    assert "tf_x_flag" in errors[1] and "maybe" in errors[1]


def test_the_same_bad_value_on_two_other_hosts_is_named_on_each() -> None:
    errors = action.input_errors(OPTIONS, "w1", {"tf_x_timeout": 5}, {"w2": {"tf_x_timeout": "x"}, "w3": {"tf_x_timeout": "x"}})
    assert [error.split(":")[0] for error in errors] == ["host w2", "host w3"]


CONTAINERS = {
    "tf_x_args": {"type": "list", "elements": "str", "default": []},
    "tf_x_on": {"type": "list", "elements": "str", "choices": ["a", "b"], "default": ["a"]},
    "tf_x_env": {"type": "dict", "default": {}},
    "tf_x_jobs": {"type": "list", "elements": "dict", "required": True},
}


@pytest.mark.parametrize(
    ("name", "text", "kind"),
    [("tf_x_args", "--epochs 3", "a list"), ("tf_x_args", "a,b", "a list"), ("tf_x_args", "", "a list"),
     ("tf_x_env", "A=1", "a mapping"), ("tf_x_env", "not a mapping", "a mapping")],
)
def test_text_where_a_list_or_a_mapping_is_declared_is_refused(name: str, text: str, kind: str) -> None:
    """Ansible's own check would turn "a,b" into [a, b] and "A=1" into {A: 1} and pass,
    leaving the variable itself text that the roles read as text."""
    errors = action.input_errors(CONTAINERS, "w1", {"tf_x_jobs": [], name: text}, {})
    assert errors == [f"host w1: {name} must be {kind}, got a string: {text!r} (in YAML, {kind}; on the command "
                      f"line, -e '{{\"{name}\": {'[\"...\"]' if kind == 'a list' else '{\"...\": \"...\"}'}}}')"]


def test_text_for_a_list_is_refused_with_its_items_checked_and_on_another_host() -> None:
    errors = action.input_errors(CONTAINERS, "w1", {"tf_x_jobs": [], "tf_x_on": "crash"}, {"w2": {"tf_x_args": "-x"}})
    assert errors[0].startswith("host w1: tf_x_on must be a list, got a string: 'crash'")
    assert errors[1].startswith("host w1: value of tf_x_on must be one or more of: a, b") and "crash" in errors[1]
    assert errors[2].startswith("host w2: tf_x_args must be a list, got a string: '-x'")
    assert len(errors) == 3


TEXTS = {"tf_x_marker": {"type": "str", "default": "done.txt"}, "tf_x_dir": {"type": "path"},
         "tf_x_mode": {"type": "str", "choices": ["a", "b"], "default": "a"}}


@pytest.mark.parametrize(("name", "value", "words"), [
    ("tf_x_marker", ["a"], "a list: ['a']"), ("tf_x_dir", {"k": "v"}, "a mapping: {'k': 'v'}"),
    ("tf_x_mode", ["a"], "a list: ['a']"), ("tf_x_marker", [], "a list: []"),
])
def test_a_list_or_a_mapping_where_text_is_declared_is_refused_once(name: str, value: object, words: str) -> None:
    """Ansible's own check would turn ['a'] into the text "['a']" and pass: a marker file
    of that name, never written. Named once, not again by the choices."""
    assert action.input_errors(TEXTS, "w1", {name: value}, {}) == [f"host w1: {name} must be a string, got {words}"]
    assert action.input_errors(TEXTS, "w1", {}, {"w2": {name: value}}) == [f"host w2: {name} must be a string, got {words}"]


def test_a_list_or_a_mapping_as_an_item_of_a_list_of_text_is_refused_by_its_index() -> None:
    """Ansible's own check would turn {'a': 2} into the text "{'a': 2}": an argument of the
    training script that its parser then refuses, after the launch. Numbers pass (YAML
    reads `3` as one), and so does a list of dicts where dicts are declared."""
    options = {**CONTAINERS, "tf_x_files": {"type": "list", "elements": "path", "default": []}}
    errors = action.input_errors(options, "w1", {"tf_x_jobs": [{"a": 1}], "tf_x_args": ["--epochs", 3, {"a": 2}]},
                                 {"w2": {"tf_x_files": [["p"], "q"]}})
    assert errors == ["host w1: tf_x_args item 2 must be a string, got a mapping: {'a': 2}",
                      "host w2: tf_x_files item 0 must be a string, got a list: ['p']"]
    assert action.input_errors(options, "w1", {"tf_x_jobs": [], "tf_x_args": ["-x", 1, 2.5]}, {}) == []


def test_text_and_what_yaml_reads_as_a_scalar_pass_where_text_is_declared() -> None:
    assert action.input_errors(TEXTS, "w1", {"tf_x_marker": "m.txt", "tf_x_dir": "/tmp", "tf_x_mode": "b"},
                               {"w2": {"tf_x_marker": 12}}) == []


def test_a_problem_about_a_value_its_type_refused_already_is_left_out() -> None:
    errors = ["host w1: tf_x_allow must be a list, got a string: '10.0.0.0/8'"]
    problems = ["host w1: tf_x_allow must be a list of IP addresses, got '10.0.0.0/8'",
                "host w2: tf_x_allow must be a list of IP addresses, got 'x'",
                "host w1: tf_x_allowed_more is odd", "host w1: tf_x_marker is wrong", "not about a host"]
    assert action.without_named(errors, problems) == problems[1:]
    assert action.without_named([], problems) == problems


def test_the_action_refuses_a_value_once_by_its_type_and_keeps_its_other_problems(tmp_path: Path) -> None:
    role = _later_roles(tmp_path)
    result, _registered = _action_on(
        role, {"entry_point": "deploy", "later": ["tf_y:wait"],
               "problems": ["host w1: tf_y_files must hold paths, got 'a'", "host w1: tf_x_timeout is late"]},
        {"tf_x_timeout": 5, "tf_y_files": "a"})
    assert result["failed"] and result["msg"].count("host w1: tf_x_timeout is late") == 1
    # Said once, in the message: no list beside it repeats it in the printed result.
    assert "problems" not in result and "argument_errors" not in result
    assert "tf_y_files must be a list, got a string" in result["msg"] and "must hold paths" not in result["msg"]


def test_lists_and_mappings_given_as_such_pass() -> None:
    own = {"tf_x_jobs": [{"index": 0}], "tf_x_args": ["--epochs", "3"], "tf_x_on": ["b"], "tf_x_env": {"A": "1"}}
    assert action.input_errors(CONTAINERS, "w1", own, {"w2": {"tf_x_args": []}}) == []


RANGES = {"tf_x_timeout": {"low": 10, "high": 3600, "zero": "no deadline", "span": False},
          "tf_y_count": {"low": 1, "high": None, "zero": None, "span": False}}


def test_a_value_out_of_the_roles_range_names_host_and_value() -> None:
    errors = action.input_errors(OPTIONS, "w1", {"tf_x_timeout": 5}, {"w2": {"tf_x_timeout": "7200"}}, RANGES)
    assert errors == [
        "host w1: tf_x_timeout must be 0 (no deadline) or 10 or more, got 5",
        # The value as the host gave it, as the contract check quotes it.
        "host w2: tf_x_timeout must be at most 3600 (1 hour), got '7200'",
    ]


def test_values_in_range_and_ranges_of_other_entry_points_give_no_error() -> None:
    # tf_y_count has a range but is no option of this entry point: another host's value of
    # it is not looked at.
    others = {"w2": {"tf_x_timeout": 3600, "tf_y_count": 0}}
    assert action.input_errors(OPTIONS, "w1", {"tf_x_timeout": 0}, others, RANGES) == []


def test_a_value_of_the_wrong_type_is_named_once_by_its_type_error() -> None:
    errors = action.input_errors(OPTIONS, "w1", {"tf_x_timeout": "soon"}, {}, RANGES)
    assert len(errors) == 1 and "is of type str" in errors[0]


def test_every_role_entry_point_that_checks_an_input_with_a_range_reads_that_range(tmp_path: Path) -> None:
    (tmp_path / "meta").mkdir()
    (tmp_path / "meta" / "argument_specs.yml").write_text(
        "argument_specs:\n  go:\n    options:\n      tf_x_timeout: {type: int, required: true}\n")
    (tmp_path / "meta" / "ranges.yml").write_text("tf_x_timeout: {low: 1, high: 5}\n")
    options = action.entry_point_options(str(tmp_path), "go")
    ranges = action.role_ranges(str(tmp_path))
    assert action.input_errors(options, "w1", {"tf_x_timeout": 6}, {}, ranges) == [
        "host w1: tf_x_timeout must be at most 5, got 6"]


def test_a_value_every_host_inherits_is_named_once() -> None:
    own = {"tf_x_timeout": "never"}
    errors = action.input_errors(OPTIONS, "w1", own, {"w2": {"tf_x_timeout": "never"}, "w3": {"tf_x_timeout": "never"}})
    assert len(errors) == 1 and errors[0].startswith("host w1:")


def test_a_missing_required_option_is_refused() -> None:
    errors = action.input_errors(OPTIONS, "w1", {}, {})
    assert errors == ["host w1: missing required arguments: tf_x_timeout"]


def test_another_hosts_options_outside_the_entry_point_are_ignored() -> None:
    assert action.input_errors(OPTIONS, "w1", {"tf_x_timeout": 1}, {"w2": {"other_var": "x"}}) == []


def test_an_unknown_entry_point_is_refused_naming_the_ones_there(tmp_path: Path) -> None:
    (tmp_path / "meta").mkdir()
    (tmp_path / "meta" / "argument_specs.yml").write_text("argument_specs:\n  deploy:\n    options: {}\n")
    assert action.entry_point_options(str(tmp_path), "deploy") == {}
    with pytest.raises(AnsibleActionFail, match="no entry point 'main' .*it has deploy"):
        action.entry_point_options(str(tmp_path), "main")


def _action_on(role: Path, args: dict, variables: dict) -> tuple[dict, list]:
    """The action's result for ``args`` with the task's variables ``variables``, and the
    variables it registered for the host, by layer (as set_fact registers them)."""
    task = mock.MagicMock(args=args, async_val=0, check_mode=False, diff=False)
    templar = mock.MagicMock()
    templar.template.side_effect = lambda value: value
    instance = action.ActionModule(task, mock.MagicMock(), mock.MagicMock(), None, templar, None)
    registered: list = []
    with mock.patch.object(instance, "register_host_variables", lambda values, layer: registered.append((layer, values))):
        result = instance.work({"role_path": str(role), "hosts": None, "problems": [], "refusal": "Refused: ",
                                "facts": {}, "later": [], **args},
                               {"inventory_hostname": "w1", "ansible_play_hosts": ["w1"], **variables})
    return result, registered


def _role_with_timeout(root: Path) -> Path:
    (root / "meta").mkdir(parents=True)
    (root / "meta" / "argument_specs.yml").write_text(
        "argument_specs:\n  deploy:\n    options:\n      tf_x_timeout: {type: int, required: true}\n")
    return root


def test_facts_are_set_as_set_fact_sets_them_once_every_input_passed(tmp_path: Path) -> None:
    role = _role_with_timeout(tmp_path / "tf_x")
    facts = {"tf_x_id": "run-1", "__tf_x_checked": True}
    result, registered = _action_on(role, {"entry_point": "deploy", "facts": facts}, {"tf_x_timeout": 5})
    assert not result.get("failed") and result["ansible_facts"] == facts
    # Not cached (a fact cache would carry them into the next playbook run), at set_fact's precedence.
    assert registered == [(VariableLayer.CACHEABLE_FACT, {}), (VariableLayer.EPHEMERAL_FACT, facts)]


@pytest.mark.parametrize(("variables", "problems"), [({"tf_x_timeout": "soon"}, []), ({"tf_x_timeout": 5}, ["host w1: p"])])
def test_no_fact_is_set_when_an_input_is_refused(tmp_path: Path, variables: dict, problems: list) -> None:
    role = _role_with_timeout(tmp_path / "tf_x")
    result, registered = _action_on(role, {"entry_point": "deploy", "facts": {"tf_x_id": "run-1"}, "problems": problems},
                                    variables)
    assert result["failed"] and "ansible_facts" not in result and registered == []


def test_a_fact_that_is_not_a_variable_name_is_refused(tmp_path: Path) -> None:
    role = _role_with_timeout(tmp_path / "tf_x")
    with pytest.raises(AnsibleError, match="tf-x"):
        _action_on(role, {"entry_point": "deploy", "facts": {"tf-x": 1}}, {"tf_x_timeout": 5})


def _entry_points(role: Path) -> dict[str, dict]:
    path = role / "meta" / "argument_specs.yml"
    return (yaml.safe_load(path.read_text()) or {}).get("argument_specs") or {} if path.exists() else {}


def _checked_entry_points(role: Path) -> dict[str, list[str]]:
    """Entry point -> the task files whose first task checks it with tf_role_inputs."""
    checked: dict[str, list[str]] = {}
    for tasks in sorted((role / "tasks").glob("*.yml")):
        for task in yaml.safe_load(tasks.read_text()) or []:
            if "tf_runbook.multiworker.tf_role_inputs" in task:
                args = task["tf_runbook.multiworker.tf_role_inputs"]
                assert task.get("run_once") is True, f"{tasks}: the check must run once"
                assert args["role_path"] == "{{ role_path }}", tasks
                if "entry_point" in args:
                    checked.setdefault(args["entry_point"], []).append(tasks.stem)
    return checked


def _entered_with() -> dict[str, set[str]]:
    """Role -> the tasks files it is entered with anywhere in the runbook (main for roles:)."""
    entered: dict[str, set[str]] = {}

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key in ("ansible.builtin.include_role", "ansible.builtin.import_role"):
                if isinstance(node.get(key), dict):
                    args = node[key]
                    entered.setdefault(args["name"].split(".")[-1], set()).add(
                        str(args.get("tasks_from", "main")).removesuffix(".yml"))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for path in [*REPO.glob("playbooks/*.yml"), *ROLES.glob("*/tasks/*.yml"), *ROLES.glob("*/meta/main.yml")]:
        walk(yaml.safe_load(path.read_text()))
    return entered


@pytest.mark.parametrize("role", sorted(path.name for path in ROLES.iterdir() if (path / "tasks").is_dir()))
def test_no_entry_point_is_checked_by_ansible_on_every_host(role: str) -> None:
    # Ansible prepends its per-host check when a role is entered through a tasks file
    # named like one of its entry points (main for `roles:` and dependencies).
    entered = _entered_with().get(role, set()) | {"main"}
    assert not set(_entry_points(ROLES / role)) & entered


def test_the_runbook_enters_roles_through_their_tasks_files() -> None:
    entered = _entered_with()
    assert entered["tf_firewall"] >= {"tools", "drop", "rules"}
    assert entered["tf_wait"] >= {"watch", "reattach", "status"}


def _later_everywhere() -> dict[str, set[str]]:
    """Role -> its entry points that some check names in `later`."""
    named: dict[str, set[str]] = {}
    for tasks in sorted(ROLES.glob("*/tasks/*.yml")):
        for task in yaml.safe_load(tasks.read_text()) or []:
            for spec in (task.get("tf_runbook.multiworker.tf_role_inputs") or {}).get("later") or []:
                role, _, entry_point = spec.partition(":")
                named.setdefault(role, set()).add(entry_point)
    return named


@pytest.mark.parametrize("role", sorted(path.name for path in ROLES.iterdir() if (path / "tasks").is_dir()))
def test_every_entry_point_with_options_is_checked(role: str) -> None:
    """By a check of the role's own, or by another's `later` (a task file the runbook
    enters without a check, such as the firewall's removal)."""
    entries = _entry_points(ROLES / role)
    checked = set(_checked_entry_points(ROLES / role)) | _later_everywhere().get(role, set())
    if role == "tf" and _contract_checked():
        # Role tf's entry point is the run's contract, checked by every role's first
        # check (contract: true); its tasks/ holds only notify.yml, included at events.
        checked.add("contract")
    with_options = {name for name, entry in entries.items() if (entry or {}).get("options")}
    assert checked <= set(entries), f"{role} checks entry points it does not have: {checked - set(entries)}"
    assert with_options <= checked, f"{role}: entry points never checked: {with_options - checked}"


def _contract_checked() -> bool:
    """Whether some role's check takes the contract (tf_role_inputs with contract: true)."""
    return any((task.get("tf_runbook.multiworker.tf_role_inputs") or {}).get("contract") is True
               for tasks in sorted(ROLES.glob("*/tasks/*.yml")) for task in yaml.safe_load(tasks.read_text()) or [])


def _first_task(role: str, tasks_from: str) -> dict:
    return (yaml.safe_load((ROLES / role / "tasks" / f"{tasks_from}.yml").read_text()) or [{}])[0]


def test_the_runbook_enters_a_role_through_a_skipped_check_only_where_it_is_named() -> None:
    """A check skipped after the preflight still costs the run a task: the playbooks and
    roles enter each role through a task file without one (its main.yml, with the check,
    is the door for a play of your own), except on a failure's path (the stop, a
    restart's new attempt) and at the start of collect.yml, which also runs alone."""
    entered = _entered_with()
    entered["tf_launch"].add("main")  # launch.yml imports the role (its check also notes the start)
    skipped = {(role, tasks_from) for role, files in entered.items() for tasks_from in files
               if "tf_preflight_inputs_checked" in str(_first_task(role, tasks_from).get("when", ""))}
    assert skipped == {("tf_stop", "main"), ("tf_worker", "attempt"), ("tf_collect", "inputs")}
    # Roles listed in a play are entered through main.yml: only those whose check runs.
    for playbook in REPO.glob("playbooks/*.yml"):
        for play in yaml.safe_load(playbook.read_text()) or []:
            for role in play.get("roles") or []:
                name = role["role"] if isinstance(role, dict) else role
                assert "tf_preflight_inputs_checked" not in str(_first_task(name, "main").get("when", "")), (playbook, name)


def test_each_check_is_the_first_task_of_its_file() -> None:
    for tasks in sorted(ROLES.glob("*/tasks/*.yml")):
        names = [next(iter(k for k in task if "." in k and not k.startswith("ansible.builtin.meta")), "")
                 for task in yaml.safe_load(tasks.read_text()) or []]
        if "tf_runbook.multiworker.tf_role_inputs" in names:
            assert names.index("tf_runbook.multiworker.tf_role_inputs") == 0, \
                f"{tasks}: the inputs are checked after other tasks ran"


# -- one task refuses every reason at once (issue 26: fewer controller tasks) ----------------


def test_the_callers_problems_follow_the_argument_errors_in_one_message() -> None:
    errors = ["host w1: argument 'tf_x_timeout' is of type str"]
    problems = ["host w1: tf_x_pattern '(' is not a regular expression", "host w2: tf_x_dir 'x' must be absolute"]
    message = action.refusal_message("tf_x", "contract", errors, problems, "Preflight refused the run: ")
    assert message == (
        "Validation of arguments failed for role tf_x, entry point contract:\n"
        "host w1: argument 'tf_x_timeout' is of type str\n"
        "Preflight refused the run: host w1: tf_x_pattern '(' is not a regular expression; "
        "host w2: tf_x_dir 'x' must be absolute")


@pytest.mark.parametrize(("errors", "problems", "expected"), [
    ([], ["host w1: p"], "Refused: host w1: p"),
    (["host w1: e"], [], "Validation of arguments failed for role tf_x, entry point contract:\nhost w1: e"),
])
def test_either_kind_alone_gives_its_own_part(errors: list[str], problems: list[str], expected: str) -> None:
    assert action.refusal_message("tf_x", "contract", errors, problems, "Refused: ") == expected


def test_the_preflight_refuses_its_problems_in_its_input_check() -> None:
    """The inputs that would fail late: the `problems` of the preflight's tf_role_inputs
    task, no task of their own."""
    tasks = ROLES / "tf_preflight" / "tasks" / "main.yml"
    [check] = [task for task in yaml.safe_load(tasks.read_text()) if "tf_runbook.multiworker.tf_role_inputs" in task]
    assert "__tf_preflight_input_problems" in str(check["tf_runbook.multiworker.tf_role_inputs"]["problems"])
    assert "Refuse patterns, paths and addresses" not in tasks.read_text()


def test_role_tf_holds_no_task_so_that_no_play_after_the_first_spends_one_on_the_contract() -> None:
    # Every role depends on role tf (its variables): a task of its main.yml would be in
    # every play. Its only task file is notify.yml, included by name at a run's events
    # (and only where tf_notify_command is set).
    assert sorted(path.name for path in (ROLES / "tf" / "tasks").glob("*")) == ["notify.yml"]


def test_the_first_check_of_every_door_checks_the_contract() -> None:
    """The cluster (first role of the preflight and of a reattach) checks it first; every
    role's own check does too, for a role used alone or a phase run alone."""
    [first, *_rest] = yaml.safe_load((ROLES / "tf_cluster" / "tasks" / "main.yml").read_text())
    inputs = first["tf_runbook.multiworker.tf_role_inputs"]
    assert inputs["contract"] is True and "entry_point" not in inputs
    assert "__tf_contract_checked" in first["when"] and first["run_once"] is True
    checks = 0
    for tasks in sorted(ROLES.glob("*/tasks/*.yml")):
        for task in yaml.safe_load(tasks.read_text()) or []:
            if "tf_runbook.multiworker.tf_role_inputs" in task:
                assert task["tf_runbook.multiworker.tf_role_inputs"].get("contract") is True, tasks
                checks += 1
    assert checks >= 15
    # status.yml reads runs/<tf_run_id>: its first task refuses an unsafe one.
    [status, *_rest] = yaml.safe_load((ROLES / "tf_wait" / "tasks" / "status.yml").read_text())
    assert status["tf_runbook.multiworker.tf_role_inputs"]["contract"] is True


def _contract_roles(root: Path) -> Path:
    """Role tf (the contract: a timeout and a port) and tf_x beside it."""
    (root / "tf" / "meta").mkdir(parents=True)
    (root / "tf" / "meta" / "argument_specs.yml").write_text(
        "argument_specs:\n  contract:\n    options:\n"
        "      tf_job_timeout: {type: int}\n      tf_worker_port: {type: int}\n")
    return _role_with_timeout(root / "tf_x")


def _contract_vars(**more: object) -> dict:
    hostvars = {"w1": {"tf_job_timeout": 5}, "w2": {"tf_worker_port": 1234}}
    return {"ansible_play_hosts": ["w1", "w2"], "ansible_play_hosts_all": ["w1", "w2"], "hostvars": hostvars,
            "tf_x_timeout": 5, "tf_job_timeout": 5, "tf_stall_pattern": "", "tf_run_id": "", **more}


def test_the_contract_settles_a_new_run_id_and_notes_that_it_was_checked(tmp_path: Path) -> None:
    role = _contract_roles(tmp_path)
    result, registered = _action_on(role, {"entry_point": "deploy", "contract": True, "facts": {"tf_x_ok": True}},
                                    _contract_vars())
    assert not result.get("failed"), result
    facts = result["ansible_facts"]
    assert facts["__tf_contract_checked"] is True and facts["tf_x_ok"] is True
    assert facts["tf_run_id"] and action.checked_run_id(facts["tf_run_id"]) == facts["tf_run_id"]
    assert registered[-1] == (VariableLayer.EPHEMERAL_FACT, facts)
    given, _registered = _action_on(role, {"entry_point": "deploy", "contract": True},
                                    _contract_vars(tf_run_id="run-7"))
    assert given["ansible_facts"] == {"tf_run_id": "run-7", "__tf_contract_checked": True}


@pytest.mark.parametrize(("variables", "expected"), [
    ({"tf_job_timeout": "x"}, "Validation of arguments failed for role tf, entry point contract:\nhost w1: argument 'tf_job_timeout'"),
    ({"tf_job_timeout": -5}, "Refused: host w1: tf_job_timeout must be 0 or more"),
    ({"tf_stall_pattern": "a("}, "Refused: host w1: tf_stall_pattern 'a(' is not a regular expression"),
    ({"tf_run_id": "../x"}, "Refused: tf_run_id '../x' is not safe as a directory name"),
    ({"hostvars": {"w1": {}, "w2": {"tf_job_timout": 9}}},
     "host w2: tf_job_timout is not a variable of the runbook, so the run would go on without it: did you mean tf_job_timeout?"),
    ({"hostvars": {"w1": {}, "w2": {"tf_worker_port": 0}}}, "host w2: tf_worker_port must be"),
])
def test_the_contract_refuses_for_role_tf_before_the_roles_own_inputs(tmp_path: Path, variables: dict, expected: str) -> None:
    role = _contract_roles(tmp_path)
    # tf_x's own bad value is not reached: the contract's refusal is the whole refusal.
    result, registered = _action_on(role, {"entry_point": "deploy", "contract": True, "facts": {"tf_x_ok": True}},
                                    _contract_vars(tf_x_timeout="bad", **variables))
    assert result["failed"] and expected in result["msg"], result["msg"]
    assert "tf_x_timeout" not in result["msg"] and registered == [] and "ansible_facts" not in result
    # A range problem is named once.
    assert result["msg"].count("must be 0 or more") <= 1


def test_an_extra_var_for_the_attempt_number_the_runbook_sets_is_refused(tmp_path: Path) -> None:
    """-e tf_run_attempt=2 would outrank every attempt number the restart loop sets: each
    restart would take attempt 2's directories again. The same value from the role's
    default or a set_fact (no extra var) passes."""
    role = _contract_roles(tmp_path)
    with mock.patch.object(action, "load_extra_vars", lambda _loader: {"tf_run_attempt": 2, "tf_x_timeout": 5}):
        result, registered = _action_on(role, {"contract": True}, _contract_vars(tf_run_attempt=2))
    assert result["failed"] and registered == [], result
    assert "-e tf_run_attempt=2 is refused: the runbook numbers a run's attempts itself" in result["msg"]
    assert "tf_x_timeout" not in result["msg"]
    with mock.patch.object(action, "load_extra_vars", lambda _loader: {"tf_x_timeout": 5}):
        passed, _registered = _action_on(role, {"contract": True}, _contract_vars(tf_run_attempt=2))
    assert not passed.get("failed"), passed
    assert action.runbook_own_errors({}) == []


def test_a_resume_without_a_run_id_is_refused_rather_than_given_a_new_one() -> None:
    """A generated id would name a run that never existed: the resume's own check would
    then say that run has no directory, not that the id is missing."""
    assert action.resume_problem(True, "", "/x/runs") == (
        "tf_resume=true needs the run to resume: -e tf_run_id=<id> (the runs this controller launched are under /x/runs)")
    assert action.resume_problem("yes", "", "/x/runs").startswith("tf_resume=true needs the run to resume")
    assert action.resume_problem(True, "exp-1", "/x/runs") == ""
    assert action.resume_problem(False, "", "/x/runs") == ""
    assert action.resume_problem(None, "", "/x/runs") == ""
    assert action.resume_problem("maybe", "", "/x/runs") == ""  # its type check names it


def test_a_contract_checked_earlier_in_the_playbook_run_is_not_checked_again(tmp_path: Path) -> None:
    role = _contract_roles(tmp_path)
    result, _registered = _action_on(role, {"entry_point": "deploy", "contract": True},
                                     _contract_vars(tf_run_id="../x", __tf_contract_checked=True))
    assert not result.get("failed") and "ansible_facts" not in result


def test_a_check_of_the_contract_alone_needs_no_entry_point_and_one_without_either_is_refused(tmp_path: Path) -> None:
    role = _contract_roles(tmp_path)
    result, _registered = _action_on(role, {"contract": True}, _contract_vars(tf_x_timeout="bad"))
    assert not result.get("failed") and result["ansible_facts"]["__tf_contract_checked"] is True
    with pytest.raises(AnsibleActionFail, match="entry_point is required unless"):
        _action_on(role, {}, _contract_vars())


# -- later phases' inputs, checked by the preflight before anything is launched ---------------


def _later_roles(root: Path) -> Path:
    """Role tf_x (the checking role) and tf_y beside it, whose entry point `wait` has a
    required option the runbook would compute later and a list a user sets."""
    role = _role_with_timeout(root / "tf_x")
    (root / "tf_y" / "meta").mkdir(parents=True)
    (root / "tf_y" / "meta" / "argument_specs.yml").write_text(
        "argument_specs:\n  wait:\n    options:\n"
        "      tf_y_deadline: {type: int, required: true}\n"
        "      tf_y_files: {type: list, elements: str}\n")
    return role


def test_a_later_phases_bad_value_is_refused_by_the_same_task_in_its_own_part(tmp_path: Path) -> None:
    role = _later_roles(tmp_path)
    result, registered = _action_on(role, {"entry_point": "deploy", "later": ["tf_y:wait"], "facts": {"tf_x_ok": True}},
                                    {"tf_x_timeout": 5, "tf_y_files": {"a": 1}})
    assert result["failed"] and registered == []
    assert result["msg"].startswith("Validation of arguments failed for role tf_y, entry point wait:\nhost w1: argument 'tf_y_files'")
    assert "tf_x" not in result["msg"] and result["later"] == ["tf_y:wait"]


def test_both_roles_errors_are_named_in_one_message_each_in_its_part(tmp_path: Path) -> None:
    role = _later_roles(tmp_path)
    result, _registered = _action_on(role, {"entry_point": "deploy", "later": ["tf_y:wait"], "problems": ["host w1: p"]},
                                     {"tf_x_timeout": "soon", "tf_y_files": {"a": 1}})
    parts = result["msg"].split("\n")
    assert parts[0] == "Validation of arguments failed for role tf_x, entry point deploy:"
    assert "Validation of arguments failed for role tf_y, entry point wait:" in parts
    assert parts[-1] == "Refused: host w1: p" and "argument_errors" not in result


def test_a_later_value_the_runbook_computes_later_is_not_required(tmp_path: Path) -> None:
    role = _later_roles(tmp_path)
    result, _registered = _action_on(role, {"entry_point": "deploy", "later": ["tf_y:wait"], "facts": {"tf_x_ok": True}},
                                     {"tf_x_timeout": 5, "tf_y_files": ["*.log"]})
    assert not result.get("failed") and result["ansible_facts"] == {"tf_x_ok": True}
    assert "tf_y (wait)" in result["msg"]


def test_a_later_value_whose_template_names_what_is_not_set_yet_is_left_to_its_role(tmp_path: Path) -> None:
    role = _later_roles(tmp_path)
    task = mock.MagicMock(args={}, async_val=0, check_mode=False, diff=False)
    templar = mock.MagicMock()

    def template(value: object) -> object:
        if value == "{{ later_fact }}":
            raise AnsibleUndefinedVariable("'later_fact' is undefined")
        return value

    templar.template.side_effect = template
    instance = action.ActionModule(task, mock.MagicMock(), mock.MagicMock(), None, templar, None)
    result = instance.work({"role_path": str(role), "hosts": None, "problems": [], "refusal": "Refused: ",
                            "entry_point": "deploy", "later": ["tf_y:wait"], "facts": {}},
                           {"inventory_hostname": "w1", "ansible_play_hosts": ["w1"], "tf_x_timeout": 5,
                            "tf_y_deadline": "{{ later_fact }}", "tf_y_files": "{{ later_fact }}"})
    assert not result.get("failed"), result["msg"]


@pytest.mark.parametrize("spec", ["tf_y", "tf_y:", ":wait", "../tf_y:wait", "a/b:wait", "..:wait"])
def test_a_later_entry_that_is_not_a_role_beside_and_its_entry_point_is_refused(spec: str) -> None:
    with pytest.raises(AnsibleActionFail, match="must be role:entry_point"):
        action.later_role("/roles/tf_x", spec)


def test_a_later_role_is_found_beside_the_checking_role() -> None:
    assert action.later_role("/c/roles/tf_preflight/", "tf_wait:wait") == ("tf_wait", "wait", "/c/roles/tf_wait")


def _check_task(tasks: Path, entry_point: str) -> dict:
    [task] = [task for task in yaml.safe_load(tasks.read_text()) or []
              if (task.get("tf_runbook.multiworker.tf_role_inputs") or {}).get("entry_point") == entry_point]
    return task


def test_every_check_the_preflight_stands_for_loses_no_input_of_the_user() -> None:
    """A role's own check is skipped after the preflight's only where the preflight's
    `later` entry points name every option it checks."""
    check = _check_task(ROLES / "tf_preflight" / "tasks" / "main.yml", "preflight")["tf_runbook.multiworker.tf_role_inputs"]
    assert check["facts"]["tf_preflight_inputs_checked"] is True
    covered: dict[str, set[str]] = {}
    for spec in check["later"]:
        role, _, entry_point = spec.partition(":")
        covered.setdefault(role, set()).update(_entry_points(ROLES / role)[entry_point].get("options") or {})
    skipped = []
    for tasks in sorted(ROLES.glob("*/tasks/*.yml")):
        for task in yaml.safe_load(tasks.read_text()) or []:
            inputs = task.get("tf_runbook.multiworker.tf_role_inputs")
            if inputs and "tf_preflight_inputs_checked" in str(task.get("when", "")):
                role = tasks.parts[-3]
                options = set(_entry_points(ROLES / role)[inputs["entry_point"]].get("options") or {})
                assert options <= covered.get(role, set()), (tasks, inputs["entry_point"], options - covered.get(role, set()))
                skipped.append(f"{role}:{inputs['entry_point']}")
    # Every later entry point stands for a check that is then skipped, but the launch's,
    # which also notes when the attempt started.
    assert set(check["later"]) - set(skipped) == {"tf_launch:launch"}


class _CountingHostvars(dict):
    """hostvars whose every lookup of a host counts (each computes all of that host's
    variables in Ansible)."""

    def __init__(self, hosts: dict) -> None:
        super().__init__(hosts)
        self.lookups: dict[str, int] = {}

    def __getitem__(self, host: str) -> dict:
        self.lookups[host] = self.lookups.get(host, 0) + 1
        return super().__getitem__(host)


def test_each_hosts_variables_are_gathered_once_for_every_entry_point(tmp_path: Path) -> None:
    role = _later_roles(tmp_path)
    hostvars = _CountingHostvars({"w2": {"tf_x_timeout": 5, "tf_y_files": {"a": 1}}, "w3": {"tf_x_timeout": 5}})
    result, _registered = _action_on(role, {"entry_point": "deploy", "later": ["tf_y:wait", "tf_y:wait"]},
                                     {"tf_x_timeout": 5, "ansible_play_hosts": ["w1", "w2", "w3"], "hostvars": hostvars})
    assert hostvars.lookups == {"w2": 1, "w3": 1}
    # The other host's own bad value is still named, in the later role's part.
    assert "host w2: argument 'tf_y_files'" in result["msg"] and "host w3" not in result["msg"]


# -- misspelled variables (the contract's check) -----------------------------------------

KNOWN = {"tf_job_timeout", "tf_worker_slots", "tf_worker_port", "tf_restart_attempts"}


def test_a_host_variable_close_to_a_runbook_name_is_refused_naming_host_and_name() -> None:
    names = {"w0": ["tf_job_timout", "tf_worker_port", "ansible_host"], "w1": ["tf_job_timout", "tf_worker_slot"]}
    assert action.misspelled_names(names, lambda: KNOWN) == [
        "host w0: tf_job_timout is not a variable of the runbook, so the run would go on without it: "
        "did you mean tf_job_timeout?",
        # w1's tf_job_timout is w0's too (a group or extra variable): named once.
        "host w1: tf_worker_slot is not a variable of the runbook, so the run would go on without it: "
        "did you mean tf_worker_slots?",
    ]


def test_names_far_from_the_runbooks_are_left_alone_and_known_ones_pass() -> None:
    """tf_ is also Terraform's prefix: only near misses are refused."""
    names = {"w0": ["tf_state_bucket", "tf_max_restarts", "tf_job_timeout", "tfjob_timeout", "tf_worker_ports_extra"]}
    assert action.misspelled_names(names, lambda: KNOWN) == []


def test_the_runbooks_names_are_read_only_when_a_name_is_not_an_option_already() -> None:
    asked = []

    def known() -> set[str]:
        asked.append(1)
        return KNOWN

    assert action.misspelled_names({"w0": ["tf_job_timeout"], "w1": ["tf_worker_port"]}, known,
                                   checked=["tf_job_timeout", "tf_worker_port"]) == []
    assert asked == []
    action.misspelled_names({"w0": ["tf_job_timeout"], "w1": ["tf_jobtimeout"]}, known, checked=["tf_job_timeout"])
    assert asked == [1]


def test_the_runbooks_names_are_what_its_roles_and_playbooks_spell_outside_comments(tmp_path: Path) -> None:
    from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_role_files import runbook_names

    (tmp_path / "roles" / "r" / "tasks").mkdir(parents=True)
    (tmp_path / "roles" / "r" / "molecule").mkdir()
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "roles" / "r" / "tasks" / "main.yml").write_text(
        "# a letter off: tf_job_timout\n- name: x\n  ansible.builtin.set_fact:\n    tf_run_seen: \"{{ tf_job_timeout }}\"\n")
    (tmp_path / "roles" / "r" / "molecule" / "converge.yml").write_text("tf_only_in_molecule: 1\n")
    (tmp_path / "playbooks" / "p.yml").write_text("- hosts: all\n  vars:\n    tf_from_a_playbook: 1\n")
    assert runbook_names(str(tmp_path / "roles")) == {"tf_run_seen", "tf_job_timeout", "tf_from_a_playbook"}
    # This project's: every option of every role, the facts of the flow and what the
    # playbooks set before the contract's check (the reattach's tf_wait_reattached).
    known = runbook_names(str(ROLES))
    assert {"tf_job_timeout", "tf_worker_slots", "tf_launch_jobs", "tf_wait_reattached", "tf_run_id"} <= known


def test_the_action_refuses_a_misspelled_host_variable_with_each_hosts_variables_gathered_once(tmp_path: Path) -> None:
    """End to end through the action: the task's host's and another host's host variables
    (not the task's variables, which hold role defaults), each gathered once; the
    runbook's names are those its roles and playbooks beside the role spell."""
    role = _later_roles(tmp_path)
    (tmp_path / "tf_x" / "tasks").mkdir()
    (tmp_path / "tf_x" / "tasks" / "main.yml").write_text("- ansible.builtin.debug:\n    msg: \"{{ tf_x_flag }}\"\n")
    hostvars = _CountingHostvars({"w1": {"tf_x_timeout": 5, "tf_x_flga": True}, "w2": {"tf_y_file": ["a"]},
                                  "w3": {"tf_state_bucket": "b"}})
    result, _registered = _action_on(role, {"entry_point": "deploy", "later": ["tf_y:wait"], "misspelled": True},
                                     {"tf_x_timeout": 5, "ansible_play_hosts": ["w1", "w2", "w3"], "hostvars": hostvars})
    assert result["failed"]
    assert ("host w1: tf_x_flga is not a variable of the runbook, so the run would go on without it: "
            "did you mean tf_x_flag?") in result["msg"]
    assert "host w2: tf_y_file is not a variable" in result["msg"] and "did you mean tf_y_files?" in result["msg"]
    assert "tf_state_bucket" not in result["msg"]
    assert hostvars.lookups == {"w1": 1, "w2": 1, "w3": 1}
    unchecked, _registered = _action_on(role, {"entry_point": "deploy"},
                                        {"tf_x_timeout": 5, "ansible_play_hosts": ["w1", "w2"],
                                         "hostvars": _CountingHostvars({"w1": {"tf_x_flga": 1}, "w2": {}})})
    assert not unchecked.get("failed"), unchecked
