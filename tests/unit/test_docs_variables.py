"""The variable tables of docs/variables.md are generated (``make docs``, issue 25): the
committed file is what ``tests/docs/docs_variables.py`` writes from the roles' defaults and
argument specs, and the generator shows every value, type, choice and description."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "docs"))

import docs_variables  # noqa: E402


def test_the_committed_tables_are_fresh() -> None:
    text = docs_variables.VARIABLES_MD.read_text(encoding="utf-8")
    assert docs_variables.render(text) == text, "docs/variables.md is stale: run `make docs`"


def test_the_check_of_make_docs_fails_on_a_stale_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stale = tmp_path / "variables.md"
    text = docs_variables.VARIABLES_MD.read_text(encoding="utf-8")
    stale.write_text(text.replace("| `tf_worker_port` | `2222` |", "| `tf_worker_port` | `2223` |"), encoding="utf-8")
    monkeypatch.setattr(docs_variables, "VARIABLES_MD", stale)
    monkeypatch.setattr(docs_variables, "REPO", tmp_path)
    assert docs_variables.main(["--check"]) == 1
    assert docs_variables.main([]) == 0
    assert stale.read_text(encoding="utf-8") == text
    assert docs_variables.main(["--check"]) == 0


def test_make_docs_check_runs_as_a_script() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "tests" / "docs" / "docs_variables.py"), "--check"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_every_role_has_one_block_and_no_block_is_left_over() -> None:
    text = "<!-- BEGIN generated: role tf (make docs) -->\n<!-- END generated: role tf -->\n"
    with pytest.raises(ValueError, match=r"no block for role tf_wait"):
        docs_variables.render(text)
    full = "".join(
        f"<!-- BEGIN generated: role {r} (make docs) -->\n<!-- END generated: role {r} -->\n"
        for r in docs_variables.role_names()
    )
    docs_variables.render(full)
    with pytest.raises(ValueError, match=r"two blocks for role tf"):
        docs_variables.render(full + text)
    with pytest.raises(ValueError, match=r"block of tf_nothing, which is no role"):
        docs_variables.render(full.replace("role tf_cluster", "role tf_nothing"))


@pytest.mark.parametrize(
    ("value", "cell"),
    [
        (2222, "`2222`"),
        (True, "`true`"),
        ("", '`""`'),
        ([], "`[]`"),
        (["a", "*.pyc"], "`a`, `*.pyc`"),
        ({}, "`{}`"),
        ({"A": "1"}, '`{"A": "1"}`'),
        ("a|b", "`a\\|b`"),
        ("{{ ansible_host | default(inventory_hostname) }}", "`ansible_host` (templated)"),
        ("{{ role_path | dirname | dirname }}/files/multiworker_train.py", "`files/multiworker_train.py` (templated)"),
        ("{{ playbook_dir | dirname }}/runs", "`runs/` (templated)"),
    ],
)
def test_default_cells(value: Any, cell: str) -> None:
    assert docs_variables.default_cell(value) == cell


def test_meaning_cells_show_type_description_and_choices() -> None:
    option = {"type": "list", "elements": "str", "choices": ["a", "b"], "description": ["Two", "lines | here."]}
    assert docs_variables.meaning_cell(option) == "(`list of str`) Two lines \\| here. One or more of `a`, `b`."
    assert docs_variables.meaning_cell({"type": "int", "choices": [1, 2]}) == "(`int`) One of `1`, `2`."


def test_each_public_default_is_shown_with_its_specs_description() -> None:
    block = docs_variables.role_block("tf_stop")
    options = docs_variables.role_options("tf_stop")
    for name, value in docs_variables.role_defaults("tf_stop").items():
        said = options[name]["description"]
        description = " ".join(" ".join(said if isinstance(said, list) else [said]).split())
        row = f"| `{name}` | {docs_variables.default_cell(value)} | (`{options[name]['type']}`) "
        assert row in block
        assert description.rstrip(".")[:40] in block


def test_internal_defaults_and_required_inputs_get_tables_of_their_own() -> None:
    tf_block = docs_variables.role_block("tf")
    assert "| set by the runbook | default | what |\n|---|---|---|\n| `tf_run_attempt` | `0` |" in tf_block
    assert "| `tf_run_attempt` | `0` | (" not in tf_block
    wait_block = docs_variables.role_block("tf_wait")
    assert "| input | type | meaning |" in wait_block
    assert "| `tf_logs_lines` | `int`, required | How many" in wait_block
