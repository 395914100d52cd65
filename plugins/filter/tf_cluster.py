"""Cluster spec and TF_CONFIG for TensorFlow multi-worker training.

The cluster list must be byte-for-byte identical on every worker and each worker's
``task.index`` must be its own position in it. Both are derived here, once, from the
ordered list of hosts in the play, so that ``--limit`` yields a smaller cluster that is
still consistent.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from typing import Any, Callable

from ansible.errors import AnsibleFilterError
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_ports_auto import is_auto
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import (
    CLUSTER_TASK_TYPES,
    EVALUATOR,
    TASK_TYPES,
    cluster_checksum,
)
from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_spec_packed import compact, pack, plain


MAX_PORT = 65535
# A host name: labels of letters, digits, '-' and '_', separated by dots.
HOST_NAME = re.compile(r"^[a-z0-9_]([a-z0-9_-]{0,62})(\.[a-z0-9_]([a-z0-9_-]{0,62}))*$")


def normalize_address(value: Any, host: str) -> str:
    """One spelling per address: IP literals in their canonical form (``0:0:0:0:0:0:0:1``
    is ``::1``; brackets dropped), names in lower case without a trailing dot. Refuses a
    value that is neither, such as an address with a port (``10.0.0.1:2222``)."""
    text = str(value if value is not None else "").strip()
    bad = f"host {host}: worker address {value!r} is not a host name or IP address"
    if not text or any(c.isspace() for c in text) or "/" in text:
        raise AnsibleFilterError(bad)
    bracketed = text.startswith("[") and text.endswith("]")
    literal = text[1:-1] if bracketed else text
    try:
        address = ipaddress.ip_address(literal)
    except ValueError:
        address = None
    if address is not None and not (bracketed and address.version == 4):
        return address.compressed
    if ":" in text or bracketed:
        raise AnsibleFilterError(
            f"{bad}: an address with a port, or an IPv6 address that does not parse; give the "
            "address alone (IPv6 with or without brackets) and the port as tf_worker_port"
        )
    name = text.lower().rstrip(".")
    if not HOST_NAME.fullmatch(name):
        raise AnsibleFilterError(bad)
    return name


def resolve_address(address: str) -> list[str]:
    """The IP addresses ``address`` stands for on this machine (itself for an IP literal;
    empty when a name does not resolve here)."""
    try:
        return [ipaddress.ip_address(address).compressed]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(address, None, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError):
        return []
    return sorted({ipaddress.ip_address(info[4][0].split("%", 1)[0]).compressed for info in infos})


def _as_int(value: Any, what: str, host: str) -> int:
    also = " or auto" if what == "tf_worker_port" else ""
    if isinstance(value, bool):
        raise AnsibleFilterError(f"host {host}: {what} must be an integer{also}, got {value!r}")
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        raise AnsibleFilterError(
            f"host {host}: {what} must be an integer{also}, got {value!r}"
        ) from None


def format_endpoint(address: str, port: int) -> str:
    """Return ``address:port``, bracketing IPv6 literals as gRPC expects."""
    if ":" in address and not address.startswith("["):
        return f"[{address}]:{port}"
    return f"{address}:{port}"


# The inventory group of each task type, for messages.
TYPE_GROUPS = {"chief": "tf_chief", "worker": "tf_workers", "ps": "tf_ps", EVALUATOR: "tf_evaluator"}


def task_type_of(entry: dict[str, Any]) -> str:
    """An entry's task type (``worker`` when it names none); refuses one TF does not know."""
    kind = str(entry.get("type") or "worker")
    if kind not in TASK_TYPES:
        raise AnsibleFilterError(
            f"host {entry.get('host')}: task type {kind!r} is not one of {', '.join(TASK_TYPES)}"
        )
    return kind


def shape_problems(counts: dict[str, list[tuple[str, int]]]) -> list[str]:
    """Why the hosts of each type (type -> [(host, slots)]) do not make a cluster
    TensorFlow runs: at most one chief and one evaluator, each with one slot; ps tasks
    need a chief (the coordinator) and workers; an evaluator needs a training."""
    problems = []
    for kind in ("chief", EVALUATOR):
        hosts = counts.get(kind, [])
        if len(hosts) > 1:
            problems.append(
                f"{TYPE_GROUPS[kind]} holds {len(hosts)} hosts ({', '.join(name for name, _slots in hosts)}): at most one {kind}"
            )
        problems += [
            f"host {h}: {'an' if kind == EVALUATOR else 'a'} {kind} runs one task, tf_worker_slots must be 1 (got {slots})" for h, slots in hosts if slots != 1
        ]
    if counts.get("ps"):
        if not counts.get("chief"):
            problems.append(
                "tf_ps is not empty but tf_chief is: ParameterServerStrategy needs a chief, the coordinator "
                "that runs the training program"
            )
        if not counts.get("worker"):
            problems.append("tf_ps is not empty but tf_workers is: ParameterServerStrategy needs workers")
    if counts.get(EVALUATOR) and not (counts.get("chief") or counts.get("worker")):
        problems.append("tf_evaluator is not empty but nothing trains: add a chief or workers")
    return problems


