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

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Callable

import pytest
import yaml

from helpers import free_port, kill_quietly
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
        "./keras_example/data.py", "./keras_example/model.py", "./keras_example/resume.py", "./keras_example/saving.py",
        "./train.py",
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


# Runs the example's train.py with stdout replaced: the process ends, exit status 9, instead
# of writing its DIE_AT_LINE-th Keras epoch line ("5/5 - 0s - loss: ..."), after every
# collective of that epoch, as a SIGKILL landing there would.
DYING_WRAPPER = """
import os, re, runpy, sys
class Dying:
    def __init__(self, real, nth):
        self.real, self.nth, self.seen = real, nth, 0
    def write(self, text):
        if re.match(r"\\s*\\d+/\\d+ - ", text):
            self.seen += 1
            if self.seen == self.nth:
                self.real.flush()
                os._exit(9)
        return self.real.write(text)
    def __getattr__(self, name):
        return getattr(self.real, name)
sys.stdout = Dying(sys.stdout, int(os.environ["DIE_AT_LINE"]))
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(sys.argv[0]))
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def chief_backed_up(backup_dir: Path) -> int:
    """How many epochs the chief's BackupAndRestore saved in a fresh run: the number of
    its checkpoint manager's latest checkpoint (ckpt-N, one save an epoch)."""
    found = [m for f in backup_dir.rglob("checkpoint")
             for m in re.findall(r'^model_checkpoint_path: "ckpt-(\d+)"', f.read_text(), re.M)]  # fmt: skip
    return max((int(n) for n in found), default=0)


def test_the_example_backs_up_no_epoch_before_every_worker_printed_it(tmp_path: Path, keras_python: str) -> None:
    """Worker 1 ends after epoch 2's last collective, before its epoch line: the chief printed
    epoch 2 but never backs it up (keras_example/resume.py), so a restart resumes after epoch
    1, which both printed, and not after an epoch the verdict would refuse."""
    ports = [free_port(), free_port()]
    wrapper = tmp_path / "dying.py"
    wrapper.write_text(DYING_WRAPPER, encoding="utf-8")
    procs, outs, backups = [], [], []
    for index in (0, 1):
        wdir = tmp_path / f"worker-{index}"
        wdir.mkdir()
        backups.append(wdir / "backup")
        outs.append(wdir / "worker.log")
        env = dict(
            os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="3", TF_RUNBOOK_CHECKPOINT_DIR=str(backups[-1]),
            DIE_AT_LINE="2" if index else "0",
            TF_CONFIG=json.dumps({"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                                  "task": {"type": "worker", "index": index}}),
        )  # fmt: skip
        with open(outs[-1], "wb") as out:
            procs.append(subprocess.Popen([keras_python, str(wrapper), str(EXAMPLE / "train.py")], cwd=wdir, env=env,
                                          stdout=out, stderr=subprocess.STDOUT))  # fmt: skip
    try:
        assert procs[1].wait(timeout=300) == 9, outs[1].read_text(errors="replace")[-3000:]
        assert len(re.findall(r"^\d+/\d+ - ", outs[1].read_text(errors="replace"), re.M)) == 1
        # The chief printed epoch 2's line, with worker 1 through the epoch's collectives...
        deadline = time.monotonic() + 60
        while len(re.findall(r"^\d+/\d+ - ", outs[0].read_text(errors="replace"), re.M)) < 2:
            assert time.monotonic() < deadline, outs[0].read_text(errors="replace")[-3000:]
            time.sleep(0.2)
        # ...and, however long it is left, never backs it up: it waits for worker 1.
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and procs[0].poll() is None:
            assert chief_backed_up(backups[0]) < 2
            time.sleep(0.2)
        assert chief_backed_up(backups[0]) == 1, outs[0].read_text(errors="replace")[-3000:]
    finally:
        for proc in procs:
            kill_quietly(proc.pid)
            proc.wait()
