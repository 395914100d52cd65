"""The preflight reaches only the pairs of hosts that must talk (issue 41), by the cluster
spec's task types and strategy: ``tf_preflight_pairs`` gives each host the endpoints it must
reach and the peers its listener waits for."""

from __future__ import annotations

from typing import Any

import pytest

from tf_cluster import AnsibleFilterError, tf_cluster_spec, tf_preflight_pairs


def host(name: str, kind: str | None = None, slots: int = 1, spare: bool = False) -> dict[str, Any]:
    entry: dict[str, Any] = {"host": name, "address": f"{name}.example", "port": 2222, "slots": slots}
    if kind is not None:
        entry["type"] = kind
    if spare:
        entry["spare"] = True
    return entry


def with_evaluator(spec: dict[str, Any], name: str = "e") -> dict[str, Any]:
    """``spec`` with a sidecar evaluator on host ``name`` (the spec refuses one until the
    sidecar evaluator is built; the pairs already know it)."""
    evaluator = {"index": len(spec["workers"]), "host": name, "slot": 0, "address": f"{name}.example", "port": 2222,
                 "endpoint": f"{name}.example:2222", "type": "evaluator", "task_index": 0}
    return {**spec, "workers": [*spec["workers"], evaluator]}


def pairs(spec: dict[str, Any]) -> set[tuple[str, str]]:
    """Every (from, to) host pair the preflight checks, from each host's endpoints."""
    hosts = {e["host"] for e in spec["workers"]} | {s["host"] for s in spec.get("spares", [])}
    return {(h, e["host"]) for h in hosts for e in tf_preflight_pairs(spec, h)["endpoints"]}


def both_ways(*pairs_: tuple[str, str]) -> set[tuple[str, str]]:
    return {p for a, b in pairs_ for p in ((a, b), (b, a))}


def test_each_listener_waits_for_exactly_the_hosts_that_reach_it() -> None:
    spec = with_evaluator(tf_cluster_spec([host("c", "chief"), host("w1"), host("w2"), host("p0", "ps"),
                                           host("s", spare=True)]))
    checked = pairs(spec)
    names = ("c", "w1", "w2", "p0", "s", "e")
    for name in names:
        assert tf_preflight_pairs(spec, name)["peers"] == [a for a in names if (a, name) in checked], name


def test_mirrored_without_types_every_worker_reaches_every_worker_port_and_itself() -> None:
    spec = tf_cluster_spec([host("a"), host("b", slots=2)])
    assert pairs(spec) == {(x, y) for x in "ab" for y in "ab"}
    # Each of b's two ports, from a and from b itself (its workers talk to each other).
    assert [(e["host"], e["port"]) for e in tf_preflight_pairs(spec, "a")["endpoints"]] == [
        ("a", 2222), ("b", 2222), ("b", 2223)]  # fmt: skip


def test_one_host_reaches_its_own_ports() -> None:
    """The smoke: a cluster on one host still checks that its address leads back to it."""
    spec = tf_cluster_spec([host("localhost", slots=2)])
    assert tf_preflight_pairs(spec, "localhost") == {"endpoints": spec["workers"], "peers": ["localhost"]}


def test_mirrored_with_a_chief_every_chief_and_worker_pair_both_ways() -> None:
    spec = tf_cluster_spec([host("w1"), host("c", "chief"), host("w2")])
    assert pairs(spec) == {(x, y) for x in ("c", "w1", "w2") for y in ("c", "w1", "w2")}


def test_parameter_servers_workers_need_not_reach_workers_nor_ps_ps() -> None:
    spec = tf_cluster_spec([host("c", "chief"), host("w1"), host("w2", slots=2), host("p0", "ps"), host("p1", "ps")])
    assert spec["shape"] == "ps"
    assert pairs(spec) == both_ways(
        ("c", "w1"), ("c", "w2"), ("c", "p0"), ("c", "p1"),
        ("w1", "p0"), ("w1", "p1"), ("w2", "p0"), ("w2", "p1"),
    )
    # A worker host with two slots does not reach its own ports either.
    assert [e["host"] for e in tf_preflight_pairs(spec, "w2")["endpoints"]] == ["c", "p0", "p1"]
    assert tf_preflight_pairs(spec, "p0")["peers"] == ["c", "w1", "w2"]


def test_mirrored_spares_reach_what_a_worker_or_the_chief_reaches_both_ways() -> None:
    spec = tf_cluster_spec([host("c", "chief"), host("w1"), host("s1", spare=True), host("s2", spare=True)])
    everyone = ("c", "w1", "s1", "s2")
    assert pairs(spec) == {(x, y) for x in everyone for y in everyone}
    assert [e["index"] for e in tf_preflight_pairs(spec, "c")["endpoints"]] == [0, 1, "spare", "spare"]


def test_ps_spares_reach_every_role_they_could_take() -> None:
    """A spare can take the place of the chief, a worker or a ps (tf_attempts_takeover), and
    two spares may take two such places: each reaches and is reached by every host of the
    cluster and by the other spare. The workers still need not reach each other."""
    spec = tf_cluster_spec([host("c", "chief"), host("w1"), host("w2"), host("p0", "ps"), host("s1", spare=True),
                            host("s2", spare=True)])
    cluster = both_ways(("c", "w1"), ("c", "w2"), ("c", "p0"), ("w1", "p0"), ("w2", "p0"))
    spares = both_ways(*[(s, h) for s in ("s1", "s2") for h in ("c", "w1", "w2", "p0")], ("s1", "s2"))
    assert pairs(spec) == cluster | spares
    # A spare holds one role at a time, and no worker or ps reaches its own kind: not itself.
    assert ("s1", "s1") not in pairs(spec)


@pytest.mark.parametrize("kind", ["mirrored", "ps"])
def test_the_evaluator_is_reached_by_the_chief_alone_and_reaches_nothing(kind: str) -> None:
    hosts = [host("c", "chief"), host("w1")] + ([host("p0", "ps")] if kind == "ps" else [])
    spec = with_evaluator(tf_cluster_spec(hosts))
    assert tf_preflight_pairs(spec, "e") == {"endpoints": [], "peers": ["c"]}
    assert [e["host"] for e in tf_preflight_pairs(spec, "c")["endpoints"]].count("e") == 1
    assert "e" not in [e["host"] for e in tf_preflight_pairs(spec, "w1")["endpoints"]]


def test_a_spare_reaches_the_evaluator_as_the_chief_it_could_replace() -> None:
    spec = with_evaluator(tf_cluster_spec([host("c", "chief"), host("w1"), host("s", spare=True)]))
    assert tf_preflight_pairs(spec, "e")["peers"] == ["c", "s"]


def test_without_a_typed_chief_worker_0_pushes_to_the_evaluator() -> None:
    spec = with_evaluator(tf_cluster_spec([host("a"), host("b")]))
    assert tf_preflight_pairs(spec, "e")["peers"] == ["a"]


def test_a_host_outside_the_cluster_reaches_nothing_and_bad_input_is_named() -> None:
    spec = tf_cluster_spec([host("a"), host("b")])
    assert tf_preflight_pairs(spec, "elsewhere") == {"endpoints": [], "peers": []}
    with pytest.raises(AnsibleFilterError, match="tf_preflight_pairs: a cluster spec"):
        tf_preflight_pairs({"cluster": {}}, "a")
