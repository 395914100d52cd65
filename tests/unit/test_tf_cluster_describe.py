"""The cluster spec computed in one task for the play (the tf_cluster_describe action,
issue 42): every host described from its variables as a task on that host sees them."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleError

from ansible_collections.tf_runbook.multiworker.plugins.action import tf_cluster_describe as action

import helpers

GROUPS = {"tf_chief": ["c0"], "tf_workers": ["w1", "w2"], "tf_ps": ["p3"], "tf_evaluator": ["e4"],
          "tf_spares": ["s5"], "all": ["c0", "w1", "w2", "p3", "e4", "s5", "x6"]}
NAMES = {"tf_chief_group": "tf_chief", "tf_workers_group": "tf_workers", "tf_ps_group": "tf_ps",
         "tf_evaluator_group": "tf_evaluator"}


def _value(**more: object):
    variables = {**NAMES, "tf_worker_address": "10.0.0.1", "tf_worker_port": 2222, "tf_worker_slots": 1, **more}
    return variables.__getitem__


@pytest.mark.parametrize(("host", "kind", "spare"), [
    ("c0", "chief", False), ("w1", "worker", False), ("p3", "ps", False), ("e4", "evaluator", False),
    # A spare's group is none of the cluster's; a host of no group at all is one too.
    ("s5", "worker", True), ("x6", "worker", True),
])
def test_a_hosts_type_and_spare_come_from_its_groups(host: str, kind: str, spare: bool) -> None:
    entry = action.host_entry(host, _value(), GROUPS)
    assert entry == {"host": host, "address": "10.0.0.1", "port": 2222, "slots": 1, "type": kind, "spare": spare}


def test_the_group_names_are_the_hosts_own_values() -> None:
    """tf_workers_group named otherwise: its hosts are workers, the default group's are spares."""
    renamed, groups = _value(tf_workers_group="trainers"), {**GROUPS, "trainers": ["s5"]}
    assert action.host_entry("s5", renamed, groups)["spare"] is False
    assert action.host_entry("w1", renamed, groups)["spare"] is True


def test_a_variable_that_is_not_set_is_named() -> None:
    reader = action.templated({"tf_worker_port": 1}, None)
    with pytest.raises(AnsibleError, match="tf_worker_address is not set"):
        reader("tf_worker_address")


def test_the_cluster_role_runs_no_task_on_every_host() -> None:
    """What each host offers is read by the run-once describe, not a task per host (a
    worker process each)."""
    tasks = yaml.safe_load((helpers.REPO / "roles" / "tf_cluster" / "tasks" / "main.yml").read_text())
    assert [task["name"] for task in tasks if task.get("run_once") is not True] == []
    assert any("tf_runbook.multiworker.tf_cluster_describe" in task for task in tasks)


