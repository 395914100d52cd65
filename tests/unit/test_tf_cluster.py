"""tf_cluster_spec: host order, slots, ports, --limit subsets and every rejected value."""

from __future__ import annotations

import re
from typing import Any

import pytest

import tf_cluster
import tf_worker_config
from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_cluster_build import cluster_checksum, format_endpoint
from tf_cluster import AnsibleFilterError, tf_cluster_spec, tf_workers_on


def host(name: str, address: str, port: Any = 2222, slots: Any = 1) -> dict[str, Any]:
    return {"host": name, "address": address, "port": port, "slots": slots}


THREE = [
    host("a", "10.0.0.1", 2222, 2),
    host("b", "10.0.0.2", 3000, 1),
    host("c", "10.0.0.3", 4000, 3),
]


@pytest.mark.parametrize(
    "order",
    [["a", "b", "c"], ["c", "a", "b"], ["b", "c", "a"]],
)
def test_host_order_is_worker_order_and_first_host_is_chief(order: list[str]) -> None:
    hosts = [host(name, f"{name}.example", 2222) for name in order]
    spec = tf_cluster_spec(hosts)
    assert [w["host"] for w in spec["workers"]] == order
    assert [w["index"] for w in spec["workers"]] == [0, 1, 2]
    assert spec["chief"] == order[0]
    assert spec["cluster"] == {"worker": [f"{name}.example:2222" for name in order]}
    assert spec["size"] == 3


def test_slots_get_consecutive_indices_and_ports() -> None:
    spec = tf_cluster_spec(THREE)
    got = [(w["index"], w["host"], w["slot"], w["port"], w["endpoint"]) for w in spec["workers"]]
    assert got == [
        (0, "a", 0, 2222, "10.0.0.1:2222"),
        (1, "a", 1, 2223, "10.0.0.1:2223"),
        (2, "b", 0, 3000, "10.0.0.2:3000"),
        (3, "c", 0, 4000, "10.0.0.3:4000"),
        (4, "c", 1, 4001, "10.0.0.3:4001"),
        (5, "c", 2, 4002, "10.0.0.3:4002"),
    ]
    assert spec["cluster"]["worker"] == [w["endpoint"] for w in spec["workers"]]
    assert spec["size"] == 6


@pytest.mark.parametrize(
    ("name", "indices"),
    [("a", [0, 1]), ("b", [2]), ("c", [3, 4, 5]), ("not-a-worker", [])],
)
def test_workers_on_host(name: str, indices: list[int]) -> None:
    spec = tf_cluster_spec(THREE)
    workers = tf_workers_on(spec, name)
    assert [w["index"] for w in workers] == indices
    assert all(w["host"] == name for w in workers)


def test_same_port_on_different_addresses_is_fine() -> None:
    spec = tf_cluster_spec([host("a", "10.0.0.1", 2222, 2), host("b", "10.0.0.2", 2222, 2)])
    assert spec["cluster"]["worker"] == [
        "10.0.0.1:2222",
        "10.0.0.1:2223",
        "10.0.0.2:2222",
        "10.0.0.2:2223",
    ]


@pytest.mark.parametrize("dropped", ["a", "b", "c"])
def test_limit_subset_gives_smaller_consistent_cluster(dropped: str) -> None:
    full = tf_cluster_spec(THREE)
    subset_hosts = [h for h in THREE if h["host"] != dropped]
    sub = tf_cluster_spec(subset_hosts)

    kept = [w for w in full["workers"] if w["host"] != dropped]
    assert sub["size"] == len(kept)
    assert [w["index"] for w in sub["workers"]] == list(range(len(kept)))
    assert sub["cluster"]["worker"] == [w["endpoint"] for w in kept]
    assert sub["chief"] == subset_hosts[0]["host"]
    assert sub["workers"][0]["host"] == sub["chief"]
    assert sub["checksum"] != full["checksum"]
    # Every remaining host's workers are re-numbered, but keep their endpoints.
    for entry in subset_hosts:
        mine = tf_workers_on(sub, entry["host"])
        assert [w["endpoint"] for w in mine] == [
            w["endpoint"] for w in tf_workers_on(full, entry["host"])
        ]
        for w in mine:
            assert sub["cluster"]["worker"][w["index"]] == w["endpoint"]


