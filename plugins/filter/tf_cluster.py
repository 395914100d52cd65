"""Cluster spec and TF_CONFIG for TensorFlow multi-worker training.

The cluster list must be byte-for-byte identical on every worker and each worker's
``task.index`` must be its own position in it. Both are derived once, from the ordered
list of hosts in the play, so that ``--limit`` yields a smaller cluster that is still
consistent: the spec is built in plugins/plugin_utils/tf_cluster_build.py (shared with the
controller action tf_cluster_describe); these filters build it, read it and build it again.
"""

from __future__ import annotations

from typing import Any, Callable

from ansible.errors import AnsibleFilterError
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import EVALUATOR
from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_cluster_build import tf_cluster_spec
from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_spec_packed import compact, plain


def tf_cluster_ports(spec: dict[str, Any], ports: dict[str, Any],
                     resolver: Callable[[str], list[str]] | None = None) -> dict[str, Any]:
    """``spec`` again with the ports picked for its ``auto`` hosts (``ports``: each such
    host's list of consecutive ports, its first for its first slot), every endpoint checked
    as for a number in the inventory. A spec without ``auto`` hosts is returned as it is.
    A spare with no ports given is left out (a reattach from another controller learns the
    ports of the play's hosts only: that run then has no spare to take a lost host's place)."""
    auto = spec.get("auto") or {}
    if not auto:
        return spec
    spec = plain(spec)
    ports = ports if isinstance(ports, dict) else {}
    entries: list[dict[str, Any]] = []
    for entry in cluster_hosts(spec) + [dict(s, spare=True) for s in spec.get("spares", [])]:
        entry = {k: entry[k] for k in ("host", "address", "port", "slots", "spare", "type") if k in entry}
        if entry.get("spare") and entry["host"] in auto and not isinstance(ports.get(entry["host"]), list):
            continue
        if entry["host"] in auto:
            picked = ports.get(entry["host"])
            if not isinstance(picked, list) or len(picked) != auto[entry["host"]]:
                raise AnsibleFilterError(
                    f"host {entry['host']}: tf_worker_port auto needs {auto[entry['host']]} port(s) picked, "
                    f"got {picked!r}")
            entry["port"] = picked[0]
        entries.append(entry)
    return tf_cluster_spec(entries, True, resolver)


