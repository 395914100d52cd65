"""Preflight: every mistake that can be seen before launch is refused before launch.

Each test runs the real `train.yml` with one bad input and checks three things: the
message names the host and the value, no worker was started, and the files of an
earlier run (on the hosts and on the controller) are unchanged.

The local tests use two inventory hosts on this machine (local connection, their own
base directories and ports); those that need separate network stacks use the
namespace hosts.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import yaml

from helpers import free_port, port_held, run_playbook, start_playbook, tree_digest
from nshosts import NamespaceHosts

REPO = Path(__file__).resolve().parents[2]
EARLIER = "earlier-run"


digest = tree_digest


class LocalCluster:
    """Two inventory hosts, w0 and w1, on this machine, with an earlier run on each."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.runs = tmp / "runs"
        self.hosts: dict[str, dict[str, Any]] = {}
        for index, name in enumerate(("w0", "w1")):
            self.hosts[name] = {
                "ansible_connection": "local",
                "ansible_python_interpreter": sys.executable,
                "tf_worker_address": "127.0.0.1",
                "tf_worker_port": 2460 + 10 * index,
                "tf_worker_python": sys.executable,
                "tf_worker_base_dir": str(tmp / name),
            }
            earlier = tmp / name / "runs" / EARLIER / f"worker-{index}"
            earlier.mkdir(parents=True)
            (earlier / "worker.log").write_text(f"worker={index} training_complete\n")
            (earlier / "state.json").write_text('{"pid": 1}\n')
            (earlier / "exit.json").write_text('{"exit_status": 0}\n')
        (self.runs / EARLIER).mkdir(parents=True)
        (self.runs / EARLIER / "summary.json").write_text('{"status": "succeeded"}\n')
        self.before = digest(tmp)
        self.groups: dict[str, Any] = {}

    def inventory(self) -> Path:
        path = self.tmp / "inventory.yml"
        children = {"tf_workers": {"hosts": self.hosts}, **self.groups}
        path.write_text(yaml.safe_dump({"all": {"children": children}}, sort_keys=False))
        return path

    def play(self, *args: str, **extra: Any) -> subprocess.CompletedProcess[str]:
        data = {"tf_runs_dir": str(self.runs), "tf_run_id": "refused", **extra}
        return run_playbook("train.yml", *args, inventory=self.inventory(), extra=data)

    def assert_refused(self, result: subprocess.CompletedProcess[str], *fragments: str) -> str:
        output = result.stdout + result.stderr
        assert result.returncode != 0, output[-3000:]
        for fragment in fragments:
            assert fragment in output, f"{fragment!r} not in:\n{output[-3000:]}"
        # Nothing was launched: no worker of any run was started, no process mentions it.
        launched = [p for p in self.tmp.rglob("*") if p.name in ("state.json", "exit.json", "worker.log")]
        assert sorted(str(p.relative_to(self.tmp)) for p in launched) == sorted(
            name for name in self.before if Path(name).name in ("state.json", "exit.json", "worker.log")
        )
        assert not any("tf_supervisor" in cmd and str(self.tmp) in cmd for cmd in command_lines())
        # The earlier run's files are all there, byte for byte.
        after = digest(self.tmp)
        assert {name: after.get(name) for name in self.before} == self.before
        return output


def command_lines() -> list[str]:
    lines = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                lines.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
            except OSError:
                continue
    return lines


@pytest.fixture
def cluster(tmp_path: Path) -> LocalCluster:
    return LocalCluster(tmp_path)


def test_an_empty_worker_group_is_refused(cluster: LocalCluster) -> None:
    cluster.hosts.clear()
    cluster.groups = {"others": {"hosts": {"x": {"ansible_connection": "local"}}}}
    cluster.assert_refused(cluster.play(), "no worker hosts in the play", "group tf_workers holds []")


def test_a_limit_that_leaves_no_worker_is_refused(cluster: LocalCluster) -> None:
    cluster.groups = {"others": {"hosts": {"x": {"ansible_connection": "local"}}}}
    cluster.assert_refused(
        cluster.play("--limit", "x"), "no worker hosts in the play", 'group tf_workers holds ["w0", "w1"]'
    )


def test_slots_below_one_are_refused(cluster: LocalCluster) -> None:
    cluster.hosts["w1"]["tf_worker_slots"] = 0
    cluster.assert_refused(cluster.play(), "host w1: tf_worker_slots must be 1 or more, got 0")


def test_a_port_out_of_range_is_refused(cluster: LocalCluster) -> None:
    cluster.hosts["w1"].update(tf_worker_port=65535, tf_worker_slots=2)
    cluster.assert_refused(cluster.play(), "host w1: tf_worker_port 65535 with 2 slot(s) needs ports 65535..65536")


