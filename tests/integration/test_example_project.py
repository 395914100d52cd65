"""The example project (examples/keras_project/) trains on two namespace hosts and is judged.

The project is copied as a user would copy it, with its own inventory directory: the
namespace hosts' hosts.yml replaces the sample's, and the shipped group_vars/tf_workers.yml
is used as is (its tf_train_dir is the inventory's parent directory). Only the interpreter
differs from the sample: the hosts' shared virtualenv with tf_keras (tf_worker_python), so
that no virtualenv is built per host. The wait prints the job's Keras epoch headers as its
progress, the verdict reads Keras' epoch lines and passes, and the chief's model comes back
and loads with tf_keras, while the other worker's temporary copy is gone.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Callable

import pytest
import yaml

from nshosts import NamespaceHosts
from test_multihost import Runbook
from workerenv import shared_venv

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "keras_project"
# The same pins as the example's tf_worker_requirements (checked below).
KERAS_PINS = ("tf_keras==2.21.0",)


@pytest.fixture(scope="session")
def keras_python() -> str:
    """The worker pins plus tf_keras, in a virtualenv of their own (built once, cached)."""
    return str(shared_venv(KERAS_PINS))


def copy_example(root: Path) -> Path:
    """The example as a user copies it (without compiled files)."""
    return Path(shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")))


def test_the_example_group_vars_pin_what_the_test_hosts_have() -> None:
    group_vars = yaml.safe_load((EXAMPLE / "inventory" / "group_vars" / "tf_workers.yml").read_text())
    defaults = yaml.safe_load((REPO / "roles" / "tf_worker" / "defaults" / "main.yml").read_text())
    assert group_vars["tf_worker_requirements"] == [*defaults["tf_worker_requirements"], *KERAS_PINS]
    assert group_vars["tf_worker_env"] == {"TF_USE_LEGACY_KERAS": "1"}
    assert "tf_worker_python" not in group_vars  # the managed virtualenv is the default


def test_the_example_project_trains_on_two_hosts_and_is_judged(
    make_ns_hosts: Callable[..., NamespaceHosts], tmp_path: Path, keras_python: str
) -> None:
    hosts = make_ns_hosts(count=2)
    project = copy_example(tmp_path / "keras_project")
    book = Runbook(hosts, project, port=2500, groupvars={"tf_worker_python": keras_python})
    assert book.inventory == project / "inventory" / "hosts.yml"

    result = book.play("train.yml", extra={"tf_run_id": "example"})
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]

    # The wait showed each worker's progress from its Keras epoch lines (its header before
    # the first epoch ended, then the epoch N of M, issue 39): 4 epochs, as the project's
    # configs/train.json says (found relative to the package, not the cwd).
    for name, index in (("node0", 0), ("node1", 1)):
        shown = re.findall(rf"\] {name} worker-{index}: (?:running|finished)  (Epoch \d+/\d+|epoch \d+ of \d+)", result.stdout)
        expected = {f"Epoch {n}/4" for n in range(1, 5)} | {f"epoch {n} of 4" for n in range(1, 5)}
        assert "epoch 4 of 4" in shown and set(shown) <= expected, result.stdout[-4000:]

    summary = book.summary("example")
    checks = {c["name"]: c for c in summary["checks"]}
    assert summary["status"] == "succeeded", checks
    assert summary["job_output"] == {"contract_lines": False, "metrics_from": "keras"}
    assert sorted(summary["metrics"]) == ["1", "2", "3", "4"]
    assert checks["metrics_agree"]["detail"] == "4 epoch(s), identical on every worker (Keras epoch lines)"
    assert checks["epochs_complete"]["detail"] == "every worker printed epoch 4 of 4"
    assert checks["chief_marker"]["ok"] is True
    assert [w["cause"]["kind"] for w in summary["workers"]] == ["completed", "completed"]

    # The job directory on a host: the project, without its inventory.
    rc, out, _ = hosts.run(1, "cd ~/tf-runbook/runs/example/job && find . -type f -not -path '*/__pycache__/*' | sort")
    assert rc == 0
    shipped = [p for p in out.split() if not Path(p).name.startswith("tf_")]
    assert shipped == [
        "./README.md", "./configs/train.json", "./keras_example/__init__.py", "./keras_example/config.py",
        "./keras_example/data.py", "./keras_example/model.py", "./keras_example/saving.py", "./train.py",
    ]

    # Multi-worker saving: the chief's model came back; the other worker saved to a
    # temporary directory and deleted it.
    chief_model = book.runs / "example" / "node0" / "worker-0" / "model" / "model.keras"
    assert chief_model.is_file()
    assert not (book.runs / "example" / "node1" / "worker-1" / "model").exists()
    rc, out, _ = hosts.run(1, "find ~/tf-runbook/runs/example /tmp -name 'model.keras' -o -name 'workertemp_*'")
    assert rc == 0 and out.split() == [], out

    # The model loads where it was made to load: tf_keras (TF_USE_LEGACY_KERAS=1).
    loaded = subprocess.run(
        [keras_python, "-c",
         "import sys, numpy as np, tensorflow as tf\n"
         "model = tf.keras.models.load_model(sys.argv[1])\n"
         "print('predicted', model.predict(np.zeros((3, 8), 'float32'), verbose=0).shape)",
         str(chief_model)],
        capture_output=True, text=True, timeout=300, check=False,
        env=dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="3"),
    )  # fmt: skip
    assert "predicted (3, 2)" in loaded.stdout, loaded.stderr[-3000:]
