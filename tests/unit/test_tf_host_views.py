"""Other hosts' variables as the check of every host's inputs reads them
(plugin_utils/tf_host_views): a value set once for every host is read on the task's host
alone, and everything a host sets itself, or inherits as a template, is still read on it."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar
from ansible.vars.hostvars import HostVars, HostVarsVars
from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_host_views import HostVariables, host_views

import tf_role_inputs_action as action


def _is_template(value: Any) -> bool:
    return isinstance(value, str) and "{{" in value


class _Reads(dict):
    """A host's variables that count the reads of each name."""

    def __init__(self, values: dict[str, Any]) -> None:
        super().__init__(values)
        self.reads: dict[str, int] = {}

    def __getitem__(self, name: str) -> Any:
        self.reads[name] = self.reads.get(name, 0) + 1
        return super().__getitem__(name)


SPEC = {"workers": [{"host": f"w{index}", "port": 2222} for index in range(64)]}


def test_a_value_held_as_the_tasks_hosts_own_object_is_left_out() -> None:
    own = {"tf_spec": SPEC, "tf_port": 2222, "tf_dir": "/".join(["", "srv"])}
    hostvars = {"w2": {"tf_spec": SPEC, "tf_dir": "/".join(["", "srv"]), "tf_mine": 1}}
    [view] = host_views(hostvars, ["w2"], own, _is_template).values()
    # The spec is the same object: left out. The directory is equal to the task's host's but
    # another object: read, as before (the check compares it).
    assert "tf_spec" not in view and "tf_mine" in view and "tf_dir" in view
    assert sorted(view) == ["tf_dir", "tf_mine"] and len(view) == 2
    with pytest.raises(KeyError):
        view["tf_spec"]
    assert view["tf_mine"] == 1 and view.get("tf_spec", "none") == "none"


@pytest.mark.parametrize(("theirs", "kept"), [
    # An equal value, another object: read (the check compares it).
    ({"workers": [{"host": f"w{index}", "port": 2222} for index in range(64)]}, True),
    # Another value: read.
    ({"workers": []}, True),
    # The same object: not read.
    (SPEC, False),
])
def test_only_the_very_same_object_is_left_out(theirs: dict, kept: bool) -> None:
    [view] = host_views({"w2": {"tf_spec": theirs}}, ["w2"], {"tf_spec": SPEC}, _is_template).values()
    assert ("tf_spec" in view) is kept


def test_a_template_every_host_inherits_is_read_on_each_host() -> None:
    """A group variable "{{ ... }}" of every host is one object too, and comes out per host."""
    template = "{{ port_of[inventory_hostname] }}"
    asked: list[Any] = []

    def is_template(value: Any) -> bool:
        asked.append(value)
        return _is_template(value)

    views = host_views({"w2": {"tf_port": template}, "w3": {"tf_port": template}}, ["w2", "w3"],
                       {"tf_port": template}, is_template)
    assert all("tf_port" in view for view in views.values())
    # Asked once for the name, not once per host.
    assert asked == [template]


def test_hosts_without_variables_are_left_out_and_each_is_looked_up_once() -> None:
    lookups: list[str] = []

    class Counting(dict):
        def __getitem__(self, host: str) -> Any:
            lookups.append(host)
            return super().__getitem__(host)

    views = host_views(Counting({"w2": {}, "w3": {}}), ["w2", "w3", "gone"], {}, _is_template)
    assert list(views) == ["w2", "w3"] and lookups == ["w2", "w3"]


