"""The stdout callback tf_runbook: a failed task's message is printed once, as written,
with a command's evidence beside it; -v prints the default output; the project uses it."""

from __future__ import annotations

import configparser
import subprocess
import textwrap
from pathlib import Path

import helpers
from ansible_collections.tf_runbook.multiworker.plugins.callback.tf_runbook import failure_text

REPO = helpers.REPO


def test_the_message_is_one_fatal_line_and_its_own_lines_stay_lines() -> None:
    text = failure_text("w0", {"failed": True, "changed": False, "msg": "Refused: a\nb", "exception": "x",
                               "validate_args_context": {"name": "tf"}, "hosts": ["w0"]})
    assert text == "fatal: [w0]: FAILED! => Refused: a\nb"


def test_a_commands_evidence_follows_its_message_and_the_rest_waits_for_verbose() -> None:
    text = failure_text("w1", {"msg": "non-zero return code", "cmd": ["/usr/bin/pip", "install", "x"], "rc": 1,
                               "stdout": "", "stderr": "ERROR: no x\nsecond", "start": "2026-12-06", "delta": "0:01"})
    assert text == ("fatal: [w1]: FAILED! => non-zero return code\n  cmd: /usr/bin/pip install x\n  rc: 1\n"
                    "  stderr: ERROR: no x\n    second")
    assert failure_text("w1", {"failed": True, "rc": 2}) is None  # no message: the default output shows it whole


def test_the_project_prints_with_it() -> None:
    config = configparser.ConfigParser()
    config.read(REPO / "ansible.cfg")
    assert config["defaults"]["stdout_callback"] == "tf_runbook.multiworker.tf_runbook"


def _play(tmp_path: Path, *options: str) -> str:
    playbook = tmp_path / "play.yml"
    playbook.write_text(textwrap.dedent("""\
        - name: Fail as a refusal does
          hosts: localhost
          gather_facts: false
          tasks:
            - name: Refuse two values
              ansible.builtin.fail:
                msg: "Refused: host localhost: tf_a must be 1..9, got 'x'\\nhost localhost: tf_b is wrong"
    """))
    result = subprocess.run(helpers.playbook_argv(str(playbook), *options, inventory=REPO / "inventory" / "local"),
                            capture_output=True, text=True, timeout=120, env=helpers.playbook_env(), cwd=REPO)
    assert result.returncode == 2, result.stdout + result.stderr
    return result.stdout + result.stderr


def test_a_refusal_is_said_once_and_verbose_brings_back_ansibles_own_lines(tmp_path: Path) -> None:
    text = _play(tmp_path)
    assert text.count("tf_a must be 1..9") == 1 and "[ERROR]" not in text
    assert "fatal: [localhost]: FAILED! => Refused: host localhost: tf_a must be 1..9, got 'x'\n" \
           "host localhost: tf_b is wrong\n" in text
    verbose = _play(tmp_path, "-v")
    assert "[ERROR]" in verbose and verbose.count("tf_a must be 1..9") >= 2
