"""Runs never mix and the firewall never lingers (issue 11), on one set of namespace hosts.

One module-scoped set of three hosts serves every test here, in file order:

1. a training run with the firewall on, where node1 is multi-homed (it advertises a
   secondary address, its packets leave from its primary one), with a checkpoint
   directory under ``~``: it trains, the tables go, the results are private;
2. the same run id again on another host (``--limit node2``): refused by the controller;
3. a run where node1 fails in the launch play after its table was made: the table still
   goes, on every host;
4. the probe: a port held by an unrelated process gets no byte from the probe's cleanup,
   and an unrelated service at a wrong address does not pass as a worker.

And, without SSH, the firewall module in a fresh network namespace: the table expires by
itself and the next run sweeps it.
"""

from __future__ import annotations

import ipaddress
import json
import os
import pwd
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from helpers import tree_digest
from nshosts import NamespaceHosts
from test_preflight import ensure_tool, nft_tables, ns_play

REPO = Path(__file__).resolve().parents[2]
FIREWALL_MODULE = REPO / "plugins" / "modules" / "tf_firewall.py"
SUDOERS = Path("/etc/sudoers.d/tf-runbook-tests-isolation")

# An unrelated service: accepts anything and appends what it is sent to a file.
RECORDER = """\
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(16)
while True:
    c, _ = s.accept()
    c.settimeout(3)
    data = b""
    try:
        while True:
            chunk = c.recv(256)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    c.close()
    with open(sys.argv[2], "ab") as f:
        f.write(data)
"""


@pytest.fixture(scope="module")
def hosts(multihost_env: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NamespaceHosts]:
    ensure_tool("/usr/sbin/nft", "nftables")
    ensure_tool("/usr/bin/sudo", "sudo")
    with NamespaceHosts(3, tmp_path_factory.mktemp("isolation"), keep_logs=True) as made:
        SUDOERS.write_text(f"{made.user} ALL=(root) NOPASSWD: ALL\n")
        SUDOERS.chmod(0o440)
        try:
            yield made
        finally:
            SUDOERS.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("isolation-runs")


def secondary_address(hosts: NamespaceHosts) -> str:
    """A free address of the hosts' subnet, for node1's second address."""
    assert hosts.network is not None
    used = {h.address for h in hosts.hosts} | {hosts.gateway}
    return next(str(a) for a in reversed(list(hosts.network.hosts())) if str(a) not in used)


digest = tree_digest


def output(result: subprocess.CompletedProcess[str]) -> str:
    return (result.stdout + result.stderr)[-5000:]


def test_a_multi_homed_host_trains_behind_the_firewall_which_then_goes(
    hosts: NamespaceHosts, workdir: Path, worker_python: str
) -> None:
    """Points 6, 5, 2, 4 and 13 (an end-to-end run judged on the controller's clock)."""
    second = secondary_address(hosts)
    node1 = hosts.host(1)
    subprocess.run(["ip", "-n", node1.namespace, "addr", "add", f"{second}/{hosts.network.prefixlen}", "dev", "eth0"],
                   check=True)
    result = ns_play(
        hosts, workdir, "--limit", "node0,node1",
        inventory={"groupvars": {"tf_worker_python": worker_python, "tf_checkpoint_dir": "~/ckpt"},
                   "hostvars": {1: {"tf_worker_address": second}}},
        tf_run_id="iso-a", tf_firewall_enabled=True, tf_startup_timeout=60,
    )
    assert result.returncode == 0, output(result)
    summary = json.loads((workdir / "runs" / "iso-a" / "summary.json").read_text())
    assert summary["status"] == "succeeded"
    assert summary["cluster"]["worker"] == [f"{hosts.host(0).address}:2222", f"{second}:2222"]
    # The tables went with the run.
    for index in (0, 1):
        assert "tf_runbook_" not in nft_tables(hosts, index)
    # A checkpoint directory under ~ is the user's home, one directory per run id.
    for index in (0, 1):
        assert hosts.run(index, f"test -s ~/ckpt/iso-a/worker-{index}/latest")[0] == 0
        assert hosts.run(index, "test -e ~/tf-runbook/runs/iso-a/worker-*/'~'")[0] != 0
    # The controller's copy is private: runs/ and the run's directory, and every file fetched.
    run = workdir / "runs" / "iso-a"
    assert oct(run.stat().st_mode & 0o777) == "0o700"
    assert oct((workdir / "runs").stat().st_mode & 0o777) == "0o700"
    fetched = [p for host in ("node0", "node1") for p in (run / host).rglob("*")]
    assert any(p.name == "state.json" for p in fetched)
    for path in fetched:
        assert oct(path.stat().st_mode & 0o777) == ("0o700" if path.is_dir() else "0o600"), path


