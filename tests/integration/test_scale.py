"""The runbook at scale (issue 26 "Scale"): 64 namespace hosts, the reachability probe on
with its default settings, train and are judged.

The job is trivial (no TensorFlow: tests/integration/jobs/trivial_job.py), so what is
tested is the runbook's orchestration over 64 hosts: the preflight's probe (every host
reaches every worker port, 4096 connections: with ansible.cfg's forks (128) in one module
run per host), the armed launch, the wait, the collect and the verdict; and the two-step
probe (--forks below the host count) on 24 hosts with --forks 12: the same steps as 64
hosts with --forks 32, in a third of the test's time.
Static neighbour entries: the namespace hosts share the kernel's one neighbour table, which
64 hosts meeting at once overflow (nshosts.py); a real host has its own.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from typing import Callable

from helpers import task_output
from nshosts import NamespaceHosts
from test_multihost import Runbook, assert_trained

HOSTS = 64
TRIVIAL_JOB = Path(__file__).parent / "jobs" / "trivial_job.py"


TWO_STEP_CONNECT = "Connect from this host to the worker ports it must reach"


@pytest.mark.parametrize(("count", "forks"), [(HOSTS, None), (24, 12)], ids=["64-hosts-default-forks", "24-hosts-forks-12"])
def test_sixty_four_hosts_train_with_the_reachability_probe_on(
    make_ns_hosts: Callable[..., NamespaceHosts], tmp_path: Path, count: int, forks: int | None
) -> None:
    hosts = make_ns_hosts(count=count, static_neighbors=True)
    book = Runbook(hosts, tmp_path, groupvars={
        "tf_worker_python": "/usr/bin/python3", "tf_train_script": str(TRIVIAL_JOB), "tf_startup_timeout": 0,
    })
    began = time.monotonic()
    result = book.play("train.yml", *(("--forks", str(forks)) if forks else ()), extra={"tf_run_id": "sixtyfour"})
    seconds = time.monotonic() - began
    summary = assert_trained(book, result, "sixtyfour", [(host.name, 2222) for host in hosts.hosts])
    assert summary["cluster"]["size"] == count
    assert "Preflight refused" not in result.stdout
    assert "Look at this host's worker ports" in result.stdout
    if forks is None:
        # One fork per host: the look listened and connected in its one module run, and
        # the two-step connect was skipped (shown only where it ran).
        assert TWO_STEP_CONNECT not in result.stdout
        print(f"{count} hosts: train.yml took {seconds:.1f} s, host setup {hosts.setup_seconds:.1f} s")
        return
    # The two-step probe ran, from every host, and refused nothing.
    assert TWO_STEP_CONNECT in result.stdout
    # The last --forks hosts waited for their own listener to hear every peer, so the
    # serial stop after the connects had only the others' listeners to see to.
    # The task's output must be there (a renamed task fails here, not on an empty string).
    stopped = task_output(result.stdout, "End the probe listeners that outlived their host's connect")
    assert not [h.name for h in hosts.hosts[count - forks:] if f"(item={h.name})" in stopped], stopped[-3000:]
    print(f"{count} hosts, --forks {forks}: train.yml took {seconds:.1f} s, host setup {hosts.setup_seconds:.1f} s")
