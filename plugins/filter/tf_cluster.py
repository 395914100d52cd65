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
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import cluster_checksum


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
    if isinstance(value, bool):
        raise AnsibleFilterError(f"host {host}: {what} must be an integer, got {value!r}")
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        raise AnsibleFilterError(
            f"host {host}: {what} must be an integer, got {value!r}"
        ) from None


def format_endpoint(address: str, port: int) -> str:
    """Return ``address:port``, bracketing IPv6 literals as gRPC expects."""
    if ":" in address and not address.startswith("["):
        return f"[{address}]:{port}"
    return f"{address}:{port}"


def tf_cluster_spec(
    hosts: list[dict[str, Any]], resolve: bool = False, resolver: Callable[[str], list[str]] | None = None
) -> dict[str, Any]:
    """Build the worker list from hosts in order; raise on any value TF would choke on.

    Addresses are normalized first. With ``resolve``, names are also resolved (here, on
    the controller) so that a name and its IP, or two names of one machine, are seen as
    one endpoint; ``resolver`` stands in for the resolver in tests."""
    lookup = resolver or resolve_address
    identities: dict[str, set[str]] = {}
    if not isinstance(hosts, list) or not hosts:
        raise AnsibleFilterError(
            "no worker hosts in the play: the tf_workers group is empty or --limit "
            "excluded every worker"
        )
    workers: list[dict[str, Any]] = []
    owners: dict[str, tuple[str, str]] = {}
    seen_hosts: set[str] = set()
    for entry in hosts:
        host = str(entry.get("host", "")).strip()
        if not host:
            raise AnsibleFilterError(f"a worker entry has no host name: {entry!r}")
        if host in seen_hosts:
            raise AnsibleFilterError(f"host {host}: listed twice in the worker list")
        seen_hosts.add(host)
        address = normalize_address(entry.get("address"), host)
        if address not in identities:
            identities[address] = {address, *(lookup(address) if resolve or resolver else [])}
        port = _as_int(entry.get("port"), "tf_worker_port", host)
        slots = _as_int(entry.get("slots"), "tf_worker_slots", host)
        if slots < 1:
            raise AnsibleFilterError(f"host {host}: tf_worker_slots must be at least 1, got {slots}")
        if port < 1 or port + slots - 1 > MAX_PORT:
            raise AnsibleFilterError(
                f"host {host}: tf_worker_port {port} with {slots} slot(s) needs ports "
                f"{port}..{port + slots - 1}, outside 1..{MAX_PORT}"
            )
        for slot in range(slots):
            endpoint = format_endpoint(address, port + slot)
            for ident in sorted(identities[address]):
                key = format_endpoint(ident, port + slot)
                if key in owners:
                    other_host, other_address = owners[key]
                    same = "" if other_address == address else f" ({other_address!r} and {address!r} are both {ident})"
                    raise AnsibleFilterError(
                        f"host {host}: endpoint {endpoint} is also used by host "
                        f"{other_host}{same}; two workers cannot share an address and port"
                    )
            for ident in identities[address]:
                owners[format_endpoint(ident, port + slot)] = (host, address)
            workers.append(
                {
                    "index": len(workers),
                    "host": host,
                    "slot": slot,
                    "address": address,
                    "port": port + slot,
                    "endpoint": endpoint,
                }
            )
    cluster = {"worker": [w["endpoint"] for w in workers]}
    return {
        "workers": workers,
        "cluster": cluster,
        "size": len(workers),
        "chief": workers[0]["host"],
        "checksum": cluster_checksum(cluster),
    }


def tf_workers_on(spec: dict[str, Any], host: str) -> list[dict[str, Any]]:
    """The workers that run on ``host``, in index order."""
    return [w for w in spec["workers"] if w["host"] == host]


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Any]:
        return {
            "tf_cluster_spec": tf_cluster_spec,
            "tf_workers_on": tf_workers_on,
        }