def cluster_hosts(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The hosts of ``spec``'s workers in worker order, each as the entry that builds it
    again (its address, first port and number of slots)."""
    hosts: list[dict[str, Any]] = []
    for worker in spec["workers"]:
        if not hosts or hosts[-1]["host"] != worker["host"]:
            hosts.append({"host": worker["host"], "address": worker["address"], "port": worker["port"], "slots": 0,
                          "type": worker.get("type", "worker")})
        hosts[-1]["slots"] += 1
    return hosts


def tf_cluster_takeover(
    spec: dict[str, Any],
    replaced: dict[str, str],
    dropped: list[str] | None = None,
    resolver: Callable[[str], list[str]] | None = None,
) -> dict[str, Any]:
    """The cluster after lost hosts left it: each host of ``replaced`` gives its workers,
    with their indices, to its spare (which runs as many slots, from its own address and
    first port); each host of ``dropped`` leaves with its workers, and the workers after
    it move down (the cluster shrinks). The spares used leave ``spares``."""
    spec = plain(spec)
    dropped = list(dropped or [])
    known = {s["host"]: s for s in spec.get("spares", [])}
    entries: list[dict[str, Any]] = []
    for entry in cluster_hosts(spec):
        if entry["host"] in dropped:
            continue
        spare = replaced.get(entry["host"])
        if spare is None:
            entries.append(entry)
            continue
        if spare not in known:
            raise AnsibleFilterError(f"host {spare}: not a spare of this cluster, cannot take the place of {entry['host']}")
        if known[spare]["slots"] < entry["slots"]:
            raise AnsibleFilterError(
                f"host {spare}: a spare with tf_worker_slots={known[spare]['slots']} cannot take the place of "
                f"{entry['host']}, which ran {entry['slots']} workers"
            )
        entries.append({"host": spare, "address": known[spare]["address"], "port": known[spare]["port"],
                        "slots": entry["slots"], "type": entry["type"]})
    used = set(replaced.values())
    entries.extend(dict(s, spare=True) for s in spec.get("spares", []) if s["host"] not in used)
    return tf_cluster_spec(entries, resolver is not None, resolver)


def tf_workers_on(spec: dict[str, Any], host: str) -> list[dict[str, Any]]:
    """The workers that run on ``host``, in index order."""
    return [w for w in plain(spec)["workers"] if w["host"] == host]


def spare_endpoints(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Each spare's endpoints as the preflight probes them, with ``index`` ``spare``."""
    return [
        {"index": "spare", "host": s["host"], "slot": slot, "address": s["address"], "port": s["port"] + slot,
         "endpoint": endpoint}
        for s in spec.get("spares", []) for slot, endpoint in enumerate(s["endpoints"])
    ]


def tf_cluster_endpoints(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Every endpoint the preflight probes: the workers', then the spares'."""
    spec = plain(spec)
    return list(spec["workers"]) + spare_endpoints(spec)


def tf_ports_on(spec: dict[str, Any], host: str) -> list[int]:
    """The ports ``host`` listens on: its workers', or as a spare the ones it would take
    (none yet for a host whose ports the probe picks)."""
    spec = plain(spec)
    if host in (spec.get("auto") or {}):
        return []
    return [int(e["port"]) for e in tf_cluster_endpoints(spec) if e["host"] == host]


def tf_cluster_host_ports(spec: dict[str, Any]) -> dict[str, list[int]]:
    """Each host's ports in ``spec``, its workers' or, for a spare, those it would take
    (what ``tf_cluster_ports`` takes back)."""
    ports: dict[str, list[int]] = {}
    for endpoint in tf_cluster_endpoints(plain(spec)):
        ports.setdefault(endpoint["host"], []).append(int(endpoint["port"]))
    return ports


# Which task type must reach which (from, to), by the spec's shape (issue 41):
# MultiWorkerMirroredStrategy's chief and workers all talk to each other; under
# ParameterServerStrategy the chief (the coordinator) talks to every worker and ps, and every
# worker to every ps, both ways, but workers need not reach each other, nor ps each other.
# In both, the chief pushes its checkpoints to the sidecar evaluator's port, and the
# evaluator reaches nothing.
MUST_REACH: dict[str, frozenset[tuple[str, str]]] = {
    "mirrored": frozenset({(a, b) for a in ("chief", "worker") for b in ("chief", "worker")} | {("chief", EVALUATOR)}),
    "ps": frozenset({("chief", "worker"), ("worker", "chief"), ("chief", "ps"), ("ps", "chief"),
                     ("worker", "ps"), ("ps", "worker"), ("chief", EVALUATOR)}),
}


def host_roles(spec: dict[str, Any]) -> tuple[dict[str, set[str]], set[str]]:
    """Each host's roles (the task types of its workers; worker 0 is the chief where no
    host is typed chief) and the spares. A spare takes the place of any lost host of the
    cluster (tf_attempts_takeover), the chief's too, so it holds every role of the cluster."""
    roles: dict[str, set[str]] = {}
    for worker in spec["workers"]:
        kind = worker.get("type", "worker")
        roles.setdefault(worker["host"], set()).add("chief" if worker["index"] == 0 and kind == "worker" else kind)
    cluster = {role for held in roles.values() for role in held if role != EVALUATOR}
    spares = {s["host"] for s in spec.get("spares", [])}
    for spare in spares:
        roles[spare] = set(cluster)
    return roles, spares


def must_reach(spec: dict[str, Any], roles: dict[str, set[str]], spares: set[str], source: str, dest: str) -> bool:
    """Whether ``source`` must reach ``dest``'s ports. A spare holds one role at a time: to
    reach its own ports it must hold a role that reaches its own kind."""
    talks = MUST_REACH["ps" if spec.get("shape") == "ps" or "ps" in spec.get("cluster", {}) else "mirrored"]
    if source == dest and source in spares:
        return any((role, role) in talks for role in roles[source])
    return any((a, b) in talks for a in roles.get(source, ()) for b in roles.get(dest, ()))


def tf_preflight_pairs(spec: dict[str, Any], host: str, as_json: bool = False) -> dict[str, Any]:
    """What ``host``'s preflight probe checks: ``endpoints``, the worker and spare endpoints
    it must reach (tf_cluster_endpoints, in that order), and ``peers``, the hosts that must
    reach its own ports (its listener waits to hear from each of them). With ``as_json``,
    each list is one JSON string, as the probe's modules take it in every host's arguments
    (plugin_utils/tf_spec_packed.py)."""
    spec = plain(spec)
    if not isinstance(spec, dict) or not isinstance(spec.get("workers"), list):
        raise AnsibleFilterError(f"tf_preflight_pairs: a cluster spec (tf_cluster_spec) is needed, got {spec!r}")
    roles, spares = host_roles(spec)
    endpoints = tf_cluster_endpoints(spec)
    hosts = list(dict.fromkeys(e["host"] for e in endpoints))
    pairs = {
        "endpoints": [e for e in endpoints if must_reach(spec, roles, spares, host, e["host"])],
        "peers": [h for h in hosts if must_reach(spec, roles, spares, h, host)],
    }
    return {key: compact(value) for key, value in pairs.items()} if as_json else pairs


def tf_cluster_addresses(spec: dict[str, Any], as_json: bool = False) -> list[str] | str:
    """Every worker address of the cluster, once each in worker order (each host's probe
    resolves them to learn which are its own); with ``as_json``, as one JSON string."""
    spec = plain(spec)
    if not isinstance(spec, dict) or not isinstance(spec.get("workers"), list):
        raise AnsibleFilterError(f"tf_cluster_addresses: a cluster spec (tf_cluster_spec) is needed, got {spec!r}")
    addresses = list(dict.fromkeys(w["address"] for w in spec["workers"]))
    return compact(addresses) if as_json else addresses


def tf_task_types(spec: dict[str, Any], as_json: bool = False) -> list[str] | str:
    """Each worker's task type (``worker`` where the inventory gave none), by index; with
    ``as_json``, as one JSON string."""
    spec = plain(spec)
    if not isinstance(spec, dict) or not isinstance(spec.get("workers"), list):
        raise AnsibleFilterError(f"tf_task_types: a cluster spec (tf_cluster_spec) is needed, got {spec!r}")
    types = [w.get("type", "worker") for w in spec["workers"]]
    return compact(types) if as_json else types


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Any]:
        return {
            "tf_cluster_spec": tf_cluster_spec,
            "tf_workers_on": tf_workers_on,
            "tf_cluster_takeover": tf_cluster_takeover,
            "tf_cluster_endpoints": tf_cluster_endpoints,
            "tf_ports_on": tf_ports_on,
            "tf_cluster_ports": tf_cluster_ports,
            "tf_cluster_host_ports": tf_cluster_host_ports,
            "tf_preflight_pairs": tf_preflight_pairs,
            "tf_cluster_addresses": tf_cluster_addresses,
            "tf_task_types": tf_task_types,
        }
