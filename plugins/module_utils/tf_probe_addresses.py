# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the cluster's worker addresses stand for on a host, and which of its own addresses
its connections to them come from (the preflight probe's look; standard library only)."""

from __future__ import annotations

import ipaddress
import socket


def resolve_addresses(addresses: list[str]) -> dict[str, list[str]]:
    """What each worker address stands for on this host: its IP addresses (empty when a
    name does not resolve here). IP literals stand for themselves."""
    resolved = {}
    for address in addresses:
        try:
            resolved[address] = [ipaddress.ip_address(address).compressed]
            continue
        except ValueError:
            pass
        try:
            infos = socket.getaddrinfo(address, None, proto=socket.IPPROTO_TCP)
        except (socket.gaierror, UnicodeError):
            resolved[address] = []
            continue
        resolved[address] = sorted({ipaddress.ip_address(i[4][0].split("%", 1)[0]).compressed for i in infos})
    return resolved


def names_only(resolved: dict[str, list[str]]) -> dict[str, list[str]]:
    """``resolved`` without the IP literals, which stand for themselves on every host (the
    controller knows them): what a host sends back. A map of every worker address in every
    host's result cost the controller per element, the square of the hosts in all."""
    names = {}
    for address, ips in resolved.items():
        try:
            ipaddress.ip_address(address)
        except ValueError:
            names[address] = ips
    return names


def source_addresses(resolved: dict[str, list[str]]) -> list[str]:
    """The addresses this host's connections to those IP addresses come from, as its
    routing picks them (a connected UDP socket sends nothing). On a multi-homed host that
    may not be the address it advertises, and a firewall must accept that one."""
    sources = set()
    for ips in resolved.values():
        for ip in ips:
            family = socket.AF_INET6 if ipaddress.ip_address(ip).version == 6 else socket.AF_INET
            try:
                with socket.socket(family, socket.SOCK_DGRAM) as sock:
                    sock.connect((ip, 9))
                    sources.add(ipaddress.ip_address(sock.getsockname()[0].split("%", 1)[0]).compressed)
            except OSError:
                continue  # no route from here: the reach probe names it
    return sorted(sources, key=ipaddress.ip_address)
