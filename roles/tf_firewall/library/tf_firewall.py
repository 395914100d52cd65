#!/usr/bin/python
"""Keep a run's TensorFlow ports to the run's own cluster, with one nftables table per run.

TensorFlow's gRPC port has no authentication and listens on every interface. While a run
lasts, its table accepts connections to the worker ports from loopback and from the
cluster's members (and any extra sources the user names) and drops all others. Deleting
the table removes every rule at once, so removal cannot leave half a rule set behind.
"""

from __future__ import annotations

import hashlib
import ipaddress
import shutil
import socket
import subprocess
from typing import Any

DOCUMENTATION = r"""
module: tf_firewall
short_description: Restrict a TensorFlow run's worker ports to the cluster's members
description:
  - Creates (C(present)) or deletes (C(absent)) the nftables table of one run on a host.
    C(check) only tells whether nftables can be used. Needs root (become).
  - Supports check mode and diff mode (the table's rules before and after).
options:
  state:
    type: str
    choices: [present, absent, check]
    default: present
  run_id:
    type: str
    required: true
  ports:
    type: list
    elements: int
    default: []
  members:
    description: Addresses or host names allowed to connect (every worker host's address).
    type: list
    elements: str
    default: []
"""

RETURN = r"""
table:
  description: The run's nftables table name.
  type: str
allowed:
  description: Source addresses the table accepts.
  type: list
diff:
  description: In diff mode, the run's table as nft lists it now and the rules it would have.
  type: dict
  returned: diff mode, states present and absent
"""


def table_name(run_id: str) -> str:
    """A valid nftables identifier for the run (run ids may hold characters it refuses)."""
    return "tf_runbook_" + hashlib.sha256(run_id.encode("utf-8")).hexdigest()[:12]


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


def ruleset(name: str, ports: list[int], v4: list[str], v6: list[str]) -> str:
    """The nft script that (re)creates the run's table."""
    port_set = "{ " + ", ".join(str(p) for p in sorted(set(ports))) + " }"
    lines = [
        f"table inet {name} {{",
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


def _nft(nft: str, *args: str, script: str | None = None) -> subprocess.CompletedProcess[str]:
    argv = [nft, *args] if script is None else [nft, "-f", "-"]
    return subprocess.run(argv, input=script, capture_output=True, text=True, check=False)


def listing(nft: str, name: str) -> str | None:
    out = _nft(nft, "list", "table", "inet", name)
    return out.stdout if out.returncode == 0 else None


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["present", "absent", "check"], "default": "present"},
            "run_id": {"type": "str", "required": True},
            "ports": {"type": "list", "elements": "int", "default": []},
            "members": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    params = module.params
    name = table_name(params["run_id"])
    nft = shutil.which("nft") or next(
        (p for p in ("/usr/sbin/nft", "/sbin/nft") if shutil.which(p)), None
    )
    if nft is None:
        module.fail_json(msg="nft (nftables) is not installed: install it or set tf_firewall_enabled: false")
    probe = _nft(nft, "list", "tables")
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
        if before is not None and not module.check_mode:
            out = _nft(nft, "delete", "table", "inet", name)
            if out.returncode != 0:
                module.fail_json(msg=f"cannot delete table {name}: {out.stderr.strip()}")
        module.exit_json(changed=before is not None, table=name, **({"diff": diff} if module._diff else {}))

    if not params["ports"]:
        module.fail_json(msg="state present needs the worker ports")
    try:
        v4, v6 = resolve(params["members"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    script = ruleset(name, params["ports"], v4, v6)
    diff["after"] = script
    if module.check_mode:
        module.exit_json(
            changed=before is None, table=name, allowed=v4 + v6, script=script, **({"diff": diff} if module._diff else {})
        )
    # Replace in one transaction: the ports are never open to all in between.
    prefix = f"table inet {name}\ndelete table inet {name}\n" if before is not None else ""
    out = _nft(nft, script=prefix + script)
    if out.returncode != 0:
        module.fail_json(msg=f"nft refused the rules: {out.stderr.strip()}", script=script)
    module.exit_json(
        changed=listing(nft, name) != before, table=name, allowed=v4 + v6, **({"diff": diff} if module._diff else {})
    )


if __name__ == "__main__":
    main()