def tf_cluster_spec(
    hosts: list[dict[str, Any]], resolve: bool = False, resolver: Callable[[str], list[str]] | None = None
) -> dict[str, Any]:
    """Build the worker list from hosts in order; raise on any value TF would choke on.

    Addresses are normalized first. With ``resolve``, names are also resolved (here, on
    the controller) so that a name and its IP, or two names of one machine, are seen as
    one endpoint; ``resolver`` stands in for the resolver in tests. Entries marked
    ``spare`` (the tf_spares group, after the workers) get no worker index: their
    endpoints are checked like the workers' and listed under ``spares``, for the
    preflight to probe and for a spare to take a lost host's place.

    A host whose port is ``auto`` (``tf_worker_port: auto``) gets port 0 in its endpoints
    for now, no endpoint check, and is listed under ``auto`` with its number of slots: the
    preflight's probe picks its ports there, and ``tf_cluster_ports`` builds the spec again
    with them (every check then made)."""
    lookup = resolver or resolve_address
    identities: dict[str, set[str]] = {}
    if not isinstance(hosts, list) or not [e for e in hosts if isinstance(e, dict) and not e.get("spare")]:
        raise AnsibleFilterError(
            "no worker hosts in the play: the tf_workers group is empty or --limit "
            "excluded every worker"
        )
    workers: list[dict[str, Any]] = []
    spares: list[dict[str, Any]] = []
    owners: dict[str, tuple[str, str]] = {}
    seen_hosts: set[str] = set()
    counts: dict[str, list[tuple[str, int]]] = {}
    # The processes are numbered by type (chief, worker, ps, evaluator), each type in
    # inventory order; the spares follow. Without types every entry is a worker and
    # keeps its place.
    order = {kind: n for n, kind in enumerate(TASK_TYPES)}
    hosts = sorted(
        hosts, key=lambda e: (1, 0) if isinstance(e, dict) and e.get("spare") else (0, order.get(task_type_of(e), 0))
    )
    auto: dict[str, int] = {}
    for entry in hosts:
        host = str(entry.get("host", "")).strip()
        if not host:
            raise AnsibleFilterError(f"a worker entry has no host name: {entry!r}")
        if host in seen_hosts:
            raise AnsibleFilterError(
                f"host {host}: listed twice in the worker list"
                + (" (a host is a worker or a spare, not both)" if entry.get("spare") else "")
            )
        seen_hosts.add(host)
        address = normalize_address(entry.get("address"), host)
        if address not in identities:
            identities[address] = {address, *(lookup(address) if resolve or resolver else [])}
        slots = _as_int(entry.get("slots"), "tf_worker_slots", host)
        if slots < 1:
            raise AnsibleFilterError(f"host {host}: tf_worker_slots must be at least 1, got {slots}")
        if is_auto(entry.get("port")):
            auto[host] = slots
            port = 0
        else:
            port = _as_int(entry.get("port"), "tf_worker_port", host)
        if host not in auto and (port < 1 or port + slots - 1 > MAX_PORT):
            raise AnsibleFilterError(
                f"host {host}: tf_worker_port {port} with {slots} slot(s) needs ports "
                f"{port}..{port + slots - 1}, outside 1..{MAX_PORT}"
            )
        kind = task_type_of(entry)
        if not entry.get("spare"):
            counts.setdefault(kind, []).append((host, slots))
        for slot in range(slots):
            endpoint = format_endpoint(address, port + slot)
            for ident in sorted(identities[address]) if host not in auto else []:
                key = format_endpoint(ident, port + slot)
                if key in owners:
                    other_host, other_address = owners[key]
                    same = "" if other_address == address else f" ({other_address!r} and {address!r} are both {ident})"
                    raise AnsibleFilterError(
                        f"host {host}: endpoint {endpoint} is also used by host "
                        f"{other_host}{same}; two workers cannot share an address and port"
                    )
            for ident in identities[address] if host not in auto else []:
                owners[format_endpoint(ident, port + slot)] = (host, address)
            if entry.get("spare"):
                if slot == 0:
                    spares.append({"host": host, "address": address, "port": port, "slots": slots, "endpoints": []})
                spares[-1]["endpoints"].append(endpoint)
                continue
            workers.append(
                {
                    "index": len(workers),
                    "host": host,
                    "slot": slot,
                    "address": address,
                    "port": port + slot,
                    "endpoint": endpoint,
                    "type": kind,
                    "task_index": sum(1 for w in workers if w["type"] == kind),
                }
            )
    problems = shape_problems(counts)
    if problems:
        raise AnsibleFilterError("the inventory's task types do not make a cluster: " + "; ".join(problems))
    # TF_CONFIG's cluster: every type that has tasks (the evaluator is never in it).
    cluster = {
        kind: [w["endpoint"] for w in workers if w["type"] == kind]
        for kind in CLUSTER_TASK_TYPES if any(w["type"] == kind for w in workers)
    }
    spec = {
        "workers": workers,
        "cluster": cluster,
        "size": len(workers),
        "chief": workers[0]["host"],
        "checksum": cluster_checksum(cluster),
        "spares": spares,
        "shape": "ps" if "ps" in cluster else "mirrored",
    }
    if auto:
        spec["auto"] = auto
    # The tasks that run per host read the spec through its packed copy
    # (plugin_utils/tf_spec_packed.py).
    return pack(spec)


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