def test_limit_dropping_middle_host_renumbers_later_workers() -> None:
    full = tf_cluster_spec(THREE)
    sub = tf_cluster_spec([THREE[0], THREE[2]])
    assert [w["index"] for w in tf_workers_on(full, "c")] == [3, 4, 5]
    assert [w["index"] for w in tf_workers_on(sub, "c")] == [2, 3, 4]


@pytest.mark.parametrize("hosts", [[], None, {}])
def test_no_hosts_is_rejected(hosts: Any) -> None:
    with pytest.raises(AnsibleFilterError, match="no worker hosts"):
        tf_cluster_spec(hosts)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("slots", 0, "host h2: tf_worker_slots must be at least 1, got 0"),
        ("slots", -2, "host h2: tf_worker_slots must be at least 1, got -2"),
        ("slots", "abc", "host h2: tf_worker_slots must be an integer, got 'abc'"),
        ("slots", True, "host h2: tf_worker_slots must be an integer, got True"),
        ("slots", None, "host h2: tf_worker_slots must be an integer, got None"),
        ("slots", 1.5, "host h2: tf_worker_slots must be an integer, got 1.5"),
        ("port", 0, "host h2: tf_worker_port 0 with 1 slot(s) needs ports 0..0, outside 1..65535"),
        ("port", -5, "host h2: tf_worker_port -5 with 1 slot(s)"),
        ("port", 70000, "host h2: tf_worker_port 70000 with 1 slot(s) needs ports 70000..70000"),
        ("port", "2222x", "host h2: tf_worker_port must be an integer or auto, got '2222x'"),
        ("port", "22.5", "host h2: tf_worker_port must be an integer or auto, got '22.5'"),
        ("port", False, "host h2: tf_worker_port must be an integer or auto, got False"),
        ("port", None, "host h2: tf_worker_port must be an integer or auto, got None"),
        ("port", [2222], "host h2: tf_worker_port must be an integer or auto, got [2222]"),
    ],
)
def test_bad_port_or_slots_names_host_and_value(field: str, value: Any, message: str) -> None:
    bad = host("h2", "10.0.0.2", 2222, 1)
    bad[field] = value
    with pytest.raises(AnsibleFilterError, match=re.escape(message)):
        tf_cluster_spec([host("h1", "10.0.0.1"), bad])


@pytest.mark.parametrize(
    ("port", "slots", "accepted"),
    [(65535, 1, True), (65534, 2, True), (65535, 2, False), (65530, 7, False), (1, 1, True)],
)
def test_port_range_includes_every_slot(port: int, slots: int, accepted: bool) -> None:
    hosts = [host("h1", "10.0.0.1", port, slots)]
    if accepted:
        spec = tf_cluster_spec(hosts)
        assert spec["workers"][-1]["port"] == port + slots - 1
    else:
        last = port + slots - 1
        with pytest.raises(AnsibleFilterError, match=rf"host h1: .*needs ports {port}\.\.{last}, outside 1\.\.65535"):
            tf_cluster_spec(hosts)


def test_duplicate_host_is_rejected() -> None:
    with pytest.raises(AnsibleFilterError, match="host a: listed twice"):
        tf_cluster_spec([host("a", "10.0.0.1"), host("b", "10.0.0.2"), host("a", "10.0.0.3")])


