# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cluster spec built from the ordered hosts' entries: one place for the filter
``tf_cluster_spec`` (and the filters that build a spec again: picked ports, a takeover)
and the controller action ``tf_cluster_describe``, which describes every host and builds
the spec in one task.

The cluster list must be byte-for-byte identical on every worker and each worker's
``task.index`` must be its own position in it; both are derived here, once.
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
from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_spec_packed import pack

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
