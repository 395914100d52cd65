"""The runbook over SSH on network-namespace hosts, as an unprivileged user.

Each host has its own network stack, sshd and private home and /tmp (see nshosts.py).
The runbook is driven exactly as a user drives it; the hosts' state is then checked
independently of it, over SSH with paramiko.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any, Callable

import pytest

from faults import assert_started_together
from helpers import run_playbook
from nshosts import NamespaceHosts
from workerenv import HOST_PYTHON, SHARED_VENV_ROOT, WORKER_PINS

class Runbook:
    """Runs the runbook's playbooks against one NamespaceHosts inventory."""

    def __init__(self, hosts: NamespaceHosts, workdir: Path, **inventory: Any) -> None:
        self.hosts = hosts
        self.runs = workdir / "runs"
        self.inventory = hosts.write_inventory(workdir / "inventory" / "hosts.yml", **inventory)

    def play(self, playbook: str, *args: str, extra: dict[str, Any] | None = None) -> subprocess.CompletedProcess[str]:
        data = {"tf_runs_dir": str(self.runs), **(extra or {})}
        return run_playbook(playbook, *args, inventory=self.inventory, extra=data, timeout=900)

    def summary(self, run_id: str) -> dict[str, Any]:
        return json.loads((self.runs / run_id / "summary.json").read_text())

    # -- independent checks over SSH (paramiko) -------------------------------------

    def exists(self, host: int, path: str) -> bool:
        rc, _, _ = self.hosts.run(host, f"test -e {path}")
        return rc == 0

    def run_processes(self, host: int, run_id: str) -> list[str]:
        """Processes of the user on that host whose command line or cwd mention the run."""
        script = (
            "for p in /proc/[0-9]*; do "
            f"c=$(tr '\\0' ' ' < $p/cmdline 2>/dev/null); d=$(readlink $p/cwd 2>/dev/null); "
            f"case \"$c $d\" in *{run_id}*) echo \"${{p#/proc/}} $c\";; esac; done"
        )
        rc, out, _ = self.hosts.run(host, script)
        assert rc == 0
        return [line for line in out.splitlines() if line.strip() and "for p in" not in line]


def assert_trained(book: Runbook, result: subprocess.CompletedProcess[str], run_id: str, expect: list[tuple[str, int]]) -> dict[str, Any]:
    """The run succeeded with workers (host, port) in index order; checked on every side."""
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
    summary = book.summary(run_id)
    assert summary["status"] == "succeeded", summary["checks"]
    assert [(w["host"], w["port"]) for w in summary["workers"]] == expect
    for worker in summary["workers"]:
        assert Path(worker["log"]).is_file(), worker
    return summary


def test_three_hosts_same_port_with_forks_one_train_and_only_the_chief_writes_its_marker(
    make_ns_hosts: Callable[..., NamespaceHosts], tmp_path: Path, worker_python: str
) -> None:
    """--forks 1 still starts every worker: armed one host after another, started together
    on one go. (One run for what were two tests, each a full training; every other run on
    several hosts, three in test_faults.py, uses the default forks.)"""
    hosts = make_ns_hosts(count=3)
    book = Runbook(hosts, tmp_path, port=2222, groupvars={"tf_worker_python": worker_python})
    result = book.play("train.yml", "--forks", "1", extra={"tf_run_id": "three"})
    assert_trained(book, result, "three", [("node0", 2222), ("node1", 2222), ("node2", 2222)])
    run = "~/tf-runbook/runs/three"
    assert book.exists(0, f"{run}/worker-0/multiworker-complete.txt")
    for host in (1, 2):
        assert book.exists(host, f"{run}/worker-{host}/worker.log")
        assert not book.exists(host, f"{run}/worker-{host}/multiworker-complete.txt")
        # Private filesystems: a host holds only its own worker's directory.
        assert not book.exists(host, f"{run}/worker-0")
    for host in range(3):
        assert book.run_processes(host, "three") == []
        rc, out, _ = hosts.run(host, f"stat -c %a {run}")
        assert out.strip() == "700"
    assert_started_together(hosts, "~/tf-runbook/runs/three", {0: 0, 1: 1, 2: 2})
    # Every worker saw the full cluster list, with the same port on three addresses.
    cluster = [f"{h.address}:2222" for h in hosts.hosts]
    assert book.summary("three")["cluster"]["worker"] == cluster