@pytest.mark.parametrize(
    ("first", "second", "endpoint"),
    [
        (host("a", "10.0.0.1", 2222), host("b", "10.0.0.1", 2222), "10.0.0.1:2222"),
        # Overlapping slot ranges: a uses 2222-2223, b starts at 2223.
        (host("a", "10.0.0.1", 2222, 2), host("b", "10.0.0.1", 2223, 2), "10.0.0.1:2223"),
        # The same IPv6 address, once bracketed and once not.
        (host("a", "[fd00::1]", 2222), host("b", "fd00::1", 2222), "[fd00::1]:2222"),
    ],
)
def test_shared_endpoint_names_both_hosts_and_endpoint(
    first: dict[str, Any], second: dict[str, Any], endpoint: str
) -> None:
    with pytest.raises(
        AnsibleFilterError,
        match=rf"host b: endpoint {re.escape(endpoint)} is also used by host a",
    ):
        tf_cluster_spec([first, second])


@pytest.mark.parametrize("address", ["", "   ", None, "10.0.0.1 10.0.0.2", "10.0.0.0/24", "\t"])
def test_bad_address_names_host_and_value(address: Any) -> None:
    with pytest.raises(
        AnsibleFilterError,
        match=rf"host h2: worker address {re.escape(repr(address))} is not a host name or IP address",
    ):
        tf_cluster_spec([host("h1", "10.0.0.1"), host("h2", address)])


@pytest.mark.parametrize("entry", [{"address": "10.0.0.1", "port": 1, "slots": 1}, host("  ", "10.0.0.1")])
def test_entry_without_host_name_is_rejected(entry: dict[str, Any]) -> None:
    with pytest.raises(AnsibleFilterError, match="a worker entry has no host name"):
        tf_cluster_spec([entry])


@pytest.mark.parametrize(
    ("address", "port", "endpoint"),
    [
        ("10.0.0.1", 2222, "10.0.0.1:2222"),
        ("node1.example.org", 1, "node1.example.org:1"),
        ("fe80::1", 2222, "[fe80::1]:2222"),
        ("::1", 65535, "[::1]:65535"),
        ("[::1]", 2222, "[::1]:2222"),
    ],
)
def test_format_endpoint(address: str, port: int, endpoint: str) -> None:
    assert format_endpoint(address, port) == endpoint


def test_ipv6_host_gets_brackets_in_cluster() -> None:
    spec = tf_cluster_spec([host("v6", "fd00::2", 5000, 2), host("v4", "10.0.0.1", 5000)])
    assert spec["cluster"]["worker"] == ["[fd00::2]:5000", "[fd00::2]:5001", "10.0.0.1:5000"]
    assert spec["workers"][0]["address"] == "fd00::2"


def test_string_numbers_are_accepted_as_integers() -> None:
    spec = tf_cluster_spec([host("a", " 10.0.0.1 ", "2222", " 2 ")])
    assert [w["port"] for w in spec["workers"]] == [2222, 2223]
    assert all(type(w["port"]) is int for w in spec["workers"])
    assert spec["cluster"]["worker"] == ["10.0.0.1:2222", "10.0.0.1:2223"]


def test_checksum_is_stable_and_matches_the_cluster() -> None:
    first = tf_cluster_spec(THREE)
    again = tf_cluster_spec([dict(h) for h in THREE])
    assert first["checksum"] == again["checksum"]
    assert first["checksum"] == cluster_checksum(first["cluster"])
    assert re.fullmatch(r"[0-9a-f]{64}", first["checksum"])


def test_checksum_differs_when_order_differs() -> None:
    forward = tf_cluster_spec(THREE)
    backward = tf_cluster_spec(list(reversed(THREE)))
    assert sorted(forward["cluster"]["worker"]) == sorted(backward["cluster"]["worker"])
    assert forward["checksum"] != backward["checksum"]


def test_checksum_ignores_dict_key_order_only() -> None:
    cluster = {"worker": ["a:1", "b:2"], "ps": ["c:3"]}
    reordered = {"ps": ["c:3"], "worker": ["a:1", "b:2"]}
    assert cluster_checksum(cluster) == cluster_checksum(reordered)
    assert cluster_checksum(cluster) != cluster_checksum({"worker": ["b:2", "a:1"], "ps": ["c:3"]})


