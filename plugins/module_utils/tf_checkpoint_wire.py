# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The checkpoint channel between hosts (issues 41 and 42): its message frame, shared by
the sidecar evaluator's push (roles/tf_worker/files/tf_checkpoint_push.py, shipped next to
the supervisor) and the copy between attempts (tf_checkpoint_relay, in a module run).

One connection is one message: a header line ``TFCKPT1 <mac> <json>`` (``mac``:
HMAC-SHA256 of the JSON under the run's key, checked before anything is written), the
files' bytes, then a trailer line, and the receiver's answer. Standard library only: the
deploy ships it next to the supervisor (tf_run.SHARED_MODULES).
"""

from __future__ import annotations

import hmac
import json
import os
import socket
from typing import Any

try:  # on the controller, as part of the collection
    from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import CHECKPOINT_OWN_PREFIX, POINTER_FILES
except ImportError:  # on a host, next to the supervisor
    from tf_run import CHECKPOINT_OWN_PREFIX, POINTER_FILES  # type: ignore[no-redef]

MAGIC = b"TFCKPT1 "
HEADER_BYTES = 1 << 20
CHUNK = 1 << 20


class MessageRefused(ValueError):
    """A message the receiver does not take (unsigned, another run's, malformed)."""


def sign(key: bytes, data: bytes) -> str:
    return hmac.new(key, data, "sha256").hexdigest()


def safe_name(name: Any) -> str:
    """A relative path inside a checkpoint directory, never the runbook's own files; raises
    MessageRefused for anything else (absolute, ``..``, empty parts)."""
    if not isinstance(name, str) or not name or name.startswith("/") or "\\" in name or "\0" in name:
        raise MessageRefused(f"bad file name {name!r}")
    parts = name.split("/")
    if any(p in ("", ".", "..") for p in parts) or parts[0].startswith(CHECKPOINT_OWN_PREFIX):
        raise MessageRefused(f"bad file name {name!r}")
    return name


def is_pointer(name: str) -> bool:
    return os.path.basename(name) in POINTER_FILES


def header_line(key: bytes, header: dict[str, Any]) -> tuple[bytes, bytes]:
    """(the header line, its JSON): what the MAC and the trailer cover."""
    body = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return MAGIC + sign(key, body).encode("ascii") + b" " + body + b"\n", body


def read_line(conn: socket.socket, limit: int) -> bytes:
    """One line of at most ``limit`` bytes (without its newline), read byte-wise so that
    nothing after it is taken from the socket."""
    data = bytearray()
    while len(data) <= limit:
        byte = conn.recv(1)
        if not byte or byte == b"\n":
            return bytes(data)
        data += byte
    raise MessageRefused("header line too long")


def read_header(conn: socket.socket, key: bytes, run_id: str, last_seq: int) -> tuple[dict[str, Any], bytes]:
    """The header and its JSON, its MAC checked under ``key``; MessageRefused for anything not
    signed with this run's key and id, or not newer than ``last_seq``."""
    line = read_line(conn, HEADER_BYTES)
    if not key or not line.startswith(MAGIC):
        raise MessageRefused("not a checkpoint push")
    mac, _space, body = line[len(MAGIC):].partition(b" ")
    if not hmac.compare_digest(mac, sign(key, body).encode("ascii")):
        raise MessageRefused("bad signature")
    header = json.loads(body)
    if header.get("run_id") != run_id:
        raise MessageRefused(f"another run's push ({header.get('run_id')!r})")
    if not isinstance(header.get("seq"), int) or header["seq"] <= last_seq:
        raise MessageRefused("an old message (replayed)")
    for entry in header.get("files", []) + header.get("pointers", []):
        safe_name(entry[0])
        if not isinstance(entry[1], int) or entry[1] < 0:
            raise MessageRefused(f"bad size for {entry[0]!r}")
    return header, body