def _run(tmp_path: Path, inventory: str, play_vars: dict | None = None, pre: list | None = None) -> tuple[int, str]:
    role = tmp_path / "roles" / "described"
    (role / "defaults").mkdir(parents=True)
    (role / "tasks").mkdir()
    (role / "defaults" / "main.yml").write_text(yaml.safe_dump({
        **NAMES, "tf_spares_group": "tf_spares", "tf_worker_port": 2222, "tf_worker_slots": 1,
        "tf_worker_address": "{{ ansible_host | default(inventory_hostname) }}"}))
    (role / "tasks" / "main.yml").write_text(yaml.safe_dump([
        *(pre or []),
        {"name": "Compute the cluster spec once for every host",
         "tf_runbook.multiworker.tf_cluster_describe": {
             "hosts": "{{ (groups[tf_chief_group] | default([]) + groups[tf_workers_group] | default([])"
                      " + groups[tf_spares_group] | default([])) | select('in', ansible_play_hosts_all) | list }}",
             "resolve": False},
         "run_once": True},
        {"name": "Write the spec", "ansible.builtin.copy": {"content": "{{ tf_cluster_spec | to_json }}",
                                                            "dest": str(tmp_path / "spec.json"), "mode": "0600"},
         "run_once": True},
        {"name": "Show that every host holds it", "ansible.builtin.debug": {
            "msg": "HOLDS {{ inventory_hostname }} {{ tf_cluster_spec.checksum | length > 0 }}"}},
    ]))
    (tmp_path / "hosts.ini").write_text(inventory)
    play = tmp_path / "play.yml"
    play.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "vars": play_vars or {},
                                     "roles": ["described"]}]))
    env = helpers.playbook_env(ANSIBLE_STDOUT_CALLBACK="default", ANSIBLE_ROLES_PATH=str(tmp_path / "roles"))
    result = subprocess.run([str(helpers.PLAYBOOK_BIN), "-i", str(tmp_path / "hosts.ini"), str(play)],
                            cwd=helpers.REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    return result.returncode, result.stdout + result.stderr


INVENTORY = (
    "[tf_chief]\nc0 ansible_host=10.0.0.10\n"
    "[tf_workers]\nw1 ansible_host=10.0.0.11 tf_worker_slots=5\nw2 ansible_host=10.0.0.12 port_offset=7\n"
    "[tf_spares]\ns3 ansible_host=10.0.0.13\n"
    "[all:vars]\nansible_connection=local\nansible_python_interpreter=" + sys.executable + "\n"
    "tf_worker_port='{{ 3000 + (port_offset | default(0) | int) }}'\n"
)


def test_each_host_is_described_as_its_own_task_would_see_it(tmp_path: Path) -> None:
    """Role defaults templated per host (the address), an inventory template per host (the
    port), a play variable over the inventory (slots: 2, not w1's 5), a host's set_fact over
    the play's (w2: 3, and the chief's 1: a chief runs one task); the chief first, the spare last and without index; set on every host."""
    code, out = _run(tmp_path, INVENTORY, play_vars={"tf_worker_slots": 2},
                     pre=[{"name": "Set a fact on w2 and on the chief (one task)",
                           "ansible.builtin.set_fact": {"tf_worker_slots": "{{ 3 if inventory_hostname == 'w2' else 1 }}"},
                           "when": "inventory_hostname in ['w2', 'c0']"}])
    assert code == 0, out[-3000:]
    spec = json.loads((tmp_path / "spec.json").read_text())
    workers = {(worker["host"], worker["index"]): worker for worker in spec["workers"]}
    assert [worker["host"] for worker in spec["workers"]][:1] == ["c0"]
    assert {host for host, _index in workers} == {"c0", "w1", "w2"}
    assert sum(1 for host, _index in workers if host == "w1") == 2
    assert sum(1 for host, _index in workers if host == "w2") == 3
    ports = {worker["host"]: worker["port"] for worker in spec["workers"] if worker["slot"] == 0}
    assert ports == {"c0": 3000, "w1": 3000, "w2": 3007}
    addresses = {worker["host"]: worker["address"] for worker in spec["workers"]}
    assert addresses == {"c0": "10.0.0.10", "w1": "10.0.0.11", "w2": "10.0.0.12"}
    assert [spare["host"] for spare in spec["spares"]] == ["s3"]
    assert set(re.findall(r"HOLDS (\w+) True", out)) == {"c0", "w1", "w2", "s3"}


def test_hosts_that_cannot_be_described_are_refused_by_name_all_at_once(tmp_path: Path) -> None:
    code, out = _run(tmp_path, INVENTORY.replace("w2 ansible_host=10.0.0.12", "w2 tf_worker_address='{{ nowhere }}'")
                     .replace("c0 ansible_host=10.0.0.10", "c0 tf_worker_address='{{ nothing_here }}'"))
    assert code != 0
    assert "Cannot describe the workers of every host" in out, out[-3000:]
    assert re.search(r"host c0: .*nothing_here", out) and re.search(r"host w2: .*nowhere", out), out[-3000:]


def test_a_host_in_two_groups_is_refused_as_listed_twice(tmp_path: Path) -> None:
    code, out = _run(tmp_path, INVENTORY.replace("[tf_spares]\ns3", "[tf_spares]\nw1"))
    assert code != 0 and "host w1: listed twice" in out, out[-3000:]