def test_checksum_agrees_with_the_tf_config_check() -> None:
    """The worker role recomputes the checksum: both must give the same value."""
    spec = tf_cluster_spec(THREE)
    assert tf_worker_config.cluster_checksum(spec["cluster"]) == spec["checksum"]


def test_filter_module_exports_the_filters() -> None:
    filters = tf_cluster.FilterModule().filters()
    assert filters["tf_cluster_spec"] is tf_cluster_spec
    assert filters["tf_workers_on"] is tf_workers_on


# -- issue 11, point 11: one endpoint, however it is written --------------------------


@pytest.mark.parametrize(
    ("first", "second", "endpoint"),
    [
        (host("a", "::1"), host("b", "0:0:0:0:0:0:0:1"), "[::1]:2222"),
        (host("a", "Node1"), host("b", "node1"), "node1:2222"),
        (host("a", "node1.example.org."), host("b", "NODE1.example.org"), "node1.example.org:2222"),
        (host("a", "FD00::A"), host("b", "[fd00:0::a]"), "[fd00::a]:2222"),
    ],
)
def test_one_address_written_two_ways_is_one_endpoint(first: dict[str, Any], second: dict[str, Any], endpoint: str) -> None:
    with pytest.raises(AnsibleFilterError, match=rf"host b: endpoint {re.escape(endpoint)} is also used by host a"):
        tf_cluster_spec([first, second])


def test_a_name_and_its_ip_are_one_endpoint_once_resolved() -> None:
    names = {"gpu-a.lan": ["10.0.0.1"], "gpu-b.lan": ["10.0.0.2", "fd00::2"]}
    spec = [host("a", "gpu-a.lan"), host("b", "10.0.0.2"), host("c", "gpu-b.lan")]
    with pytest.raises(
        AnsibleFilterError,
        match=re.escape("host c: endpoint gpu-b.lan:2222 is also used by host b ('10.0.0.2' and 'gpu-b.lan' are both 10.0.0.2)"),
    ):
        tf_cluster_spec(spec, resolver=lambda name: names.get(name, []))
    # Unresolved (or resolving elsewhere) names are judged by their spelling alone.
    assert tf_cluster_spec(spec[:2] + [host("c", "gpu-c.lan")], resolver=lambda name: names.get(name, []))["size"] == 3


def test_the_controller_resolves_names_when_asked() -> None:
    with pytest.raises(AnsibleFilterError, match="host b: endpoint 127.0.0.1:2222 is also used by host a"):
        tf_cluster_spec([host("a", "localhost"), host("b", "127.0.0.1")], True)
    assert tf_cluster_spec([host("a", "localhost"), host("b", "127.0.0.1")])["size"] == 2


@pytest.mark.parametrize(
    ("address", "kept"),
    [("[::1]", "::1"), ("0:0:0:0:0:0:0:1", "::1"), ("Node1", "node1"), ("node1.", "node1"),
     ("10.0.0.1", "10.0.0.1"), ("::ffff:10.0.0.1", "::ffff:a00:1"), ("gpu_a", "gpu_a")],
)
def test_addresses_are_normalized_in_the_spec_and_endpoints(address: str, kept: str) -> None:
    spec = tf_cluster_spec([host("a", address)])
    assert spec["workers"][0]["address"] == kept
    assert spec["cluster"]["worker"] == [format_endpoint(kept, 2222)]


@pytest.mark.parametrize("address", ["10.0.0.1:2222", "node1:2222", "[10.0.0.1]", "[node1]", "[fd00::zz]", "fd00::zz",
                                     "node 1", "-node", "node!1"])
def test_an_address_with_a_port_or_that_is_no_address_is_refused(address: str) -> None:
    with pytest.raises(AnsibleFilterError, match=rf"host a: worker address {re.escape(repr(address))} is not a host name or IP address"):
        tf_cluster_spec([host("a", address)])
