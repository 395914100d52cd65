"""A real project through the runbook: a directory with its own package and config, a
worker environment with a secret from Ansible Vault, GPUs per slot, the model back.

Two namespace hosts with two slots each, each host showing four GPUs through the listing
the preflight's probe reads (nshosts.show_gpus). The secret's value is checked on every
side the issue names: the job saw it, while no process listing, no file others can read,
nothing under runs/ and no playbook output (also with -v) holds it.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Callable

import helpers
from nshosts import NamespaceHosts
from test_multihost import Runbook

REPO = Path(__file__).resolve().parents[2]
VAULT_BIN = Path(sys.executable).with_name("ansible-vault")

TRAIN = '''\
"""Entry script of a user's project: imports its own package, reads its own config."""
import hashlib
import os
import sys

from mypkg.settings import load_config

config = load_config()
marker = os.environ.get("PROJECT_MARKER", "")
print(f"project_config epochs={config['epochs']} marker_sha256={hashlib.sha256(marker.encode()).hexdigest()}", flush=True)
print(f"visible_devices={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}", flush=True)

from mypkg import trainer  # noqa: E402  (the default job, as a module of the package)

sys.exit(trainer.main([
    "--epochs", str(config["epochs"]), "--steps-per-epoch", str(config["steps"]),
    "--model-dir", "model", "--tensorboard-dir", "tensorboard",
]))
'''

SETTINGS = '''\
import json
from pathlib import Path

def load_config():
    return json.loads((Path(__file__).resolve().parent.parent / "configs" / "train.json").read_text())
