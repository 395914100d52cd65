"""The cluster spec's packed copy (plugin_utils/tf_spec_packed.py) and the per-host
arguments that carry every host's list as one JSON string (module_utils/tf_json_list.py).

With ansible-core 2.21 a filter reading a spec of N hosts out of Ansible's lazy containers,
and a task's arguments holding a list of N elements, cost the controller per element, in
every host's task: N squared in all (issue 42). These tests hold the two parts of the fix:
the filters read the packed copy and never the spec's own lists where the copy matches,
and the arguments of the probe and the wait hold no list that grows with the hosts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import tf_cluster
import tf_launch
import tf_preflight
import tf_worker_config
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_json_list import json_list
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_probe_addresses import names_only
from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_spec_packed import PACKED, pack, plain

REPO = Path(__file__).resolve().parents[2]


def hosts(count: int, **extra: Any) -> list[dict[str, Any]]:
    return [{"host": f"h{i}", "address": f"10.1.{i // 200}.{i % 200 + 2}", "port": 2222, "slots": 1, **extra}
            for i in range(count)]


def unpacked(spec: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in spec.items() if key != PACKED}


class UnreadList(list):
    """A list whose elements must not be read: a filter that iterates it fails the test,
    as a spec's lists read out of Ansible's lazy containers cost per element."""

    def __iter__(self):
        raise AssertionError("the spec's own list was read, not its packed copy")

    def __getitem__(self, index):
        raise AssertionError("the spec's own list was read, not its packed copy")


def guarded(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with its lists unreadable (their lengths still known)."""
    return {**spec, "workers": UnreadList(spec["workers"]), "spares": UnreadList(spec["spares"])}


# -- the packed copy -----------------------------------------------------------------


def test_every_maker_of_a_spec_packs_it_and_the_copy_is_the_spec() -> None:
    spec = tf_cluster.tf_cluster_spec(hosts(3) + [{"host": "s0", "address": "10.2.0.2", "port": 2222, "slots": 1,
                                                   "spare": True}])
    assert json.loads(spec[PACKED]) == unpacked(spec)
    auto = tf_cluster.tf_cluster_spec([{"host": "a", "address": "10.0.0.1", "port": "auto", "slots": 2},
                                       {"host": "b", "address": "10.0.0.2", "port": 2222, "slots": 1}])
    ported = tf_cluster.tf_cluster_ports(auto, {"a": [3000, 3001]})
    assert json.loads(ported[PACKED]) == unpacked(ported) and "auto" not in ported
    taken = tf_cluster.tf_cluster_takeover(spec, {"h1": "s0"})
    assert json.loads(taken[PACKED]) == unpacked(taken)
    assert [w["host"] for w in json.loads(taken[PACKED])["workers"]] == ["h0", "s0", "h2"]


def test_plain_reads_the_copy_only_where_it_still_matches_the_spec() -> None:
    spec = tf_cluster.tf_cluster_spec(hosts(4))
    assert plain(spec) == unpacked(spec) and plain(spec) is not spec
    stale = {**spec, "checksum": "0" * 64}
    assert plain(stale) is stale
    shrunk = {**spec, "workers": spec["workers"][:3], "size": 3}
    assert plain(shrunk) is shrunk
    assert plain({**spec, "auto": {"h0": 1}})["auto"] == {"h0": 1}
    broken = {**spec, PACKED: "{not json"}
    assert plain(broken) is broken
    by_hand = unpacked(spec)
    assert plain(by_hand) is by_hand
    assert plain("not a spec") == "not a spec"
    assert pack(by_hand)[PACKED] == spec[PACKED]