def test_two_workers_on_the_same_address_and_port_are_refused(cluster: LocalCluster) -> None:
    cluster.hosts["w1"]["tf_worker_port"] = cluster.hosts["w0"]["tf_worker_port"]
    cluster.assert_refused(
        cluster.play(), "host w1: endpoint 127.0.0.1:2460 is also used by host w0; two workers cannot share"
    )


def test_two_hosts_that_are_one_machine_with_one_base_dir_are_refused(cluster: LocalCluster) -> None:
    """w0 and w1 are both this machine; with one base directory their runs would share
    its directories (and the verdict refuse the run after the training)."""
    cluster.hosts["w1"]["tf_worker_base_dir"] = cluster.hosts["w0"]["tf_worker_base_dir"]
    cluster.assert_refused(
        cluster.play(),
        f"hosts w0, w1 are one machine with one tf_worker_base_dir ({cluster.tmp / 'w0'}): their runs would share",
    )


def test_a_checkpoint_dir_inside_the_runs_directory_is_refused(cluster: LocalCluster) -> None:
    """An earlier run's directory as tf_checkpoint_dir: the new run's backups would go
    into it, and a run id equal to its checkpoints' name would resume from them."""
    earlier = cluster.tmp / "w1" / "runs" / EARLIER
    cluster.hosts["w1"]["tf_checkpoint_dir"] = str(earlier)
    cluster.assert_refused(
        cluster.play(tf_run_id="checkpoints"),
        f"host w1: tf_checkpoint_dir {earlier} is inside {cluster.tmp / 'w1' / 'runs'}, where every run keeps its own "
        "directory",
    )


def test_a_port_already_in_use_is_refused_naming_the_process(cluster: LocalCluster) -> None:
    with port_held(2470) as holder:
        name = Path(f"/proc/{holder.pid}/comm").read_text().strip()
        cluster.assert_refused(
            cluster.play(), f"host w1: worker 1's port 2470 is already in use by pid {holder.pid} ({name})"
        )


def test_a_host_that_ssh_cannot_reach_is_refused_by_name(cluster: LocalCluster) -> None:
    """Ansible takes an unreachable host out of the play without a failed result: the
    refusal still names it, after the SSH error that names its address."""
    port = free_port()
    cluster.hosts["w1"].update(ansible_connection="ssh", ansible_host="127.0.0.1", ansible_port=port)
    output = cluster.assert_refused(
        cluster.play(), "Preflight refused the run: see the reason above (w1 did not answer over SSH)"
    )
    assert "fatal: [w1]: UNREACHABLE!" in output and f"port {port}: Connection refused" in output, output[-3000:]


def test_a_missing_training_script_is_refused(cluster: LocalCluster) -> None:
    cluster.assert_refused(
        cluster.play(tf_train_script="/nonexistent/train.py"),
        "tf_train_script /nonexistent/train.py: cannot be read on the controller: No such file or directory",
    )


def test_a_training_script_that_is_not_valid_python_is_refused(cluster: LocalCluster, tmp_path: Path) -> None:
    script = tmp_path / "broken_train.py"
    script.write_text("import tensorflow\ndef train(:\n    pass\n")
    cluster.assert_refused(cluster.play(tf_train_script=str(script)), f"tf_train_script {script}: line 2:")


def test_a_run_id_unsafe_as_a_path_component_is_refused(cluster: LocalCluster) -> None:
    cluster.assert_refused(cluster.play(tf_run_id="../escape"), "'../escape'")


def test_a_run_id_already_launched_on_a_host_is_refused(cluster: LocalCluster, tmp_path: Path) -> None:
    cluster.assert_refused(
        cluster.play(tf_run_id=EARLIER),
        f"host w0: run id '{EARLIER}' was already launched there ({tmp_path}/w0/runs/{EARLIER}/worker-0/",
        f"host w1: run id '{EARLIER}' was already launched there",
    )


def test_a_run_id_whose_backups_are_left_on_a_host_is_refused(cluster: LocalCluster, tmp_path: Path) -> None:
    """Only the run's checkpoints are left on w1 (its worker directories removed, no run
    of that id on the controller): a new run there would resume from them."""
    backups = tmp_path / "w1" / "runs" / "copied" / "checkpoints"
    backups.mkdir(parents=True)
    (backups / "ckpt-3.index").write_text("backup\n")
    cluster.before = digest(tmp_path)
    cluster.assert_refused(
        cluster.play(tf_run_id="copied"), f"host w1: run id 'copied' was already launched there ({backups})"
    )