'''


def make_project(root: Path) -> Path:
    (root / "mypkg").mkdir(parents=True)
    (root / "configs").mkdir()
    (root / "train.py").write_text(TRAIN)
    (root / "mypkg" / "__init__.py").write_text("")
    (root / "mypkg" / "settings.py").write_text(SETTINGS)
    (root / "mypkg" / "trainer.py").write_text((REPO / "files" / "multiworker_train.py").read_text())
    (root / "configs" / "train.json").write_text(json.dumps({"epochs": 2, "steps": 3}))
    # Left out by the default tf_train_dir_exclude: never sent.
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    return root


def vaulted_env(inventory_dir: Path, marker: str, password_file: Path) -> None:
    """tf_worker_env in group_vars, encrypted with Ansible Vault."""
    group_vars = inventory_dir / "group_vars"
    group_vars.mkdir(exist_ok=True)
    secret = group_vars / "tf_workers.yml"
    secret.write_text(f"tf_worker_env:\n  PROJECT_MARKER: {marker}\n  TF_CPP_MIN_LOG_LEVEL: '2'\n")
    password_file.write_text(uuid.uuid4().hex + "\n")
    subprocess.run(
        [str(VAULT_BIN), "encrypt", "--vault-password-file", str(password_file), str(secret)],
        check=True, capture_output=True, text=True,
    )
    assert marker not in secret.read_text()


def watch_processes(hosts: NamespaceHosts, stop: threading.Event, seen: list[str]) -> None:
    """Every host's full process listing (ps -ef, wide), again and again, until ``stop``."""
    while not stop.is_set():
        for host in range(len(hosts)):
            try:
                _, out, _ = hosts.run(host, "ps -eo pid,args --width 100000", timeout=10)
            except (OSError, TimeoutError, EOFError):
                continue
            seen.append(out)
        time.sleep(0.5)


def test_a_project_directory_trains_with_its_env_and_gpus_and_brings_the_model_back(
    make_ns_hosts: Callable[..., NamespaceHosts], tmp_path: Path, worker_python: str
) -> None:
    hosts = make_ns_hosts(count=2)
    for host in range(2):
        hosts.show_gpus(host, 4)
    marker = f"marker-{uuid.uuid4().hex}"
    project = make_project(tmp_path / "project")
    book = Runbook(
        hosts, tmp_path, slots=2, port=2300,
        groupvars={
            "tf_worker_python": worker_python,
            "tf_train_dir": str(project),
            "tf_train_script": "train.py",
            "tf_collect_artifacts": ["model", "tensorboard"],
            # The GPUs are a listing only: the CPU TensorFlow that trains here sees none.
            "tf_worker_gpu_check": False,
        },
    )
    password = tmp_path / "vault-password"
    vaulted_env(book.inventory.parent, marker, password)
    vault = ("--vault-password-file", str(password))

    stop, listings = threading.Event(), []
    watcher = threading.Thread(target=watch_processes, args=(hosts, stop, listings), daemon=True)
    watcher.start()
    try:
        result = book.play("train.yml", "-v", *vault, extra={"tf_run_id": "project"})
    finally:
        stop.set()
        watcher.join(30)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    summary = book.summary("project")
    assert summary["status"] == "succeeded", summary["checks"]

    # Each worker had its own GPUs, disjoint on its host, and summary.json says which.
    assert summary["context"]["devices"] == {"0": "0,1", "1": "2,3", "2": "0,1", "3": "2,3"}
    marker_sha = hashlib.sha256(marker.encode()).hexdigest()
    for worker in summary["workers"]:
        log = Path(worker["log"]).read_text()
        slot = worker["index"] % 2
        assert f"visible_devices={'0,1' if slot == 0 else '2,3'}" in log, log[-2000:]
        # The job imported its package, read its config and saw the secret.
        assert f"project_config epochs=2 marker_sha256={marker_sha}" in log, log[-2000:]

    # The secret: in no process listing (taken while the workers ran), in no file others
    # can read on a host, nowhere under runs/, in no playbook output (this one was -v).
    assert any("tf_supervisor.py" in listing and "train.py" in listing for listing in listings)
    assert not [listing for listing in listings if marker in listing]
    for host in range(2):
        rc, out, _ = hosts.run(host, f"grep -rlF {marker} ~ /tmp 2>/dev/null; true")
        holders = out.split()
        assert sorted(Path(p).name for p in holders) == ["job_env.json", "job_env.json"], holders
        for path in holders:
            rc, mode, _ = hosts.run(host, f"stat -c %a {path}")
            assert mode.strip() == "600", (path, mode)
    under_runs = [p for p in book.runs.rglob("*") if p.is_file() and marker.encode() in p.read_bytes()]
    assert under_runs == []
    assert marker not in output

    # The chief's model and TensorBoard logs came back; the others' were thrown away.
    chief = book.runs / "project" / "node0" / "worker-0"
    assert list((chief / "tensorboard").glob("events.out.tfevents.*"))
    for other in ("node0/worker-1", "node1/worker-2", "node1/worker-3"):
        assert not (book.runs / "project" / other / "model").exists()
    for host in range(2):
        rc, out, _ = hosts.run(host, "find ~/tf-runbook/runs/project /tmp -name 'model.keras'")
        assert out.split() == (["/home/tfrunner/tf-runbook/runs/project/worker-0/model/model.keras"] if host == 0 else [])
    predicted = subprocess.run(
        [sys.executable, "-c",
         "import sys, numpy as np, tensorflow as tf\n"
         "model = tf.keras.models.load_model(sys.argv[1])\n"
         "print('predicted', model.predict(np.zeros((3, 8), 'float32'), verbose=0).shape)",
         str(chief / "model" / "model.keras")],
        capture_output=True, text=True, timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
    )
    assert "predicted (3, 1)" in predicted.stdout, predicted.stderr[-3000:]

    # The job directory on the hosts: the project, its excludes left out, private.
    rc, out, _ = hosts.run(1, "cd ~/tf-runbook/runs/project/job && find . -type f -not -path '*/__pycache__/*' | sort && stat -c %a . train.py")
    assert out.split() == [
        "./configs/train.json", "./mypkg/__init__.py", "./mypkg/settings.py", "./mypkg/trainer.py",
        "./tf_causes.py", "./tf_checkpoint_push.py", "./tf_checkpoint_wire.py", "./tf_metrics.py", "./tf_proc.py", "./tf_ps_server.py", "./tf_run.py",
        "./tf_runbook_job.py", "./tf_supervisor.py",
        "./train.py", "700", "600",
    ]
    rc, first_archive, _ = hosts.run(0, "stat -c '%n %i %Y' ~/tf-runbook/job-archives/*.tar.gz")

    # Second run, same directory: the archive is not sent again (deploy only, no training).
    again = helpers.run_playbook(
        ["playbooks/preflight.yml", "playbooks/deploy.yml"], *vault,
        inventory=book.inventory, extra={"tf_runs_dir": str(book.runs), "tf_run_id": "project-2"},
    )
    assert again.returncode == 0, again.stdout[-4000:]
    # The copy may be the deploy's last task now (the launch writes the run's files).
    copy_task = again.stdout.split("Copy the project archive", 1)[1].split("TASK [", 1)[0].split("PLAY RECAP", 1)[0]
    assert "ok: [node0]" in copy_task and "ok: [node1]" in copy_task and "changed" not in copy_task, copy_task
    rc, second_archive, _ = hosts.run(0, "stat -c '%n %i %Y' ~/tf-runbook/job-archives/*.tar.gz")
    assert second_archive == first_archive
    assert marker not in again.stdout + again.stderr

    # Collected again with no room for artifacts: the logs come, the model and the
    # TensorBoard logs stay on the host, and both the verdict output and summary.json say so.
    capped = book.play("playbooks/collect.yml", *vault, extra={"tf_run_id": "project", "tf_collect_max_mb": 0})
    assert capped.returncode == 0, capped.stdout[-4000:]
    assert "not collected (over tf_collect_max_mb): node0: worker-0/model/model.keras (" in capped.stdout
    warning = capped.stdout.split("TASK [tf_collect : Warn about artifacts left on the hosts", 1)[1].split("TASK [", 1)[0]
    assert "Left on node0 under" in warning and "worker-0/model/model.keras" in warning, warning
    left_out = book.summary("project")["context"]["left_out"]
    assert sorted(left_out) == ["node0"]
    assert "worker-0/model/model.keras" in [entry["path"] for entry in left_out["node0"]]
