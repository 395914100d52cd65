"""The runbook used from another project, as the collection tf_runbook.multiworker.

The clone is built with `ansible-galaxy collection build`, installed with `ansible-galaxy
collection install -p` into a temporary directory, and used from a temporary project that
is not the clone (its own ansible.cfg naming only that directory, its own inventory):

- a project playbook that names the collection's roles by their full names
  (`tf_runbook.multiworker.tf_cluster`, `tf_runbook.multiworker.tf_preflight`) checks the
  cluster with the default job: the roles, their dependency `tf`, their plugins and the
  files the collection ships (files/multiworker_train.py) resolve from the installed copy;
- `ansible-playbook tf_runbook.multiworker.train` trains two workers on localhost with a
  trivial job, and the verdict lands in the project's runs/<run_id>/summary.json, never in
  the installed collection.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import tarfile
from pathlib import Path

import helpers

# The trivial job of the benchmarks (tests/bench/bench.py): prints the metrics contract
# and exits at once, so that this test measures the runbook, not TensorFlow.
_BENCH = importlib.util.spec_from_file_location("bench", helpers.REPO / "tests" / "bench" / "bench.py")
assert _BENCH is not None and _BENCH.loader is not None
bench = importlib.util.module_from_spec(_BENCH)
_BENCH.loader.exec_module(bench)

COLLECTION = ("tf_runbook", "multiworker")
# Worker ports of this test's two slots: no other test uses them.
PORT = 2570
# What a user of the collection does not need: galaxy.yml's build_ignore leaves it out.
LEFT_OUT = ("tests/", "molecule/", "runs/", "collections/", ".venv/", ".cache/", "docs/", "Makefile")

CHECK_PLAYBOOK = """\
---
- name: Check the cluster with the collection's roles, by their full names
  hosts: tf_workers
  gather_facts: false
  roles:
    - role: tf_runbook.multiworker.tf_cluster
    - role: tf_runbook.multiworker.tf_preflight
  tasks:
    - name: Show what the roles computed
      ansible.builtin.debug:
        msg: "cluster size {{ tf_cluster_spec.size }}"
"""


def _env(project: Path) -> dict[str, str]:
    """The project's own settings: its ansible.cfg, nothing of the clone's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    return {**env, "ANSIBLE_CONFIG": str(project / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}


def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def _project(tmp: Path, collections: Path) -> Path:
    project = tmp / "project"
    (project / "inventory").mkdir(parents=True)
    (project / "ansible.cfg").write_text(
        f"[defaults]\ncollections_path = {collections}\ngathering = explicit\n"
        "interpreter_python = auto_silent\nretry_files_enabled = false\n"
    )
    (project / "job.py").write_text(bench.TRIVIAL_JOB)
    host = {
        "ansible_connection": "local",
        "ansible_host": "127.0.0.1",
        "ansible_python_interpreter": "{{ ansible_playbook_python }}",
        "tf_worker_slots": 2,
        "tf_worker_port": PORT,
        "tf_worker_python": "/usr/bin/python3",
        "tf_worker_base_dir": str(tmp / "host"),
        "tf_startup_timeout": 0,
    }
    inventory = {"all": {"children": {"tf_workers": {"hosts": {"localhost": host}}}}}
    (project / "inventory" / "hosts.yml").write_text(json.dumps(inventory, indent=2))
    (project / "check.yml").write_text(CHECK_PLAYBOOK)
    return project


def test_collection_installed_elsewhere_trains_from_another_project(tmp_path: Path) -> None:
    built = tmp_path / "build"
    build = _run(
        [str(helpers.PLAYBOOK_BIN.with_name("ansible-galaxy")), "collection", "build", "--output-path", str(built)],
        cwd=helpers.REPO,
        env=helpers.playbook_env(),
    )
    assert build.returncode == 0, build.stdout + build.stderr
    (tarball,) = built.glob("tf_runbook-multiworker-*.tar.gz")
    with tarfile.open(tarball) as archive:
        names = archive.getnames()
    assert "playbooks/train.yml" in names and "files/multiworker_train.py" in names, names
    assert not [n for n in names if n.startswith(LEFT_OUT) or "/molecule/" in n], names

    collections = tmp_path / "collections"
    project = _project(tmp_path, collections)
    env = _env(project)
    install = _run(
        [str(helpers.PLAYBOOK_BIN.with_name("ansible-galaxy")), "collection", "install", str(tarball),
         "-p", str(collections)],
        cwd=project,
        env=env,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    installed = collections.joinpath("ansible_collections", *COLLECTION)
    assert (installed / "playbooks" / "train.yml").is_file(), install.stdout

    # The collection's roles by their full names, with the default job the collection ships
    # (the preflight refuses a tf_train_script it cannot read).
    check = _run(helpers.playbook_argv("check.yml", inventory=project / "inventory" / "hosts.yml",
                                       extra={"tf_run_id": "check"}), cwd=project, env=env)
    assert check.returncode == 0, check.stdout[-4000:] + check.stderr[-2000:]
    assert "cluster size 2" in check.stdout, check.stdout[-3000:]

    # The collection's playbook by its full name, results in the project.
    train = _run(
        helpers.playbook_argv(
            "tf_runbook.multiworker.train",
            inventory=project / "inventory" / "hosts.yml",
            extra={"tf_run_id": "coll", "tf_train_script": str(project / "job.py")},
        ),
        cwd=project,
        env=env,
    )
    assert train.returncode == 0, train.stdout[-4000:] + train.stderr[-2000:]
    summary = project / "runs" / "coll" / "summary.json"
    assert summary.is_file(), f"no {summary}: " + train.stdout[-3000:]
    assert json.loads(summary.read_text())["status"] == "succeeded"
    assert (project / "runs" / "coll" / "report.html").is_file()
    assert not (installed / "runs").exists(), "a run wrote into the installed collection"
