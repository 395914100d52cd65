"""The docs' own project (README step 5, docs/your-project.md "A minimal script"): the
plain Keras script and its group vars, taken from the Markdown blocks marked
``<!-- docs-project: ... -->``, are the same on both pages and train on localhost as the
pages say to try them (the smoke inventory, the vars given with ``-e @``), judged
``succeeded``. Only where the project lives and where the run writes are the test's own;
the interpreter is the shared one with tf_keras (the pages have the reader install it
into the controller's .venv)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from workerenv import shared_venv  # noqa: E402

import helpers

REPO = Path(__file__).resolve().parents[2]
PAGES = (REPO / "README.md", REPO / "docs" / "your-project.md")
MARKED = re.compile(r"^([ \t]*)<!-- docs-project: (\S+) -->\n\1```\w*\n(.*?)^\1```$", re.M | re.S)


def marked_blocks(page: Path) -> dict[str, str]:
    """Each marked block of ``page`` by its name, without the indentation of its list item."""
    blocks = {}
    for indent, name, body in MARKED.findall(page.read_text()):
        blocks[name] = "".join(line[len(indent):] if line.startswith(indent) else line
                               for line in body.splitlines(True))  # fmt: skip
    return blocks


def test_both_pages_give_the_same_script_and_group_vars() -> None:
    readme, guide = (marked_blocks(page) for page in PAGES)
    assert set(readme) == {"train.py", "group_vars/tf_workers.yml"}
    assert readme == guide
    compile(readme["train.py"], "train.py", "exec")
    assert "BackupAndRestore" in readme["train.py"] and "TF_RUNBOOK_CHECKPOINT_DIR" in readme["train.py"]
    assert yaml.safe_load(readme["group_vars/tf_workers.yml"])["tf_train_script"] == "train.py"


def test_the_docs_project_trains_on_localhost_and_succeeds(tmp_path: Path) -> None:
    blocks = marked_blocks(PAGES[0])
    project = tmp_path / "churn"
    project.mkdir()
    (project / "train.py").write_text(blocks["train.py"])
    churn = tmp_path / "churn.yml"
    churn.write_text(blocks["group_vars/tf_workers.yml"])
    place = {"tf_train_dir": str(project), "tf_runs_dir": str(tmp_path / "runs"),
             "tf_worker_base_dir": str(tmp_path / "host"), "tf_run_id": "docs-project",
             "tf_worker_python": str(shared_venv(("tf_keras==2.21.0",)))}  # fmt: skip
    # The place after the vars file: of two -e, the later wins.
    result = helpers.run_playbook("train.yml", "-i", str(REPO / "inventory" / "local"), "-e", f"@{churn}",
                                  "-e", json.dumps(place), timeout=900)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    run = tmp_path / "runs" / "docs-project"
    assert json.loads((run / "summary.json").read_text())["status"] == "succeeded"
    assert (run / "localhost" / "worker-0" / "model" / "model.keras").is_file()
    assert not (run / "localhost" / "worker-1" / "model").exists()