def test_too_little_free_disk_is_refused(cluster: LocalCluster, tmp_path: Path) -> None:
    cluster.assert_refused(
        cluster.play(tf_preflight_min_free_mb=10**12),
        f"under {tmp_path}/w0, below tf_preflight_min_free_mb=1000000000000",
    )


def test_a_worker_interpreter_that_is_not_there_is_refused_once(cluster: LocalCluster) -> None:
    cluster.hosts["w1"]["tf_worker_python"] = "/nonexistent/bin/python3"
    result = cluster.play()
    cluster.assert_refused(result, "host w1: tf_worker_python /nonexistent/bin/python3 does not exist there")
    # The versions probe could not run it either: the lookup's message says why, once.
    assert "worker interpreter /nonexistent/bin/python3 does not run" not in result.stdout + result.stderr


def test_a_worker_interpreter_that_does_not_run_is_refused(cluster: LocalCluster) -> None:
    cluster.hosts["w1"]["tf_worker_python"] = "/bin/false"
    cluster.assert_refused(cluster.play(),
                           "host w1: worker interpreter /bin/false does not run: it exited with status 1, saying nothing")


def test_an_executable_that_is_not_python_3_is_refused_on_a_cluster_of_one_host(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    """One host: no versions are compared across hosts, so the lookup runs the interpreter
    itself; before, such a file passed the preflight and every supervisor failed at the
    launch (Exec format error)."""
    notes = tmp_path / "not-python"
    notes.write_text("a text file with its execute bit set\n")
    notes.chmod(0o755)
    cluster.hosts["w0"]["tf_worker_python"] = str(notes)
    cluster.assert_refused(
        cluster.play("--limit", "w0"),
        f"host w0: tf_worker_python {notes} does not run as Python 3: it cannot be executed: Exec format error",
    )


def test_numpy_versions_that_differ_across_hosts_are_refused(cluster: LocalCluster, tmp_path: Path) -> None:
    """w1's interpreter sees another numpy first on its path, as a drifted host would."""
    shadow = tmp_path / "shadow" / "numpy-1.26.4.dist-info"
    shadow.mkdir(parents=True)
    (shadow / "METADATA").write_text("Metadata-Version: 2.1\nName: numpy\nVersion: 1.26.4\n")
    wrapper = tmp_path / "drifted-python"
    wrapper.write_text(f"#!/bin/sh\nPYTHONPATH={shadow.parent} exec {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    cluster.hosts["w1"]["tf_worker_python"] = str(wrapper)
    import numpy

    cluster.assert_refused(
        cluster.play(), f"numpy versions differ across hosts: w0={numpy.__version__}, w1=1.26.4"
    )


def test_python_versions_that_differ_across_hosts_are_refused(cluster: LocalCluster) -> None:
    other = "/usr/bin/python3"
    found = subprocess.run([other, "-c", "import platform; print(platform.python_version())"],
                           capture_output=True, text=True, check=True).stdout.strip()
    mine = ".".join(map(str, sys.version_info[:3]))
    assert found.rsplit(".", 1)[0] != mine.rsplit(".", 1)[0], "needs a second Python minor version"
    cluster.hosts["w1"]["tf_worker_python"] = other
    cluster.assert_refused(cluster.play(), f"python versions differ across hosts: w0={mine}, w1={found}")


def test_interpreters_left_to_the_deploy_are_compared_there_and_refused(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    """w1 uses the managed virtualenv, whose interpreter the preflight cannot read before the
    deploy settles it: tf_worker compares it after (tf_preflight_versions_plan). Its
    virtualenv is already built (the stamp matches the pins, so pip does not run) and sees
    another numpy first on its path, as a drifted host would."""
    shadow = tmp_path / "shadow" / "numpy-1.26.4.dist-info"
    shadow.mkdir(parents=True)
    (shadow / "METADATA").write_text("Metadata-Version: 2.1\nName: numpy\nVersion: 1.26.4\n")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    wrapper = venv / "bin" / "python"
    wrapper.write_text(f"#!/bin/sh\nPYTHONPATH={shadow.parent} exec {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    defaults = yaml.safe_load((REPO / "roles" / "tf_worker" / "defaults" / "main.yml").read_text())
    pins = defaults["tf_worker_requirements"]
    (venv / "tf-runbook-requirements.txt").write_text("".join(f"{pin}\n" for pin in pins))
    cluster.hosts["w1"]["tf_worker_python"] = ""
    cluster.hosts["w1"]["tf_worker_venv_dir"] = str(venv)
    import numpy

    output = cluster.assert_refused(
        cluster.play(), f"numpy versions differ across hosts: w0={numpy.__version__}, w1=1.26.4"
    )
    # Refused by the deploy's own check, after the virtualenv was settled: the preflight
    # hands it over, and the deploy no longer calls back into tf_preflight.
    assert "tf_worker : Refuse interpreters that differ across hosts" in output, output[-3000:]


# -- inputs that would fail late, refused first (issue 24, points 18 and 11) ----------


def test_inputs_that_would_fail_late_are_refused_at_once_naming_host_and_value(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    """A bad regex failed only at launch, a network in tf_firewall_allow after the deploy, a
    missing report template at collect: all are named in the preflight's first check."""
    cluster.hosts["w1"]["tf_worker_venv_dir"] = "venvs/tf"
    output = cluster.assert_refused(
        cluster.play(tf_startup_pattern="joined(", tf_firewall_allow=["192.0.2.7", "10.0.0.0/8"],
                     tf_verdict_report_template=str(tmp_path / "missing.html.j2")),
        "Preflight refused the run: host w0: tf_startup_pattern 'joined(' is not a valid regular expression",
        "host w0: tf_firewall_allow entry '10.0.0.0/8' is a network",
        f"host w0: tf_verdict_report_template {tmp_path}/missing.html.j2 does not exist on the controller",
        "host w1: tf_worker_venv_dir 'venvs/tf' must be an absolute path or start with ~/",
    )  # fmt: skip
    # Refused by the preflight's input check, before any host was probed.
    assert "Check the inputs of role tf_preflight and refuse patterns, paths and addresses that would fail later" in output
    assert "Look at this host's worker ports" not in output


def test_later_phases_inputs_of_the_wrong_type_are_refused_before_launch(cluster: LocalCluster) -> None:
    """The stop's, the collect's and the verdict's inputs were checked only when their phase
    ran: after the training (the collect, the verdict) or only after a failure (the stop).
    The preflight's one check now names them, each host's, in its role's part. The
    collect's options are the run's contract (role tf), shared with the wait that also
    collects: refused by the contract check, the first task of the preflight."""
    output = cluster.assert_refused(
        cluster.play(tf_collect_files={"logs": "*.log"}),
        "Validation of arguments failed for role tf, entry point contract:\nhost w0: argument 'tf_collect_files' "
        "is of type dict and we were unable to convert to list: dict cannot be converted to a list",
    )  # fmt: skip
    assert "Look at this host's worker ports" not in output
    cluster.hosts["w1"]["tf_stop_capture_stacks"] = "maybe"
    cluster.hosts["w1"]["tf_verdict_marker"] = "../model.keras"
    output = cluster.assert_refused(
        cluster.play(),
        "Validation of arguments failed for role tf_stop, entry point stop:\nhost w1: argument 'tf_stop_capture_stacks' "
        "is of type str and we were unable to convert to bool",
        'host w1: tf_verdict_marker "../model.keras" must be a relative path inside the worker directory',
    )  # fmt: skip
    assert "Look at this host's worker ports" not in output


def test_a_relative_base_dir_is_refused_before_anything_is_written(cluster: LocalCluster, tmp_path: Path) -> None:
    cluster.hosts["w1"]["tf_worker_base_dir"] = "tf-runbook"
    cluster.assert_refused(cluster.play(), "host w1: tf_worker_base_dir 'tf-runbook' must be an absolute path or start with ~/")
    # Relative to the module's working directory, it would have landed in the clone.
    assert not (REPO / "tf-runbook").exists() and not (REPO / "playbooks" / "tf-runbook").exists()


def test_a_controller_timeout_shorter_than_the_first_poll_is_refused(cluster: LocalCluster) -> None:
    cluster.assert_refused(
        cluster.play(tf_controller_timeout=3, tf_job_timeout=40 * 24 * 3600),
        "host w0: tf_controller_timeout must be 0 (the run is not tied to the controller) or 10 or more, got 3",
        "host w0: tf_job_timeout must be at most 2592000 (30 days), got 3456000",
    )


def test_a_shared_base_dir_is_refused_and_keeps_its_mode(cluster: LocalCluster, tmp_path: Path) -> None:
    """Point 11: a directory other users use (mode 0755, their files in it) is refused, not
    made 0700; one of another user is refused with a message, not a traceback."""
    shared = tmp_path / "shared"
    (shared / "datasets").mkdir(parents=True)
    shared.chmod(0o755)
    cluster.hosts["w0"]["tf_worker_base_dir"] = str(shared)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    if os.geteuid() == 0:
        os.chown(foreign, 65534, 65534)
        cluster.hosts["w1"]["tf_worker_base_dir"] = str(foreign)
        owner = "(uid 65534)"
    else:
        cluster.hosts["w1"]["tf_worker_base_dir"] = "/"
        owner = "(uid 0)"
    cluster.assert_refused(
        cluster.play(),
        f"host w0: tf_worker_base_dir {shared} is shared (mode 0755) and holds files that are not the runbook's "
        "(datasets)",
        f"{owner}, not to the remote user",
    )
    assert (shared.stat().st_mode & 0o777) == 0o755
    assert sorted(p.name for p in shared.iterdir()) == ["datasets"]


# -- GPU hosts that would train on the CPU (issue 24, point 8) -------------------------

UP_TO_DEPLOY = """\
- name: Check the cluster
  ansible.builtin.import_playbook: {repo}/playbooks/preflight.yml
- name: Deploy
  ansible.builtin.import_playbook: {repo}/playbooks/deploy.yml
"""

# The attempt's files (job_env.json among them) are written by the launch's module run,
# which starts the workers in the same run: a job without TensorFlow that ends at once.
UP_TO_LAUNCH = UP_TO_DEPLOY + """\
- name: Launch
  ansible.builtin.import_playbook: {repo}/playbooks/launch.yml
"""
TRIVIAL_JOB = REPO / "tests" / "integration" / "jobs" / "trivial_job.py"


@pytest.fixture
def two_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This machine shows two GPUs to the preflight: an `nvidia-smi -L` of its own first on
    the PATH the local hosts' modules inherit (no /proc/driver/nvidia here)."""
    assert not Path("/proc/driver/nvidia/gpus").exists()
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n"
        "echo 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-0000-0000-0000-000000000000)'\n"
        "echo 'GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-11111111-1111-1111-1111-111111111111)'\n"
    )
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return bin_dir


def cuda_python(tmp: Path) -> Path:
    """An interpreter whose `tensorflow` sees one GPU per device in CUDA_VISIBLE_DEVICES,
    as the CUDA build does (a stand-in module first on its path)."""
    package = tmp / "fake-cuda" / "tensorflow"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "import os\n__version__ = '2.21.0'\n"
        "class _Config:\n"
        "    def list_physical_devices(self, kind):\n"
        "        return [d for d in os.environ.get('CUDA_VISIBLE_DEVICES', '').split(',') if d]\n"
        "config = _Config()\n"
    )
    wrapper = tmp / "cuda-python"
    wrapper.write_text(f"#!/bin/sh\nPYTHONPATH={package.parent} exec {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    return wrapper


def test_gpu_hosts_whose_tensorflow_sees_no_gpu_are_refused(cluster: LocalCluster, two_gpus: Path) -> None:
    """The controller's tensorflow-cpu as worker interpreter on hosts that show 2 GPUs each."""
    output = cluster.assert_refused(
        cluster.play(),
        "Preflight refused the run: host w0: worker 0 gets 2 of the 2 GPU(s) the host shows "
        f"(CUDA_VISIBLE_DEVICES=0,1), but its TensorFlow",
        f"{sys.executable} sees 0: it would train on the CPU; install TensorFlow's CUDA build, tensorflow[and-cuda]",
        "host w1: worker 1 gets 2 of the 2 GPU(s)",
    )
    assert "tf_worker : Refuse workers whose TensorFlow would not see their GPUs" in output


def task_block(output: str, name: str) -> str:
    """What the playbook printed for its task ``name`` (empty when it printed none)."""
    parts = output.split(f" : {name}]", 1)
    return parts[1].split("TASK [", 1)[0] if len(parts) > 1 else ""


ASK = "Ask each worker's TensorFlow how many of its GPUs it sees"


def test_a_cpu_run_on_gpu_hosts_and_a_cuda_tensorflow_pass(cluster: LocalCluster, two_gpus: Path, tmp_path: Path) -> None:
    play = tmp_path / "up-to-launch.yml"
    play.write_text(UP_TO_LAUNCH.format(repo=REPO))
    # tf_worker_gpus_per_slot: 0 says a CPU run is meant: every GPU hidden, nothing to ask.
    result = run_playbook(str(play), inventory=cluster.inventory(),
                          extra={"tf_runs_dir": str(cluster.runs), "tf_run_id": "cpu-run", "tf_worker_gpus_per_slot": 0,
                                 "tf_train_script": str(TRIVIAL_JOB)})
    assert result.returncode == 0, result.stdout[-3000:]
    assert task_block(result.stdout, ASK) == ""
    env = json.loads((tmp_path / "w0" / "runs" / "cpu-run" / "worker-0" / "job_env.json").read_text())
    assert env["CUDA_VISIBLE_DEVICES"] == ""
    # A TensorFlow that sees its GPUs is asked, and passes.
    python = cuda_python(tmp_path)
    for host in cluster.hosts.values():
        host["tf_worker_python"] = str(python)
    result = run_playbook(str(play), inventory=cluster.inventory(),
                          extra={"tf_runs_dir": str(cluster.runs), "tf_run_id": "gpu-run",
                                 "tf_train_script": str(TRIVIAL_JOB)})
    assert result.returncode == 0, result.stdout[-3000:]
    asked = task_block(result.stdout, ASK)
    assert "ok: [w0]" in asked and "ok: [w1]" in asked, result.stdout[-3000:]
    env = json.loads((tmp_path / "w1" / "runs" / "gpu-run" / "worker-1" / "job_env.json").read_text())
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1"


def test_the_managed_virtualenv_installs_the_cuda_build_on_gpu_hosts(
    cluster: LocalCluster, two_gpus: Path, tmp_path: Path
) -> None:
    """The default pins say tensorflow-cpu; on hosts that show GPUs the requirements the
    managed virtualenv is built from say tensorflow[and-cuda], same version. The virtualenv
    is built already with those pins (its stamp matches, so pip does not run) and its
    interpreter sees the GPUs."""
    defaults = yaml.safe_load((REPO / "roles" / "tf_worker" / "defaults" / "main.yml").read_text())
    pins = [pin.replace("tensorflow-cpu", "tensorflow[and-cuda]") for pin in defaults["tf_worker_requirements"]]
    assert pins != defaults["tf_worker_requirements"]
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(cuda_python(tmp_path))
    (venv / "tf-runbook-requirements.txt").write_text("".join(f"{pin}\n" for pin in pins))
    for host in cluster.hosts.values():
        host.update(tf_worker_python="", tf_worker_venv_dir=str(venv))
    play = tmp_path / "up-to-deploy.yml"
    play.write_text(UP_TO_DEPLOY.format(repo=REPO))
    result = run_playbook(str(play), inventory=cluster.inventory(),
                          extra={"tf_runs_dir": str(cluster.runs), "tf_run_id": "cuda-venv"})
    assert result.returncode == 0, result.stdout[-3000:]
    for name in ("w0", "w1"):
        wanted = (tmp_path / name / "worker-requirements.txt").read_text().split()
        assert wanted == pins


# -- on namespace hosts: separate network stacks ----------------------------------------


@pytest.fixture
def earlier_on_hosts() -> Callable[[NamespaceHosts], Callable[[], None]]:
    """Writes an earlier run on every host; returns a check that it is unchanged."""

    def make(hosts: NamespaceHosts) -> Callable[[], None]:
        script = (f"mkdir -p ~/tf-runbook/runs/{EARLIER}/worker-0 && cd ~/tf-runbook/runs/{EARLIER}/worker-0 && "
                  "echo 'worker=0 training_complete' > worker.log && echo '{}' > exit.json")
        for index in range(len(hosts)):
            assert hosts.run(index, script)[0] == 0
        listing = f"cd ~/tf-runbook/runs && find . -type f | sort | xargs sha256sum"
        before = [hosts.run(i, listing)[1] for i in range(len(hosts))]

        def unchanged() -> None:
            assert [hosts.run(i, listing)[1] for i in range(len(hosts))] == before

        return unchanged

    return make


def ensure_tool(path: str, package: str) -> None:
    """Install a Debian package the test needs when its tool is missing (fresh CI machine)."""
    if not Path(path).exists():
        subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", package], check=True,
                       capture_output=True, env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))


def ns_play(hosts: NamespaceHosts, tmp: Path, *args: str, inventory: dict[str, Any] | None = None,
            **extra: Any) -> subprocess.CompletedProcess[str]:
    path = hosts.write_inventory(tmp / "inventory" / "hosts.yml", **(inventory or {}))
    data = {"tf_runs_dir": str(tmp / "runs"), **extra}
    return run_playbook("train.yml", *args, inventory=path, extra=data, timeout=900)


def user_processes(hosts: NamespaceHosts, index: int, needle: str) -> list[str]:
    rc, out, _ = hosts.run(index, "ps -u $(id -u) -o pid=,args=")
    assert rc == 0
    return [line for line in out.splitlines() if needle in line]


def port_free(hosts: NamespaceHosts, index: int, port: int) -> bool:
    code = ("import socket; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
            f"s.bind(('0.0.0.0', {port})); print('free')")
    rc, out, _ = hosts.run(index, f'python3 -c "{code}"')
    return rc == 0 and out.strip() == "free"


def port_listening(hosts: NamespaceHosts, index: int, port: int) -> bool:
    """Whether a socket listens on ``port`` on that host, read from /proc/net/tcp*: a
    check that binds the port itself, as port_free does, can take it from under a
    process that binds it at that moment."""
    script = f"awk '$2 ~ /:{port:04X}$/ && $4 == \"0A\"' /proc/net/tcp /proc/net/tcp6 | grep -q ."
    rc, _, _ = hosts.run(index, script)
    return rc == 0


@pytest.mark.multihost
def test_a_worker_port_blocked_between_hosts_is_refused_before_launch(
    make_ns_hosts: Callable[..., NamespaceHosts], tmp_path: Path, worker_python: str,
    earlier_on_hosts: Callable[[NamespaceHosts], Callable[[], None]],
) -> None:
    ensure_tool("/usr/sbin/nft", "nftables")
    hosts = make_ns_hosts(count=3)
    unchanged = earlier_on_hosts(hosts)
    node0, node2 = hosts.host(0), hosts.host(2)
    # A firewall on node2 that drops node0's connections to the TensorFlow port.
    rules = (f"table inet testblock {{\n chain input {{\n type filter hook input priority 0;\n"
             f" ip saddr {node0.address} tcp dport 2222 drop\n }}\n}}\n")
    proc = subprocess.run(["nsenter", "--target", str(node2.sshd_pid), "--net", "/usr/sbin/nft", "-f", "-"],
                          input=rules, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    result = ns_play(hosts, tmp_path, inventory={"groupvars": {"tf_worker_python": worker_python}},
                     tf_run_id="blocked", tf_preflight_probe_timeout=2)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert (f"host node0 cannot reach worker 2 on host node2 at {node2.address}:2222: "
            "no answer within 2 s") in output, output[-3000:]
    # Only that pair: node1 reaches node2, node2 reaches itself.
    assert "host node1 cannot reach" not in output and "host node2 cannot reach" not in output
    # Every host's listener was stopped after the refusal, which is made again without
    # printing its reason a second time (issue 39).
    assert "End the probe listeners of a refused run" in output
    before, banner, again = output.partition("Refuse the run for what failed in the probe")
    assert banner, output[-3000:]
    assert f"host node0 cannot reach worker 2 on host node2 at {node2.address}:2222" in before, output[-3000:]
    assert "cannot reach" not in again and "Preflight refused the run: see the reason above" in again, again
    for index in range(3):
        assert not hosts.run(index, "test -e ~/tf-runbook/runs/blocked")[0] == 0
        assert user_processes(hosts, index, "tf_supervisor") == []
        assert port_free(hosts, index, 2222), f"node{index}: the probe listener still holds port 2222"
    unchanged()


@pytest.mark.multihost
def test_a_cluster_of_one_host_whose_worker_address_is_another_machines_is_refused(
    make_ns_hosts: Callable[..., NamespaceHosts], tmp_path: Path, worker_python: str,
    earlier_on_hosts: Callable[[NamespaceHosts], Callable[[], None]],
) -> None:
    """node0 alone, its tf_worker_address node1's: its two workers would wait for each other
    at node1 until the startup deadline. The probe of a one-host cluster reaches its own
    ports at their addresses, and refuses before anything is launched."""
    hosts = make_ns_hosts(count=2)
    unchanged = earlier_on_hosts(hosts)
    node1 = hosts.host(1)
    result = ns_play(hosts, tmp_path, "--limit", "node0", inventory={"groupvars": {"tf_worker_python": worker_python}},
                     tf_run_id="notmine", tf_worker_address=node1.address, tf_worker_slots=2,
                     tf_preflight_probe_timeout=2)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    for index, port in ((0, 2222), (1, 2223)):
        assert f"host node0 cannot reach worker {index} on host node0 at {node1.address}:{port}: " in output, (
            output[-3000:])
    assert "the address does not lead back to host node0 itself" in output, output[-3000:]
    for index in range(2):
        assert not hosts.run(index, "test -e ~/tf-runbook/runs/notmine")[0] == 0
        assert user_processes(hosts, index, "tf_supervisor") == []
    assert port_free(hosts, 0, 2222) and port_free(hosts, 0, 2223), "the probe listener still holds a port"
    unchanged()


@pytest.mark.multihost
def test_a_port_taken_on_a_remote_host_is_refused_naming_its_process(
    make_ns_hosts: Callable[..., NamespaceHosts], tmp_path: Path, worker_python: str,
    earlier_on_hosts: Callable[[NamespaceHosts], Callable[[], None]],
) -> None:
    hosts = make_ns_hosts(count=2)
    unchanged = earlier_on_hosts(hosts)
    code = "import socket, time; s = socket.socket(); s.bind(('0.0.0.0', 2222)); s.listen(); time.sleep(300)"
    rc, out, _ = hosts.run(1, f'setsid python3 -c "{code}" > /dev/null 2>&1 < /dev/null & echo $!')
    assert rc == 0
    pid = int(out.strip())
    try:
        deadline = time.monotonic() + 10
        while not port_listening(hosts, 1, 2222):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        result = ns_play(hosts, tmp_path, inventory={"groupvars": {"tf_worker_python": worker_python}},
                         tf_run_id="taken")
        output = result.stdout + result.stderr
        assert result.returncode != 0
        assert f"host node1: worker 1's port 2222 is already in use by pid {pid} (python3)" in output, output[-3000:]
        for index in range(2):
            assert hosts.run(index, "test -e ~/tf-runbook/runs/taken")[0] != 0
        # node0 was clean and listened; the refusal stopped its listener at once.
        assert "End the probe listeners of a refused run" in output
        assert port_free(hosts, 0, 2222), "node0: the probe listener still holds port 2222"
        unchanged()
    finally:
        hosts.run(1, f"kill -9 {pid}")


@pytest.fixture
def sudo_for(request: pytest.FixtureRequest) -> Iterator[Callable[[str], None]]:
    """Passwordless sudo for the hosts' test user (become), removed afterwards."""
    path = Path("/etc/sudoers.d/tf-runbook-tests")
    created = []

    def grant(user: str) -> None:
        ensure_tool("/usr/bin/sudo", "sudo")
        path.write_text(f"{user} ALL=(root) NOPASSWD: ALL\n")
        path.chmod(0o440)
        created.append(path)

    yield grant
    for p in created:
        p.unlink(missing_ok=True)


def can_connect(hosts: NamespaceHosts, index: int, address: str, port: int) -> bool:
    code = f"import socket; socket.create_connection(('{address}', {port}), timeout=3).close(); print('open')"
    rc, out, _ = hosts.run(index, f'python3 -c "{code}"', timeout=20)
    return rc == 0 and out.strip() == "open"


def nft_tables(hosts: NamespaceHosts, index: int) -> str:
    node = hosts.host(index)
    return subprocess.run(["nsenter", "--target", str(node.sshd_pid), "--net", "/usr/sbin/nft", "list", "tables"],
                          capture_output=True, text=True, check=True).stdout


@pytest.mark.multihost
def test_the_firewall_keeps_worker_ports_to_the_cluster_while_it_trains(
    make_ns_hosts: Callable[..., NamespaceHosts], tmp_path: Path, worker_python: str,
    sudo_for: Callable[[str], None],
) -> None:
    ensure_tool("/usr/sbin/nft", "nftables")
    hosts = make_ns_hosts(count=3)
    sudo_for(hosts.user)
    node0 = hosts.host(0)
    path = hosts.write_inventory(tmp_path / "inventory" / "hosts.yml", groupvars={"tf_worker_python": worker_python})
    # Training long enough (about 20 s on 2 cores) for the three checks below, a few seconds
    # once worker 0 joined, to see the rules while it trains; 4500 steps trained 90 s more.
    data = {"tf_runs_dir": str(tmp_path / "runs"), "tf_run_id": "walled", "tf_firewall_enabled": True,
            "tf_train_args": ["--epochs=3", "--steps-per-epoch=400"]}
    # node2 is in the inventory but not in the cluster: it stands for any other machine.
    controller = start_playbook("train.yml", "--limit", "node0,node1", inventory=path, extra=data)
    try:
        deadline = time.monotonic() + 300
        while hosts.run(0, "grep -q cluster_workers= ~/tf-runbook/runs/walled/worker-0/worker.log")[0] != 0:
            assert controller.poll() is None and time.monotonic() < deadline, "training never started"
            time.sleep(0.5)
        assert "tf_runbook_" in nft_tables(hosts, 0)
        assert can_connect(hosts, 1, node0.address, 2222), "a cluster member was refused"
        assert not can_connect(hosts, 2, node0.address, 2222), "a host outside the cluster reached a worker port"
        stdout, _ = controller.communicate(timeout=600)
    finally:
        if controller.poll() is None:
            controller.kill()
            controller.wait()
    assert controller.returncode == 0, stdout[-4000:]
    assert json.loads((tmp_path / "runs" / "walled" / "summary.json").read_text())["status"] == "succeeded"
    # The rules went with the run.
    for index in (0, 1):
        assert "tf_runbook_" not in nft_tables(hosts, index)
    assert can_connect(hosts, 2, node0.address, 22)
    # The workers themselves ran as the unprivileged user, not as root.
    rc, out, _ = hosts.run(0, "stat -c %U ~/tf-runbook/runs/walled/worker-0/worker.log")
    assert out.strip() == hosts.user
