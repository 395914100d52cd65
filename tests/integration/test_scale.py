"""The runbook at scale (issue 26 "Scale"): 64 namespace hosts, the reachability probe on
with its default settings, train and are judged.

The job is trivial (no TensorFlow: tests/integration/jobs/trivial_job.py), so what is
tested is the runbook's orchestration over 64 hosts: the preflight's probe (every host
reaches every worker port, 4096 connections; with the default --forks 32, below the host
count, in the two-step probe), the armed launch, the wait, the collect and the verdict.
Static neighbour entries: with 64 hosts meeting at once on this machine's test bridge, the
ARP burst loses packets (nshosts.py), which real switches do not.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from nshosts import NamespaceHosts
from test_multihost import Runbook, assert_trained

HOSTS = 64
TRIVIAL_JOB = Path(__file__).parent / "jobs" / "trivial_job.py"


def test_sixty_four_hosts_train_with_the_reachability_probe_on(
    make_ns_hosts: Callable[..., NamespaceHosts], tmp_path: Path
) -> None:
    hosts = make_ns_hosts(count=HOSTS, static_neighbors=True)
    book = Runbook(hosts, tmp_path, groupvars={
        "tf_worker_python": "/usr/bin/python3", "tf_train_script": str(TRIVIAL_JOB), "tf_startup_timeout": 0,
    })
    began = time.monotonic()
    result = book.play("train.yml", extra={"tf_run_id": "sixtyfour"})
    seconds = time.monotonic() - began
    summary = assert_trained(book, result, "sixtyfour", [(host.name, 2222) for host in hosts.hosts])
    assert summary["cluster"]["size"] == HOSTS
    # The probe ran, from every host, and refused nothing.
    assert "Connect from this host to every worker port of the cluster" in result.stdout
    assert "Preflight refused" not in result.stdout
    # The last --forks (32) hosts waited for their own listener to hear every peer, so the
    # serial stop after the connects had only the others' listeners to see to.
    _, banner, rest = result.stdout.partition("End the probe listeners that outlived their host's connect")
    stopped = rest.split("TASK [", 1)[0] if banner else ""
    assert not [h.name for h in hosts.hosts[HOSTS - 32:] if f"(item={h.name})" in stopped], stopped[-3000:]
    print(f"64 hosts: train.yml took {seconds:.1f} s, host setup {hosts.setup_seconds:.1f} s")
