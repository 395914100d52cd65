"""The preflight probe's settle: how long a host keeps trying a refused port (its peer's
listener not up yet) and waits to hear its peers, and how long a listener lives. Rendered
from the role's own task files, as a run renders them (roles/tf_preflight/tasks/)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible._internal._datatag._tags import TrustedAsTemplate
from ansible.template import Templar

REPO = Path(__file__).resolve().parents[2]
TASKS = REPO / "roles" / "tf_preflight" / "tasks"


def probe_vars() -> dict[str, str]:
    """The vars of the probe's block in main.yml (the settle is one of them)."""
    for task in yaml.safe_load((TASKS / "main.yml").read_text(encoding="utf-8")):
        if task.get("name", "").startswith("Probe every worker host"):
            return task["vars"]
    raise AssertionError("main.yml has no task 'Probe every worker host ...'")


def look_args() -> dict[str, Any]:
    for task in yaml.safe_load((TASKS / "hosts.yml").read_text(encoding="utf-8")):
        if "tf_runbook.multiworker.tf_preflight_host" in task:
            return task["tf_runbook.multiworker.tf_preflight_host"]
    raise AssertionError("hosts.yml has no tf_preflight_host task")


def render(text: str, **variables: Any) -> Any:
    trusted = {name: TrustedAsTemplate().tag(value) if isinstance(value, str) else value
               for name, value in variables.items()}
    return Templar(loader=None, variables=trusted).template(TrustedAsTemplate().tag(text))


def settle(timeout: int, hosts: int) -> int:
    return int(render(probe_vars()["__tf_preflight_settle"], tf_preflight_probe_timeout=timeout,
                      ansible_play_hosts=[f"node{i}" for i in range(hosts)]))


@pytest.mark.parametrize("timeout", [5, 30])
def test_the_settle_is_the_probe_timeout_and_one_second_per_host(timeout: int) -> None:
    """On 128 namespace hosts the last host's run started 88 s after the first's, and half
    a second per host (69 s) refused hosts 83 to 127: a second per host."""
    expected = [timeout + 1, timeout + 2, timeout + 16, timeout + 128]
    assert [settle(timeout, hosts) for hosts in (1, 2, 16, 128)] == expected


@pytest.mark.parametrize(("lifetime", "hosts", "expected"), [(120, 2, 120), (120, 128, 5 + 128 + 5), (600, 128, 600)])
def test_a_listener_lives_at_least_as_long_as_its_peers_try_it(lifetime: int, hosts: int, expected: int) -> None:
    """A peer tries a refused port for the settle, and connects within one more timeout."""
    listen = render(look_args()["listen"], tf_preflight_listener_lifetime=lifetime, tf_preflight_probe_timeout=5,
                    __tf_preflight_settle=settle(5, hosts), __tf_preflight_listen=True,
                    __tf_preflight_pairs={"peers": ["node1"], "endpoints": []})
    assert listen["lifetime"] == expected


def test_the_one_run_probe_tries_and_waits_for_the_settle() -> None:
    reach = render(look_args()["reach"], tf_preflight_probe_timeout=5, __tf_preflight_settle=settle(5, 64),
                   __tf_preflight_one_run=True, __tf_preflight_pairs={"peers": [], "endpoints": []})
    assert (reach["settle"], reach["wait"], reach["timeout"]) == (69, 69, 5)
