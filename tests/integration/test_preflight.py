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

from helpers import port_held, run_playbook, tree_digest
from nshosts import NamespaceHosts

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK_BIN = Path(sys.executable).with_name("ansible-playbook")
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


def test_a_port_already_in_use_is_refused_naming_the_process(cluster: LocalCluster) -> None:
    with port_held(2470) as holder:
        name = Path(f"/proc/{holder.pid}/comm").read_text().strip()
        cluster.assert_refused(
            cluster.play(), f"host w1: worker 1's port 2470 is already in use by pid {holder.pid} ({name})"
        )


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


def test_too_little_free_disk_is_refused(cluster: LocalCluster, tmp_path: Path) -> None:
    cluster.assert_refused(
        cluster.play(tf_preflight_min_free_mb=10**12),
        f"under {tmp_path}/w0, below tf_preflight_min_free_mb=1000000000000",
    )


def test_a_worker_interpreter_that_does_not_run_is_refused(cluster: LocalCluster) -> None:
    cluster.hosts["w1"]["tf_worker_python"] = "/nonexistent/bin/python3"
    cluster.assert_refused(cluster.play(), "host w1: worker interpreter /nonexistent/bin/python3 does not run")


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
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    data = {"tf_runs_dir": str(tmp / "runs"), **extra}
    return subprocess.run(
        [str(PLAYBOOK_BIN), "train.yml", "-i", str(path), "-e", json.dumps(data), *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900, check=False,
    )


def user_processes(hosts: NamespaceHosts, index: int, needle: str) -> list[str]:
    rc, out, _ = hosts.run(index, "ps -u $(id -u) -o pid=,args=")
    assert rc == 0
    return [line for line in out.splitlines() if needle in line]


def port_free(hosts: NamespaceHosts, index: int, port: int) -> bool:
    code = ("import socket; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
            f"s.bind(('0.0.0.0', {port})); print('free')")
    rc, out, _ = hosts.run(index, f'python3 -c "{code}"')
    return rc == 0 and out.strip() == "free"


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
    proc = subprocess.run(["nsenter", "--target", str(node2.sshd_pid), "--net", "nft", "-f", "-"],
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
    # Every host's listener was stopped after the refusal, which was made again as is.
    assert "End the probe listeners of a refused run" in output
    _before, banner, again = output.partition("Refuse the run for what failed in the probe")
    assert banner, output[-3000:]
    assert f"host node0 cannot reach worker 2 on host node2 at {node2.address}:2222" in again, output[-3000:]
    for index in range(3):
        assert not hosts.run(index, "test -e ~/tf-runbook/runs/blocked")[0] == 0
        assert user_processes(hosts, index, "tf_supervisor") == []
        assert port_free(hosts, index, 2222), f"node{index}: the probe listener still holds port 2222"
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
        while port_free(hosts, 1, 2222):
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
    return subprocess.run(["nsenter", "--target", str(node.sshd_pid), "--net", "nft", "list", "tables"],
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
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    data = {"tf_runs_dir": str(tmp_path / "runs"), "tf_run_id": "walled", "tf_firewall_enabled": True,
            "tf_train_args": ["--epochs=3", "--steps-per-epoch=1500"]}
    # node2 is in the inventory but not in the cluster: it stands for any other machine.
    controller = subprocess.Popen(
        [str(PLAYBOOK_BIN), "train.yml", "-i", str(path), "-e", json.dumps(data), "--limit", "node0,node1"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
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
