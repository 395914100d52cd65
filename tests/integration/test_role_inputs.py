"""Roles that act once for the whole run check their inputs once, through an explicit
entry point of their argument spec instead of Ansible's automatic check of `main` on
every host: the check must still refuse a bad value, naming it."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from helpers import run_playbook

PLAY = """\
- name: Apply one role to this machine
  hosts: all
  gather_facts: false
  roles:
    - role: {role}
"""


def test_tf_verdict_refuses_an_input_of_the_wrong_type(tmp_path: Path) -> None:
    play = tmp_path / "play.yml"
    play.write_text(PLAY.format(role="tf_verdict"))
    result = run_playbook(
        str(play), "-i", "localhost,", "-c", "local",
        extra={"tf_run_id": "20261203T000000Z-abcdef", "tf_verdict_report": "maybe", "tf_runs_dir": str(tmp_path)},
    )  # fmt: skip
    assert result.returncode != 0, result.stdout[-3000:]
    assert "Check the inputs of role tf_verdict once for the play" in result.stdout
    assert "Validation of arguments failed" in result.stdout
    assert "argument 'tf_verdict_report' is of type str and we were unable to convert to bool" in result.stdout
    # Refused before judging anything: no summary was written.
    assert not list(tmp_path.rglob("summary.json"))


INVENTORY = """\
[tf_workers]
w1 ansible_connection=local ansible_python_interpreter={python}
w2 ansible_connection=local ansible_python_interpreter={python} {bad}
"""

ENTER = """\
- name: Enter one role through one of its tasks files
  hosts: tf_workers
  gather_facts: false
  tasks:
    - name: Enter the role
      ansible.builtin.include_role:
        name: {role}
        tasks_from: {tasks_from}
"""


# Every role checks its inputs for all hosts in one task on the first host (issue 13): a
# bad host variable of the second host must still be refused, naming that host and the
# value, before the role does anything. (Bad integers are refused earlier, by the tf
# role's range check.)
@pytest.mark.parametrize(("role", "tasks_from", "bad", "message"), [
    ("tf_preflight", "main", "tf_preflight_reach_check=maybe",
     "host w2: argument 'tf_preflight_reach_check' is of type str and we were unable to convert to bool"),
    ("tf_verdict", "main", "tf_verdict_report=perhaps",
     "host w2: argument 'tf_verdict_report' is of type str and we were unable to convert to bool"),
    ("tf_firewall", "remove", "tf_firewall_enabled=maybe",
     "host w2: argument 'tf_firewall_enabled' is of type str and we were unable to convert to bool"),
])  # fmt: skip
def test_a_bad_host_variable_of_another_host_is_refused_naming_it(
        tmp_path: Path, role: str, tasks_from: str, bad: str, message: str) -> None:
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(INVENTORY.format(python=sys.executable, bad=bad))
    play = tmp_path / "play.yml"
    play.write_text(ENTER.format(role=role, tasks_from=tasks_from))
    result = run_playbook(str(play), "-i", str(inventory),
                          extra={"tf_run_id": "20261203T000000Z-abcdef", "tf_runs_dir": str(tmp_path)})
    assert result.returncode != 0, result.stdout[-3000:]
    check = next(line for line in result.stdout.splitlines() if line.startswith(f"TASK [{role} : Check the inputs of role"))
    assert "Validation of arguments failed" in result.stdout
    assert message in result.stdout, result.stdout[-3000:]
    assert "host w1:" not in result.stdout
    # The check is the role's first task and it failed for the whole play: nothing after it ran.
    tasks = re.findall(r"^TASK \[([^\]]+)\]", result.stdout, flags=re.M)
    assert f"TASK [{tasks[-1]}]" == check.split("]")[0] + "]", tasks