def test_limit_to_two_of_three_hosts_trains_a_two_worker_cluster(
    make_ns_hosts: Callable[..., NamespaceHosts], tmp_path: Path, worker_python: str
) -> None:
    hosts = make_ns_hosts(count=3)
    book = Runbook(hosts, tmp_path, groupvars={"tf_worker_python": worker_python})
    result = book.play("train.yml", "--limit", "node0,node2", extra={"tf_run_id": "limited"})
    summary = assert_trained(book, result, "limited", [("node0", 2222), ("node2", 2222)])
    assert summary["cluster"]["size"] == 2
    assert book.exists(2, "~/tf-runbook/runs/limited/worker-1/worker.log")
    assert not book.exists(1, "~/tf-runbook/runs/limited")


def test_two_hosts_with_two_slots_each(
    make_ns_hosts: Callable[..., NamespaceHosts], tmp_path: Path, worker_python: str
) -> None:
    hosts = make_ns_hosts(count=2)
    book = Runbook(hosts, tmp_path, slots=2, port=2300, groupvars={"tf_worker_python": worker_python})
    result = book.play("train.yml", extra={"tf_run_id": "slots"})
    summary = assert_trained(
        book, result, "slots", [("node0", 2300), ("node0", 2301), ("node1", 2300), ("node1", 2301)]
    )
    assert summary["cluster"]["size"] == 4
    assert book.exists(1, "~/tf-runbook/runs/slots/worker-3/worker.log")
    assert book.exists(0, "~/tf-runbook/runs/slots/worker-0/multiworker-complete.txt")
    assert not book.exists(0, "~/tf-runbook/runs/slots/worker-1/multiworker-complete.txt")
    assert_started_together(hosts, "~/tf-runbook/runs/slots", {0: 0, 1: 0, 2: 1, 3: 1})


def test_managed_virtualenv_is_built_offline_from_the_controllers_wheelhouse(
    make_ns_hosts: Callable[..., NamespaceHosts], tmp_path: Path
) -> None:
    """The default interpreter path: a virtualenv per host, from a wheelhouse the controller
    prepares once, on hosts that have no route out."""
    hosts = make_ns_hosts(count=2)
    wheelhouse = SHARED_VENV_ROOT / "wheelhouse"
    book = Runbook(
        hosts,
        tmp_path,
        groupvars={
            "tf_worker_python": "",
            "tf_worker_venv_bootstrap_python": HOST_PYTHON,
            "tf_worker_requirements": WORKER_PINS,
            "tf_worker_wheelhouse": str(wheelhouse),
        },
    )
    # The hosts really are offline: they cannot even resolve the package index (this
    # sends no packet: the hosts have no name server).
    rc, _, _ = hosts.run(0, "python3 -c \"import socket; socket.getaddrinfo('pypi.org', 443)\"")
    assert rc != 0
    result = book.play("train.yml", extra={"tf_run_id": "offline"})
    assert_trained(book, result, "offline", [("node0", 2222), ("node1", 2222)])
    for host in range(2):
        rc, out, _ = hosts.run(host, "~/tf-runbook/venv/bin/python -c 'import tensorflow as tf; print(tf.__version__)'", timeout=120)
        assert (rc, out.strip()) == (0, "2.21.0")
        assert book.exists(host, "~/tf-runbook/wheelhouse/requirements.txt")

    # Second run: the virtualenv is up to date, so pip does not run again.
    again = book.play("train.yml", extra={"tf_run_id": "offline-2"})
    assert_trained(book, again, "offline-2", [("node0", 2222), ("node1", 2222)])
    # ansible.cfg hides skipped tasks: the pip task shows only when it ran, and says how
    # far the install is on each host, from where it goes to pip's last step.
    assert "Start the install of the worker requirements in the background" in result.stdout
    for name in ("node0", "node1"):
        assert f"{name}: installing the worker requirements into " in result.stdout, result.stdout[-3000:]
        assert re.search(rf"^{name}: installing the worker requirements: (all \d+ packages in hand|installed; finishing)",
                         result.stdout, re.M), result.stdout[-3000:]
    assert "Start the install of the worker requirements in the background" not in again.stdout
    assert "installing the worker requirements" not in again.stdout


