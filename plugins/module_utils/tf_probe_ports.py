# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A host's worker ports as the preflight probe looks at them: whether each can be bound as
TensorFlow binds it, and which process holds a taken one (standard library only; the
module ``tf_preflight_host`` runs it on the host)."""

from __future__ import annotations

import errno
import os
import socket
from typing import Any


def bind_error(port: int) -> int:
    """0 when ``port`` can be bound on every interface, as TensorFlow binds it, else errno."""
    for family, address in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue  # no IPv6 on this host: the IPv4 bind below decides
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.bind((address, port))
            return 0
        except OSError as exc:
            if exc.errno != errno.EAFNOSUPPORT and exc.errno != errno.EADDRNOTAVAIL:
                return exc.errno or errno.EADDRINUSE
        finally:
            sock.close()
    return 0


def listening_inodes(port: int, proc: str = "/proc") -> set[str]:
    """Socket inodes of TCP listeners on ``port``, from /proc/net/tcp and tcp6."""
    inodes = set()
    for table in ("tcp", "tcp6"):
        try:
            with open(os.path.join(proc, "net", table), encoding="ascii") as handle:
                lines = handle.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10:
                continue
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                inodes.add(inode)
    return inodes


def port_owner(port: int, proc: str = "/proc") -> dict[str, Any]:
    """The pid and process name holding ``port``, where this user may see them.

    Only the process name (``comm``) is reported, never its command line, which may hold
    secrets.
    """
    wanted = {f"socket:[{inode}]" for inode in listening_inodes(port, proc)}
    if not wanted:
        return {}
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        fd_dir = os.path.join(proc, entry, "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue  # another user's process, or gone
        links = set()
        for fd in fds:
            try:
                links.add(os.readlink(os.path.join(fd_dir, fd)))
            except OSError:
                continue  # closed meanwhile
        if wanted.intersection(links):
            try:
                with open(os.path.join(proc, entry, "comm"), encoding="utf-8", errors="replace") as handle:
                    name = handle.read().strip()
            except OSError:
                name = ""
            return {"pid": int(entry), "process": name}
    return {}


def busy_ports(ports: list[int], proc: str = "/proc") -> list[dict[str, Any]]:
    """Each of ``ports`` that cannot be bound: ``port``, ``error``, and ``pid`` and
    ``process`` where the holder can be seen."""
    busy = []
    for port in ports:
        err = bind_error(port)
        if err:
            busy.append({"port": port, "error": os.strerror(err), **port_owner(port, proc)})
    return busy