def test_ansibles_hostvars_give_the_same_object_on_every_host_for_a_fact_set_once(tmp_path: Path) -> None:
    """Through Ansible's own variables: a fact set for every host at once (as set_fact with
    run_once sets it) is the object the task's variables hold; an inventory template of a
    group of every host is templated on each host; a host's own fact is its own."""
    from ansible.inventory.manager import InventoryManager
    from ansible.vars.manager import VariableManager

    (tmp_path / "hosts.yml").write_text(
        "all:\n  vars:\n    tf_name_again: '{{ inventory_hostname }}'\n"
        "  hosts:\n    w1: {}\n    w2: {}\n    w3: {}\n")
    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=[str(tmp_path / "hosts.yml")])
    variables = VariableManager(loader=loader, inventory=inventory)
    facts = {"tf_spec": {"workers": ["w1", "w2", "w3"]}}
    for host in ("w1", "w2", "w3"):
        variables.set_nonpersistent_facts(host, facts)
    variables.set_nonpersistent_facts("w3", {"tf_mine": "w3's"})
    hostvars = HostVars(inventory=inventory, variable_manager=variables, loader=loader)
    own = variables.get_vars(host=inventory.get_host("w1"), include_hostvars=False)
    views = host_views(hostvars, ["w2", "w3"], own, Templar(loader=loader).is_template,
                       lambda raw, host: HostVarsVars(raw, loader=loader, host=host))
    assert all(isinstance(view, HostVariables) for view in views.values())
    assert not any("tf_spec" in view for view in views.values())
    assert views["w2"]["tf_name_again"] == "w2" and views["w3"]["tf_name_again"] == "w3"
    assert views["w3"]["tf_mine"] == "w3's" and "tf_mine" not in views["w2"]


def _action(role: Path, variables: dict) -> dict:
    task = mock.MagicMock(args={}, async_val=0, check_mode=False, diff=False)
    templar = mock.MagicMock()
    templar.template.side_effect = lambda value: value
    templar.is_template.side_effect = _is_template
    instance = action.ActionModule(task, mock.MagicMock(), mock.MagicMock(), None, templar, None)
    return instance.work({"role_path": str(role), "entry_point": "deploy", "hosts": None, "problems": [],
                          "refusal": "Refused: ", "facts": {}, "later": []},
                         {"inventory_hostname": "w1", **variables})


def test_the_check_reads_a_value_set_once_on_its_own_host_alone_and_still_refuses_a_hosts_own(
        tmp_path: Path) -> None:
    role = tmp_path / "tf_x"
    (role / "meta").mkdir(parents=True)
    (role / "meta" / "argument_specs.yml").write_text(
        "argument_specs:\n  deploy:\n    options:\n"
        "      tf_x_spec: {type: dict}\n      tf_x_timeout: {type: int}\n")
    hosts = {f"w{index}": _Reads({"tf_x_spec": SPEC}) for index in range(2, 9)}
    hosts["w5"]["tf_x_timeout"] = "soon"
    result = _action(role, {"tf_x_spec": SPEC, "tf_x_timeout": 5, "ansible_play_hosts": ["w1", *hosts],
                            "hostvars": hosts})
    assert result["failed"] and "host w5: argument 'tf_x_timeout' is of type str" in result["msg"]
    assert [host.reads.get("tf_x_spec", 0) for host in hosts.values()] == [0] * 7
    # A host whose spec is its own (written in its inventory) is still read, and refused.
    hosts["w7"] = _Reads({"tf_x_spec": "not a mapping"})
    result = _action(role, {"tf_x_spec": SPEC, "tf_x_timeout": 5, "ansible_play_hosts": ["w1", *hosts],
                            "hostvars": hosts})
    assert "host w7: tf_x_spec must be a mapping" in result["msg"] and hosts["w7"].reads == {"tf_x_spec": 1}


def test_another_hosts_task_variables_need_ansibles_variable_manager_and_a_known_host(tmp_path: Path) -> None:
    from ansible.inventory.manager import InventoryManager
    from ansible.vars.manager import VariableManager
    from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_host_views import (
        HostVariablesError,
        task_variables,
    )

    with pytest.raises(HostVariablesError, match="no variable manager"):
        task_variables(object(), {}, ["w1"])
    (tmp_path / "hosts.ini").write_text("w1 tf_x=1\n")
    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=[str(tmp_path / "hosts.ini")])
    task = mock.MagicMock()
    task.get_variable_manager.return_value = VariableManager(loader=loader, inventory=inventory)
    task.get_play.return_value = None
    task._role = None
    task.get_include_params.return_value = {}
    with pytest.raises(HostVariablesError, match="host w9: not in the inventory"):
        task_variables(task, {}, ["w9"])
