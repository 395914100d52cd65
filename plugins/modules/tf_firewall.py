#!/usr/bin/python
# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Keep a run's TensorFlow ports to the run's own cluster, with one nftables table per run.

TensorFlow's gRPC port has no authentication and listens on every interface. While a run
lasts, its table accepts connections to the worker ports from loopback and from the
cluster's members (and any extra sources the user names) and drops all others. Deleting
the table removes every rule at once, so removal cannot leave half a rule set behind.

The table carries its own expiry: the rules match the worker ports through a set whose
elements time out (the job deadline plus a margin), so that a controller that dies, a
Ctrl-C or a host that dropped out of the playbook cannot leave the ports closed for ever.
An expired table matches nothing; the next run's firewall deletes it.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: tf_firewall
short_description: Restrict a TensorFlow run's worker ports to the cluster's members
version_added: "0.1.0"
author: tf-runbook contributors (!UNKNOWN)
description:
  - Creates (V(present)) or deletes (V(absent)) the nftables table of one run on a host.
    V(check) only tells whether nftables can be used. Needs root (become).
  - The table accepts connections to O(ports) from loopback and from O(members) and drops
    all others; its rules match nothing once O(expires) seconds have passed, so that a run
    whose controller died cannot leave the ports closed for ever. Each run also deletes the
    tables of earlier runs whose rules expired.
  - Supports check mode and diff mode (the table's rules before and after).
requirements:
  - nftables (the C(nft) command) on the host
extends_documentation_fragment:
  - tf_runbook.multiworker.attributes
options:
  state:
    description: V(present) creates or replaces the run's table, V(absent) deletes it,
      V(check) tells whether nftables can be used here and changes nothing.
    type: str
    choices: [present, absent, check]
    default: present
  run_id:
    description: The run whose table this is; the table's name is derived from it.
    type: str
    required: true
  ports:
    description: This host's worker ports (V(present) needs at least one).
    type: list
    elements: int
    default: []
  members:
    description: Addresses or host names allowed to connect (every worker host's address,
      and the addresses the workers' connections come from).
    type: list
    elements: str
    default: []
  expires:
    description: Seconds after which the table's rules match nothing any more (V(present));
      must be positive.
    type: int
    default: 0
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
    details: The table's rules before and after.
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Let only the cluster reach this host's worker ports for a day
  tf_runbook.multiworker.tf_firewall:
    state: present
    run_id: mnist-20260101-1200
    ports: [2222, 2223]
    members: [10.0.0.11, 10.0.0.12]
    expires: 86400
  become: true

- name: Tell whether nftables can be used on this host
  tf_runbook.multiworker.tf_firewall:
    state: check
    run_id: mnist-20260101-1200
  become: true

- name: Remove the run's rules once it ended
  tf_runbook.multiworker.tf_firewall:
    state: absent
    run_id: mnist-20260101-1200
  become: true
"""

RETURN = r"""
table:
  description: The run's nftables table name.
  type: str
  returned: always
  sample: tf_runbook_3f2a9c0d51e4
allowed:
  description: Source addresses the table accepts.
  type: list
  elements: str
  returned: state is present
  sample: [10.0.0.11, 10.0.0.12]
expired:
  description: Earlier runs' tables whose rules had expired, deleted now.
  type: list
  elements: str
  returned: states present and absent
expires:
  description: O(expires), as applied.
  type: int
  returned: state is present, not in check mode
script:
  description: The nft script that creates the table.
  type: str
  returned: state is present in check mode, or when nft refused it
"""

import hashlib
import ipaddress
import json
import re
import shutil
import socket
from typing import Any, Callable, NamedTuple

from ansible.module_utils.basic import AnsibleModule


PREFIX = "tf_runbook_"
PORT_SET = "ports"


def table_name(run_id: str) -> str:
    """A valid nftables identifier for the run (run ids may hold characters it refuses)."""
    return PREFIX + hashlib.sha256(run_id.encode("utf-8")).hexdigest()[:12]


def resolve(members: list[str]) -> tuple[list[str], list[str]]:
    """IPv4 and IPv6 addresses of every member, sorted and without repeats."""
    v4: set[str] = set()
    v6: set[str] = set()
    for member in members:
        name = member.strip("[]")
        try:
            addresses = [ipaddress.ip_address(name)]
        except ValueError:
            try:
                infos = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
            except socket.gaierror as exc:
                raise ValueError(f"member {member!r} does not resolve: {exc.strerror}") from None
            addresses = [ipaddress.ip_address(info[4][0].split("%", 1)[0]) for info in infos]
        for address in addresses:
            (v4 if address.version == 4 else v6).add(str(address))
    return sorted(v4, key=ipaddress.ip_address), sorted(v6, key=ipaddress.ip_address)


def ruleset(name: str, ports: list[int], v4: list[str], v6: list[str], expires: int) -> str:
    """The nft script that (re)creates the run's table; its rules match nothing once
    ``expires`` seconds have passed (the guarded ports are set elements with a timeout)."""
    if int(expires) <= 0:
        raise ValueError(f"the table needs a positive expiry, got {expires!r}")
    elements = ", ".join(f"{p} timeout {int(expires)}s" for p in sorted(set(ports)))
    port_set = f"@{PORT_SET}"
    lines = [
        f"table inet {name} {{",
        f"  set {PORT_SET} {{",
        "    type inet_service",
        "    flags timeout",
        f"    elements = {{ {elements} }}",
        "  }",
        "  chain input {",
        "    type filter hook input priority -10; policy accept;",
        f"    iifname \"lo\" tcp dport {port_set} accept",
    ]
    if v4:
        lines.append(f"    ip saddr {{ {', '.join(v4)} }} tcp dport {port_set} accept")
    if v6:
        lines.append(f"    ip6 saddr {{ {', '.join(v6)} }} tcp dport {port_set} accept")
    lines += [f"    tcp dport {port_set} drop", "  }", "}"]
    return "\n".join(lines) + "\n"


def expired_tables(listings: dict[str, Any]) -> list[str]:
    """Runbook tables whose port set has no element left (every rule expired), from
    ``nft -j list set inet <table> ports`` output by table name (None: no such set)."""
    expired = []
    for name, listing in sorted(listings.items()):
        if not name.startswith(PREFIX) or not listing:
            continue
        for item in listing.get("nftables", []):
            found = item.get("set")
            if found and found.get("name") == PORT_SET and not found.get("elem"):
                expired.append(name)
    return expired


class NftResult(NamedTuple):
    """What one nft command did."""

    returncode: int
    stdout: str
    stderr: str


# Runs nft with the given arguments (or, with ``script``, ``nft -f -`` reading it).
Nft = Callable[..., NftResult]


def nft_runner(module: AnsibleModule, nft: str) -> Nft:
    """Run the ``nft`` binary through the module's run_command (no shell, arguments as given)."""

    def run(*args: str, script: str | None = None) -> NftResult:
        argv = [nft, *args] if script is None else [nft, "-f", "-"]
        rc, out, err = module.run_command(argv, data=script, binary_data=True, expand_user_and_vars=False)
        return NftResult(rc, out, err)

    return run


def sweep_expired(nft: Nft, keep: str) -> list[str]:
    """Delete every runbook table whose rules expired, except ``keep``; return their names."""
    out = nft("-j", "list", "tables")
    if out.returncode != 0:
        return []
    try:
        tables = [item["table"]["name"] for item in json.loads(out.stdout).get("nftables", [])
                  if "table" in item and item["table"].get("family") == "inet"]
    except (ValueError, KeyError, TypeError):
        return []
    listings: dict[str, Any] = {}
    for name in tables:
        if name.startswith(PREFIX) and name != keep:
            found = nft("-j", "list", "set", "inet", name, PORT_SET)
            try:
                listings[name] = json.loads(found.stdout) if found.returncode == 0 else None
            except ValueError:
                listings[name] = None
    deleted = []
    for name in expired_tables(listings):
        if nft("delete", "table", "inet", name).returncode == 0:
            deleted.append(name)
    return deleted


def listing(nft: Nft, name: str) -> str | None:
    out = nft("list", "table", "inet", name)
    return out.stdout if out.returncode == 0 else None


_COUNTDOWN = re.compile(r" expires [0-9a-z]+")


def same_rules(before: str | None, after: str | None) -> bool:
    """Whether two listings of a table hold the same rules: the time left on each port
    (``expires 9m59s``) counts down between two listings and is no change."""
    if before is None or after is None:
        return before is after
    return _COUNTDOWN.sub("", before) == _COUNTDOWN.sub("", after)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["present", "absent", "check"], "default": "present"},
            "run_id": {"type": "str", "required": True},
            "ports": {"type": "list", "elements": "int", "default": []},
            "members": {"type": "list", "elements": "str", "default": []},
            "expires": {"type": "int", "default": 0},
        },
        supports_check_mode=True,
    )
    params = module.params
    name = table_name(params["run_id"])
    nft_path = shutil.which("nft") or next(
        (p for p in ("/usr/sbin/nft", "/sbin/nft") if shutil.which(p)), None
    )
    if nft_path is None:
        module.fail_json(msg="nft (nftables) is not installed: install it or set tf_firewall_enabled: false")
    nft = nft_runner(module, nft_path)
    probe = nft("list", "tables")
    if probe.returncode != 0:
        module.fail_json(
            msg=f"nftables cannot be used here ({probe.stderr.strip()}): tf_firewall_enabled needs root (become)"
        )
    before = listing(nft, name)

    if params["state"] == "check":
        module.exit_json(changed=False, table=name)
    diff = {"before_header": f"nft table inet {name}", "after_header": f"nft table inet {name}",
            "before": before or "", "after": ""}
    if params["state"] == "absent":
        expired = [] if module.check_mode else sweep_expired(nft, name)
        if before is not None and not module.check_mode:
            out = nft("delete", "table", "inet", name)
            if out.returncode != 0:
                module.fail_json(msg=f"cannot delete table {name}: {out.stderr.strip()}")
        module.exit_json(
            changed=before is not None or bool(expired), table=name, expired=expired,
            **({"diff": diff} if module._diff else {})
        )

    if not params["ports"]:
        module.fail_json(msg="state present needs the worker ports")
    try:
        v4, v6 = resolve(params["members"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    if params["expires"] <= 0:
        module.fail_json(msg=f"state present needs a positive expires, got {params['expires']}")
    script = ruleset(name, params["ports"], v4, v6, params["expires"])
    diff["after"] = script
    if module.check_mode:
        module.exit_json(
            changed=before is None, table=name, allowed=v4 + v6, script=script, **({"diff": diff} if module._diff else {})
        )
    # Replace in one transaction: the ports are never open to all in between.
    prefix = f"table inet {name}\ndelete table inet {name}\n" if before is not None else ""
    out = nft(script=prefix + script)
    if out.returncode != 0:
        module.fail_json(msg=f"nft refused the rules: {out.stderr.strip()}", script=script)
    expired = sweep_expired(nft, name)
    module.exit_json(
        changed=not same_rules(before, listing(nft, name)) or bool(expired), table=name, allowed=v4 + v6, expired=expired,
        expires=params["expires"], **({"diff": diff} if module._diff else {})
    )


if __name__ == "__main__":
    main()
