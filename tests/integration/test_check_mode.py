"""`--check` is a dry run of the whole runbook, and `--diff` shows what the run would create.

The preflight runs for real (its probe listeners included); afterwards nothing new exists
on any host or under runs/, no process is left, and the run's TF_CONFIGs show in the diff.
A bad inventory is refused under --check exactly as without it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from helpers import port_held, run_playbook
from nshosts import NamespaceHosts
from test_preflight import (  # noqa: F401  (sudo_for is a fixture)
    EARLIER,
    LocalCluster,
    command_lines,
    digest,
    ensure_tool,
    nft_tables,
    ns_play,
    port_free,
    sudo_for,
)

from test_smoke import extra
from test_smoke import run_playbook as run_smoke_playbook


def tree(root: Path) -> list[str]:
    """Every path under root (directories too), but the inventory the tests rewrite."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.name != "inventory.yml")


def local_port_free(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def phase(cluster: LocalCluster, playbook: str, *args: str, **extra: object) -> subprocess.CompletedProcess[str]:
    return run_playbook(playbook, *args, inventory=cluster.inventory(), extra={"tf_runs_dir": str(cluster.runs), **extra})


def test_the_smoke_inventory_under_check_ends_with_success_and_creates_nothing(tmp_path: Path) -> None:
    """The report of issue 15: `train.yml --limit localhost --check` failed in the wait phase."""
    dirs = {"base": tmp_path / "host", "runs": tmp_path / "runs"}
    result = run_smoke_playbook("train.yml", "--check", *extra(dirs, tf_run_id="dry", tf_worker_port=2480))
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    assert "--check: run dry would start 2 worker(s)" in result.stdout
    assert list(tmp_path.iterdir()) == []
    assert local_port_free(2480) and local_port_free(2481)


def test_check_and_diff_on_local_hosts_preview_the_run_and_change_nothing(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path)
    cluster.inventory()
    before = tree(tmp_path)
    processes = set(command_lines())

    dry = cluster.play("--check", "--diff", tf_run_id="dry")
    output = dry.stdout + dry.stderr
    assert dry.returncode == 0, output[-4000:]
    # The diff: the cluster list once, then each worker's directory, index and port, the
    # job files with their hashes and the interpreter.
    assert output.count("TF_CONFIG cluster (2 workers): 127.0.0.1:2460, 127.0.0.1:2470") == 2, output[-4000:]
    assert f"TF_CONFIG {tmp_path}/w0/runs/dry/worker-0/tf_config.json: index 0, port 2460" in output
    assert f"TF_CONFIG {tmp_path}/w1/runs/dry/worker-1/tf_config.json: index 1, port 2470" in output
    assert f"+directory {tmp_path}/w1/runs/dry/worker-1/ (mode 0700)" in output
    assert f"+file {tmp_path}/w0/runs/dry/job/multiworker_train.py sha256 " in output
    assert f" interpreter: {sys.executable}" in output
    assert "--check: run dry would start 2 worker(s)" in output
    # The preflight ran for real: every host connected to the probe listeners, in the
    # look's own module run (the one-run probe: --forks covers both hosts), so the
    # two-step connect was skipped (skipped tasks are not shown).
    assert "Look at this host's worker ports, free disk, GPUs and earlier runs" in output
    assert "Connect from this host to the worker ports it must reach" not in output
    # Its listeners ended by themselves once both hosts connected (a listener that did
    # not hear every peer is reported held, and stopped by the task below): no stop ran on
    # any host, and the ports are free (below).
    assert "End the probe listeners" not in output, output[-4000:]

    plain = cluster.play("--check", tf_run_id="dry")
    assert plain.returncode == 0, (plain.stdout + plain.stderr)[-4000:]
    assert "TF_CONFIG cluster" not in plain.stdout

    # The phases alone: stop.yml and collect.yml of the earlier run only report.
    stop = phase(cluster, "playbooks/stop.yml", "--check", "--diff", tf_run_id=EARLIER)
    assert stop.returncode == 0, (stop.stdout + stop.stderr)[-4000:]
    collect = phase(cluster, "playbooks/collect.yml", "--check", "--diff", tf_run_id=EARLIER)
    assert collect.returncode == 0, (collect.stdout + collect.stderr)[-4000:]
    assert f"+{cluster.runs}/{EARLIER}/w1/worker-1/worker.log" in collect.stdout

    # Nothing new on the hosts or under runs/, the earlier run intact, no process left.
    assert tree(tmp_path) == before
    assert digest(tmp_path) == {**cluster.before, "inventory.yml": digest(tmp_path)["inventory.yml"]}
    assert local_port_free(2460) and local_port_free(2470)
    # A probe's module (and the listener it forks) names tf_preflight; another test's
    # ansible-playbook running beside this one (the namespace-host shard's dry run) may
    # too, in its extra vars: it is not this test's.
    assert not [cmd for cmd in set(command_lines()) - processes
                if str(tmp_path) in cmd or ("tf_preflight" in cmd and "ansible-playbook" not in cmd)]


def test_check_refuses_a_bad_inventory_with_the_preflight_message(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path)
    with port_held(2470):
        output = cluster.assert_refused(
            cluster.play("--check", "--diff", tf_run_id="dry"),
            "Preflight refused the run: host w1: worker 1's port 2470 is already in use by pid",
        )
        assert "TF_CONFIG cluster" not in output
    assert not (tmp_path / "w0" / "runs" / "dry").exists() and not (cluster.runs / "dry").exists()


def host_processes(hosts: NamespaceHosts, index: int) -> set[str]:
    """Every process in the host's namespace but sshd's, as 'pid command line'."""
    found = set()
    for pid in hosts.netns_pids(index):
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if not comm.startswith("sshd"):
            found.add(f"{pid} {cmd}")
    return found


def test_check_and_diff_on_namespace_hosts_with_the_firewall(
    make_ns_hosts: Callable[..., NamespaceHosts], tmp_path: Path, worker_python: str,
    sudo_for: Callable[[str], None],  # noqa: F811
) -> None:
    ensure_tool("/usr/sbin/nft", "nftables")
    hosts = make_ns_hosts(count=2)
    sudo_for(hosts.user)
    inventory = {"groupvars": {"tf_worker_python": worker_python}}
    processes = [host_processes(hosts, i) for i in range(2)]

    dry = ns_play(hosts, tmp_path, "--check", "--diff", inventory=inventory, tf_run_id="dry",
                  tf_firewall_enabled=True)
    output = dry.stdout + dry.stderr
    assert dry.returncode == 0, output[-4000:]
    a0, a1 = (h.address for h in hosts.hosts)
    assert output.count(f"TF_CONFIG cluster (2 workers): {a0}:2222, {a1}:2222") == 2, output[-4000:]
    for index in range(2):
        assert f"/tf-runbook/runs/dry/worker-{index}/tf_config.json: index {index}, port 2222" in output
    assert "+    elements = { 2222 timeout " in output
    assert f"+    ip saddr {{ {a0}, {a1} }} tcp dport @ports accept" in output
    assert "--check: run dry would start 2 worker(s)" in output
    # Nothing on the hosts: no directory, no table, no process, the ports free again.
    for index in range(2):
        assert hosts.run(index, "test -e ~/tf-runbook")[0] != 0
        assert "tf_runbook_" not in nft_tables(hosts, index)
        assert port_free(hosts, index, 2222)
    deadline = time.monotonic() + 10
    while [host_processes(hosts, i) - processes[i] for i in range(2)] != [set(), set()]:
        assert time.monotonic() < deadline, [host_processes(hosts, i) - processes[i] for i in range(2)]
        time.sleep(0.5)
    assert not (tmp_path / "runs").exists()

    # A bad inventory is refused, naming the problem: node1's address is wrong, so node0
    # cannot reach worker 1.
    bad = dict(inventory, hostvars={1: {"tf_worker_address": "10.255.255.1"}})
    refused = ns_play(hosts, tmp_path, "--check", "--diff", inventory=bad, tf_run_id="dry",
                      tf_preflight_probe_timeout=2)
    output = refused.stdout + refused.stderr
    assert refused.returncode != 0
    assert "Preflight refused the run: host node0 cannot reach worker 1 on host node1 at 10.255.255.1:2222" in output, (
        output[-4000:]
    )
    for index in range(2):
        assert hosts.run(index, "test -e ~/tf-runbook")[0] != 0
        assert port_free(hosts, index, 2222)
