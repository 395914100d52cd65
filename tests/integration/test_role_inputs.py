"""Roles that act once for the whole run check their inputs once, through an explicit
entry point of their argument spec instead of Ansible's automatic check of `main` on
every host: the check must still refuse a bad value, naming it."""

from __future__ import annotations

from pathlib import Path

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