def test_a_launch_that_fails_on_one_host_stops_what_the_others_armed(
    make_ns_hosts: Callable[..., NamespaceHosts], tmp_path: Path
) -> None:
    """An armed launch whose module run fails on one host (nothing started there): the
    refusal names that host and why, and the workers the other hosts armed are stopped
    before the playbook ends, not left holding their ports until the go's timeout."""
    hosts = make_ns_hosts(count=2)
    trivial = Path(__file__).parent / "jobs" / "trivial_job.py"
    # node1 changes after its preflight: its tf_worker_base_dir, read again by the launch
    # once the launch noted its start, leads under /proc, where nothing can be made. (A
    # runs/ of root's, which failed the launch the same way, is refused by the preflight.)
    book = Runbook(
        hosts, tmp_path, groupvars={"tf_worker_python": HOST_PYTHON, "tf_train_script": str(trivial)},
        hostvars={1: {"tf_worker_base_dir": "{{ '/proc/tf-runbook' if tf_launch_started_at is defined else '~/tf-runbook' }}"}},
    )  # fmt: skip
    node1 = hosts.hosts[1]
    result = book.play("train.yml", extra={"tf_run_id": "armfail"})
    assert result.returncode != 0
    assert "The launch failed on 1 host(s), no worker was started" in result.stdout, result.stdout[-4000:]
    assert "host node1: nothing was launched: cannot create /proc/tf-runbook" in result.stdout, result.stdout[-4000:]
    assert not node1.private_path(f"{node1.home}/tf-runbook/runs/armfail").exists()
    # node0 had armed its worker: stopped by the refusal, nothing of the run left.
    assert book.run_processes(0, "armfail") == []
    rc, out, _ = hosts.run(0, "cat ~/tf-runbook/runs/armfail/worker-0/exit.json")
    assert rc == 0, out
    record = json.loads(out)
    assert record["stopped_by"] == "runbook" and "the launch was refused before the go: host node1" in record["reason"]
    assert book.run_processes(1, "armfail") == []


def test_a_host_unreachable_at_the_launch_stops_what_the_others_armed(
    make_ns_hosts: Callable[..., NamespaceHosts], tmp_path: Path
) -> None:
    """An armed launch that cannot reach one host (it passed the preflight): the refusal
    names that host, and the workers the other host armed are stopped before the playbook
    ends, not left holding their ports until the go's timeout."""
    hosts = make_ns_hosts(count=2)
    trivial = Path(__file__).parent / "jobs" / "trivial_job.py"
    # node1's SSH port turns to one where nothing listens once the launch noted its start
    # (a controller-side fact, set just before the launch's module run): connection refused.
    book = Runbook(
        hosts, tmp_path, groupvars={"tf_worker_python": HOST_PYTHON, "tf_train_script": str(trivial)},
        hostvars={1: {"ansible_port": "{{ 1 if tf_launch_started_at is defined else 22 }}"}},
    )  # fmt: skip
    result = book.play("train.yml", extra={"tf_run_id": "armgone"})
    assert result.returncode != 0
    assert "The launch failed on 1 host(s), no worker was started: host node1: could not be reached:" in result.stdout, result.stdout[-4000:]
    assert "port 1: Connection refused" in result.stdout
    # node0 had armed its worker: stopped by the refusal, nothing of the run left.
    assert book.run_processes(0, "armgone") == []
    rc, out, _ = hosts.run(0, "cat ~/tf-runbook/runs/armgone/worker-0/exit.json")
    assert rc == 0, out
    record = json.loads(out)
    assert record["stopped_by"] == "runbook" and "the launch was refused before the go: host node1" in record["reason"]
    assert not book.exists(1, "~/tf-runbook/runs/armgone/worker-1/state.json")