def test_a_run_id_used_with_other_hosts_is_refused_on_the_controller(hosts: NamespaceHosts, workdir: Path,
                                                                     worker_python: str) -> None:
    """Point 1: iso-a ran on node0 and node1; node2 has never seen it."""
    run = workdir / "runs" / "iso-a"
    assert run.is_dir(), "needs the run of the test before"
    before = digest(run)
    result = ns_play(hosts, workdir, "--limit", "node2", inventory={"groupvars": {"tf_worker_python": worker_python}},
                     tf_run_id="iso-a")
    assert result.returncode != 0
    assert (f"Preflight refused the run: run id 'iso-a' was already used on this controller ({run} exists)"
            in result.stdout), output(result)
    assert digest(run) == before
    assert hosts.run(2, "test -e ~/tf-runbook/runs/iso-a")[0] != 0


def test_a_host_that_fails_after_its_table_was_made_loses_the_table_too(hosts: NamespaceHosts, workdir: Path,
                                                                       worker_python: str) -> None:
    """Point 5: node1's launch fails in the launch play, after the firewall role made its
    table; the refusal stops what node0 armed, and both tables go. Then node1 alone, whose
    launch (not armed) fails its play: its table goes too.

    The launch fails because node1 changed after its preflight: its tf_worker_base_dir,
    read again by the launch once the launch noted its start, leads under /proc, where
    nothing can be made. (A runs/ of root's, which failed the launch the same way, is now
    refused by the preflight, before any table is made: checked first.)"""
    node1 = hosts.hosts[1]
    base = node1.private_path(f"{node1.home}/tf-runbook")
    runs = base / "runs"
    user = pwd.getpwnam(node1.user)
    if not base.exists():  # this test alone: the user's base directory, as a run makes it
        base.mkdir(parents=True)
        os.chown(base, user.pw_uid, user.pw_gid)
        base.chmod(0o700)
    made = not runs.exists()
    runs.mkdir(exist_ok=True)
    mode = runs.stat().st_mode & 0o7777
    os.chown(runs, 0, 0)
    runs.chmod(0o755)
    try:
        refused = ns_play(
            hosts, workdir, "--limit", "node0,node1",
            inventory={"groupvars": {"tf_worker_python": worker_python}},
            tf_run_id="iso-c0", tf_firewall_enabled=True, tf_startup_timeout=15,
        )
    finally:
        if made:
            runs.rmdir()
        else:
            os.chown(runs, user.pw_uid, user.pw_gid)
            runs.chmod(mode)
    assert refused.returncode != 0
    assert (f"host node1: {node1.home}/tf-runbook/runs, where the runbook keeps its runs, belongs to root (uid 0), "
            f"not to the remote user {node1.user}") in refused.stdout, output(refused)
    assert "Accept connections to this host's worker ports only from the cluster" not in refused.stdout, output(refused)

    changes = {"tf_worker_base_dir": "{{ '/proc/tf-runbook' if tf_launch_started_at is defined else '~/tf-runbook' }}"}
    result = ns_play(
        hosts, workdir, "--limit", "node0,node1",
        inventory={"groupvars": {"tf_worker_python": worker_python}, "hostvars": {1: changes}},
        tf_run_id="iso-c", tf_firewall_enabled=True, tf_startup_timeout=15,
    )
    tables = {index: nft_tables(hosts, index) for index in (0, 1)}
    # node1 alone: a cluster on one host is not armed, and its launch fails the play.
    alone = ns_play(
        hosts, workdir, "--limit", "node1",
        inventory={"groupvars": {"tf_worker_python": worker_python}, "hostvars": {1: changes}},
        tf_run_id="iso-c1", tf_firewall_enabled=True, tf_startup_timeout=15,
    )
    assert result.returncode != 0
    assert ("The launch failed on 1 host(s), no worker was started: host node1: nothing was launched: "
            "cannot create /proc/tf-runbook") in result.stdout, output(result)
    # node1's table was made before its launch failed, and removed after.
    blocks = {block.split("]", 1)[0]: block for block in result.stdout.split("TASK [")[1:]}
    made = blocks["tf_firewall : Accept connections to this host's worker ports only from the cluster"]
    assert "changed: [node1]" in made, output(result)
    removed = blocks["tf_firewall : Remove the run's firewall rules from this host"]
    assert "changed: [node0]" in removed and "changed: [node1]" in removed, output(result)
    for index in (0, 1):
        assert "tf_runbook_" not in tables[index], f"node{index} kept the run's table"
    assert alone.returncode != 0
    assert "host node1: nothing was launched: cannot create /proc/tf-runbook" in alone.stdout, output(alone)
    blocks = {block.split("]", 1)[0]: block for block in alone.stdout.split("TASK [")[1:]}
    assert "changed: [node1]" in blocks["tf_firewall : Accept connections to this host's worker ports only from the cluster"]
    assert "changed: [node1]" in blocks["tf_firewall : Remove the run's firewall rules from this host"], output(alone)
    assert "tf_runbook_" not in nft_tables(hosts, 1), "node1 kept the table of the run it launched alone"