@pytest.mark.parametrize("call", [
    lambda s: tf_cluster.tf_workers_on(s, "h2"),
    lambda s: tf_cluster.tf_ports_on(s, "h2"),
    lambda s: tf_cluster.tf_cluster_endpoints(s),
    lambda s: tf_cluster.tf_cluster_host_ports(s),
    lambda s: tf_cluster.tf_preflight_pairs(s, "h2"),
    lambda s: tf_cluster.tf_cluster_addresses(s),
    lambda s: tf_cluster.tf_task_types(s),
    lambda s: tf_worker_config.tf_config_files(tf_cluster.tf_workers_on(s, "h2"), s),
    lambda s: tf_launch.tf_launch_entry(s, "h2", "train.py", ["--epochs", "3"], "started"),
    lambda s: tf_preflight.tf_preflight_address_problems({"h0": {"resolved": {}}}, s),
], ids=["workers_on", "ports_on", "endpoints", "host_ports", "pairs", "addresses", "task_types", "config_files",
        "launch_entry", "address_problems"])
def test_the_filters_run_per_host_read_the_packed_copy_and_give_what_the_spec_gives(call) -> None:
    spec = tf_cluster.tf_cluster_spec(hosts(5) + [{"host": "s0", "address": "10.2.0.2", "port": 2222, "slots": 1,
                                                   "spare": True}])
    expected = call(unpacked(spec))
    assert call(guarded(spec)) == expected
    with pytest.raises(AssertionError, match="packed copy"):
        call(guarded(unpacked(spec)))


# -- lists as one JSON string ----------------------------------------------------------


def test_the_probe_and_the_wait_get_each_list_as_the_json_of_what_the_filter_gives() -> None:
    spec = tf_cluster.tf_cluster_spec([{"host": "c0", "address": "10.0.0.2", "port": 2222, "slots": 1, "type": "chief"}]
                                      + hosts(3, type="worker")
                                      + [{"host": "p0", "address": "10.3.0.2", "port": 2222, "slots": 1, "type": "ps"}])
    pairs = tf_cluster.tf_preflight_pairs(spec, "h1")
    as_json = tf_cluster.tf_preflight_pairs(spec, "h1", True)
    assert {key: json.loads(value) for key, value in as_json.items()} == pairs
    assert json.loads(tf_cluster.tf_cluster_addresses(spec, True)) == [
        "10.0.0.2", "10.1.0.2", "10.1.0.3", "10.1.0.4", "10.3.0.2"]
    types = json.loads(tf_cluster.tf_task_types(spec, True))
    assert types == ["chief", "worker", "worker", "worker", "ps"]


def test_a_json_list_option_takes_a_list_or_its_json_and_names_a_wrong_value() -> None:
    assert json_list(["a", "b"], "peers", str) == ["a", "b"]
    assert json_list('["a","b"]', "peers", str) == ["a", "b"]
    assert json_list("", "peers", str) == [] and json_list(None, "peers", str) == []
    assert json_list('[{"host":"a"}]', "endpoints", dict) == [{"host": "a"}]
    with pytest.raises(ValueError, match=r"option peers: expected a list or a JSON list, got 'a,b'"):
        json_list("a,b", "peers", str)
    with pytest.raises(ValueError, match="option peers: expected a list, got dict"):
        json_list('{"a": 1}', "peers", str)
    with pytest.raises(ValueError, match="option endpoints: every element must be a dict, got 'x'"):
        json_list('["x"]', "endpoints", dict)
    with pytest.raises(ValueError, match="every element must be a int, got 'True'"):
        json_list([True], "ports", int)


def test_a_host_sends_back_the_names_it_resolved_not_the_ip_addresses() -> None:
    resolved = {"10.0.0.1": ["10.0.0.1"], "::1": ["::1"], "gpu-a": ["10.0.0.7"], "gone": []}
    assert names_only(resolved) == {"gpu-a": ["10.0.0.7"], "gone": []}


def test_an_ip_address_a_host_left_out_still_clashes_with_a_name_that_resolves_to_it() -> None:
    spec = {"workers": [
        {"index": 0, "host": "a", "address": "10.0.0.2", "port": 2222},
        {"index": 1, "host": "b", "address": "gpu-b", "port": 2222},
    ]}
    problems = tf_preflight.tf_preflight_address_problems({"a": {"resolved": {"gpu-b": ["10.0.0.2"]}}}, spec)
    assert problems == [
        "host a resolves worker 0's address '10.0.0.2' (host a) and worker 1's 'gpu-b' (host b) to the same "
        "10.0.0.2 port 2222; two workers cannot share an address and port"]
    assert tf_preflight.tf_preflight_address_problems({"a": {"resolved": {"gpu-b": ["10.0.0.3"]}}}, spec) == []
    assert tf_preflight.tf_preflight_address_problems({"a": {"resolved": {"gpu-b": []}}}, spec) == [
        "host a: worker address 'gpu-b' of host b does not resolve there"]