def start_recorder(hosts: NamespaceHosts, index: int, port: int) -> int:
    assert hosts.run(index, f"cat > /tmp/recorder.py <<'EOF'\n{RECORDER}EOF\n: > /tmp/received")[0] == 0
    rc, out, _ = hosts.run(index, f"setsid python3 /tmp/recorder.py {port} /tmp/received > /dev/null 2>&1 < /dev/null & echo $!")
    assert rc == 0
    deadline = time.monotonic() + 10
    while hosts.run(index, f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 1).close()\"")[0]:
        assert time.monotonic() < deadline, "the recorder never listened"
        time.sleep(0.2)
    assert hosts.run(index, ": > /tmp/received")[0] == 0  # forget the readiness check
    return int(out.strip())


def test_the_probe_sends_nothing_to_a_busy_port_and_knows_its_own_listener(hosts: NamespaceHosts, workdir: Path,
                                                                          worker_python: str) -> None:
    """Point 12. node2's port 2223 is held by an unrelated service that records what it gets."""
    pid = start_recorder(hosts, 2, 2223)
    try:
        # The port is taken on node2: refused, and the cleanup says nothing to that process.
        busy = ns_play(hosts, workdir, "--limit", "node0,node2",
                       inventory={"groupvars": {"tf_worker_python": worker_python, "tf_worker_port": 2223}},
                       tf_run_id="iso-d1")
        assert busy.returncode != 0
        assert "host node2: worker 1's port 2223 is already in use" in busy.stdout, output(busy)
        time.sleep(1)
        assert hosts.run(2, "cat /tmp/received")[1] == "", "the probe's cleanup wrote to someone else's process"

        # node1 advertises node2's address by mistake, where that service answers: any
        # accept used to pass the probe; it must be the probe of node1 for this run.
        wrong = ns_play(hosts, workdir, "--limit", "node0,node1",
                        inventory={"groupvars": {"tf_worker_python": worker_python, "tf_worker_port": 2223},
                                   "hostvars": {1: {"tf_worker_address": hosts.host(2).address}}},
                        tf_run_id="iso-d2", tf_preflight_probe_timeout=3, tf_startup_timeout=15)
        assert wrong.returncode != 0
        assert (f"host node0 cannot reach worker 1 on host node1 at {hosts.host(2).address}:2223: the port answered, "
                "but not as this run's probe on host node1") in wrong.stdout, output(wrong)
        for index in (0, 1):
            assert hosts.run(index, "test -e ~/tf-runbook/runs/iso-d2")[0] != 0
    finally:
        hosts.run(2, f"kill {pid}")


# -- the firewall module alone, in a fresh network namespace ---------------------------


def firewall(netns: str, **args: Any) -> dict[str, Any]:
    proc = subprocess.run(
        ["ip", "netns", "exec", netns, sys.executable, str(FIREWALL_MODULE)],
        input=json.dumps({"ANSIBLE_MODULE_ARGS": args}), capture_output=True, text=True, check=False,
    )
    return json.loads(proc.stdout)


def nft(netns: str, *args: str) -> str:
    return subprocess.run(["ip", "netns", "exec", netns, "/usr/sbin/nft", *args], capture_output=True, text=True,
                          check=True).stdout


def test_the_table_expires_by_itself_and_the_next_run_sweeps_it(multihost_env: None) -> None:
    """Point 5: a lost controller cannot leave the ports closed for ever."""
    ensure_tool("/usr/sbin/nft", "nftables")
    netns = f"tfiso{os.getpid()}"
    subprocess.run(["ip", "netns", "add", netns], check=True)
    try:
        made = firewall(netns, state="present", run_id="lost", ports=[2222, 2223], members=["10.0.0.1"], expires=2)
        assert made.get("changed") and not made.get("failed"), made
        listing = nft(netns, "list", "table", "inet", made["table"])
        assert "2222 timeout 2s" in listing and "tcp dport @ports drop" in listing
        time.sleep(3)
        # Expired: the set is empty, so the drop rule matches nothing any more.
        assert "elements" not in nft(netns, "list", "set", "inet", made["table"], "ports")
        later = firewall(netns, state="present", run_id="later", ports=[2222], members=["10.0.0.1"], expires=600)
        assert later["expired"] == [made["table"]]
        tables = nft(netns, "list", "tables")
        assert made["table"] not in tables and later["table"] in tables
        assert firewall(netns, state="present", run_id="x", ports=[2222], members=[])["failed"]
    finally:
        subprocess.run(["ip", "netns", "del", netns], check=False)