# -- the per-host arguments, rendered by Ansible as a run renders them ---------------------

# Renders, in a process of its own with the collection's plugins loaded, the arguments of
# the probe's look (roles/tf_preflight/tasks/hosts.yml, with main.yml's vars) and of the
# wait (roles/tf_wait/tasks/watch.yml) that hold the cluster, for a spec of N hosts, and
# prints the number of container elements they hold.
RENDER = r"""
import json, sys
from pathlib import Path
import yaml
from ansible.plugins.loader import init_plugin_loader
init_plugin_loader([sys.argv[1]])
from ansible._internal._datatag._tags import TrustedAsTemplate
from ansible.template import Templar
from ansible_collections.tf_runbook.multiworker.plugins.filter.tf_cluster import tf_cluster_spec

repo, count = Path(sys.argv[2]), int(sys.argv[3])
tasks = repo / "roles"
main = yaml.safe_load((tasks / "tf_preflight/tasks/main.yml").read_text())
probe_vars = next(t for t in main if t.get("name", "").startswith("Probe every worker host"))["vars"]
look = next(t for t in yaml.safe_load((tasks / "tf_preflight/tasks/hosts.yml").read_text())
            if "tf_runbook.multiworker.tf_preflight_host" in t)["tf_runbook.multiworker.tf_preflight_host"]
wait = next(t for t in yaml.safe_load((tasks / "tf_wait/tasks/watch.yml").read_text())
            if "tf_runbook.multiworker.tf_worker_wait" in t)["tf_runbook.multiworker.tf_worker_wait"]
spec = tf_cluster_spec([{"host": f"h{i}", "address": f"10.1.{i // 200}.{i % 200 + 2}", "port": 2222, "slots": 1}
                        for i in range(count)])
trusted = lambda text: TrustedAsTemplate().tag(text)
variables = {
    "tf_cluster_spec": spec, "inventory_hostname": "h1", "ansible_play_hosts": [f"h{i}" for i in range(count)],
    "ansible_forks": 128, "tf_preflight_probe_timeout": 5, "tf_preflight_listener_lifetime": 120,
    "tf_preflight_reach_check": True,
    "__tf_preflight_pairs": trusted(probe_vars["__tf_preflight_pairs"]),
    "__tf_preflight_ports": trusted(probe_vars["__tf_preflight_ports"]),
    "__tf_preflight_settle": 10, "__tf_preflight_listen": True, "__tf_preflight_one_run": True,
}
templar = Templar(loader=None, variables=variables)
rendered = {
    "look": {key: templar.template(trusted(look[key])) for key in ("ports", "addresses", "listen", "reach")},
    "wait": {"task_types": templar.template(trusted(wait["task_types"]))},
}

def elements(value):
    if isinstance(value, dict):
        return sum(1 + elements(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(1 + elements(v) for v in value)
    return 0

print(json.dumps({"elements": elements(rendered), "rendered": rendered}, default=str))
"""


def render_args(count: int) -> dict[str, Any]:
    result = subprocess.run([sys.executable, "-c", RENDER, str(REPO / "collections"), str(REPO), str(count)],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_probes_and_the_waits_arguments_hold_no_list_that_grows_with_the_hosts() -> None:
    small, large = render_args(4), render_args(96)
    assert small["elements"] == large["elements"], (small, large)
    look = large["rendered"]["look"]
    # What the module parses is every host's list, whole.
    assert len(json.loads(look["addresses"])) == 96
    assert len(json.loads(look["listen"]["peers"])) == 96
    assert len(json.loads(look["reach"]["endpoints"])) == 96
    assert json.loads(large["rendered"]["wait"]["task_types"]) == ["worker"] * 96
