# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The chief's checkpoint copied host to host between attempts (issue 42), off the
controller's data path.

The frame is the sidecar evaluator's push (tf_checkpoint_wire): a header line signed with
the copy's key (HMAC-SHA256), the files' bytes, data files first and pointers last, then
a trailer. Between attempts no TensorFlow server runs, so each target host listens on its
own worker port (the first of the cluster spec's, which the firewall opens between the
run's hosts): the look's module run starts that listener (a detached process, forked
from the module after its bind succeeded) and returns; the chief's pack run connects to
the first target and sends the files once; each target stages what it receives and, at
the same time, passes every byte on to the next target of the chain (re-signing the
header for it); then it checks each file's sha256 against the signed header, swaps the
files in (tf_checkpoint_copy.install: staged, pointers last, recorded complete last) and
answers with its outcome and those of the hosts after it. A target that cannot be reached
is passed over (the next one is tried) and reported ``reached: false``; the controller
then sends it the copy through itself. The controller sees sizes, hashes and outcomes.

Header fields beyond the push's: ``kind`` ``relay`` (or ``close``: nothing for this host,
stop listening), ``to`` (the host the message is for), ``sha256`` and ``mtimes`` (each
file's), ``chain`` (``[host, address, port]`` of the hosts after this one). The trailer is
HMAC-SHA256 of the header's JSON and each file's sha256 as received, in order: the files'
bytes are covered through their hashes, which the signed header carries.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import time
from typing import Any, Callable

from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_checkpoint_wire import (
    CHUNK,
    MessageRefused,
    header_line,
    is_pointer,
    read_header,
    read_line,
    sign,
)

# A target's connect, each read or write, the wait for the answer of the hosts after it
# (they check and swap in a whole checkpoint), and how long a listener waits for its
# message before it gives the port back.
CONNECT_SECONDS = 5.0
IO_SECONDS = 60.0
ANSWER_SECONDS = 600.0
LISTEN_SECONDS = 300.0
ANSWER_BYTES = 1 << 20


def hashes_mac(key: bytes, body: bytes, digests: list[str]) -> bytes:
    """The trailer: the header's JSON and each file's sha256, in order, under the key."""
    return sign(key, body + "".join(digests).encode("ascii")).encode("ascii")


def check_relay_header(header: dict[str, Any], host: str) -> None:
    """Refused unless the signed header is a relay (or close) for ``host``, with a sha256
    for each of its files and a well-formed chain."""
    if header.get("to") != host:
        raise MessageRefused(f"a message for {header.get('to')!r}, not {host!r}")
    if header.get("kind") == "close":
        return
    if header.get("kind") != "relay":
        raise MessageRefused(f"not a relay ({header.get('kind')!r})")
    digests, mtimes = header.get("sha256"), header.get("mtimes")
    for name, _size in header["files"] + header["pointers"]:
        if not isinstance(digests, dict) or not isinstance(digests.get(name), str):
            raise MessageRefused(f"no sha256 for {name!r}")
        if not isinstance(mtimes, dict) or not isinstance(mtimes.get(name), (int, float)):
            raise MessageRefused(f"no mtime for {name!r}")
    chain = header.get("chain")
    if not isinstance(chain, list) or not all(
        isinstance(hop, list) and len(hop) == 3 and isinstance(hop[1], str) and isinstance(hop[2], int) for hop in chain
    ):
        raise MessageRefused("bad chain")


def failed(hosts: list[Any], why: str, reached: bool) -> dict[str, dict[str, Any]]:
    return {str(hop[0]): {"ok": False, "reached": reached, "error": why} for hop in hosts}


def connect_next(chain: list[list[Any]]) -> tuple[socket.socket | None, list[list[Any]], dict[str, Any]]:
    """A connection to the first host of ``chain`` that answers, the hosts after it, and
    an outcome for each host passed over (not reached)."""
    passed: dict[str, Any] = {}
    for number, (host, address, port) in enumerate(chain):
        try:
            conn = socket.create_connection((address, port), timeout=CONNECT_SECONDS)
        except OSError as exc:
            passed[str(host)] = {"ok": False, "reached": False, "error": f"{address}:{port}: {type(exc).__name__}: {exc}"}
            continue
        conn.settimeout(IO_SECONDS)
        return conn, chain[number + 1:], passed
    return None, [], passed


class Downstream:
    """The next host of the chain, fed as the bytes arrive; a failure stops feeding it and
    is told as the outcome of every host from it on."""

    def __init__(self, key: bytes, header: dict[str, Any]) -> None:
        self.key = key
        self.outcomes: dict[str, Any] = {}
        self.conn, rest, self.outcomes = connect_next(header["chain"])
        self.hosts = [hop for hop in header["chain"] if str(hop[0]) not in self.outcomes]
        self.body = b""
        if self.conn is not None:
            hop = self.hosts[0]
            line, self.body = header_line(key, {**header, "to": hop[0], "chain": rest})
            self.send(line)

    def send(self, data: bytes) -> None:
        if self.conn is None:
            return
        try:
            self.conn.sendall(data)
        except OSError as exc:
            answer = refusal(self.conn)
            if answer:  # the host refused the message (its answer says why) and closed
                self.conn.close()
                self.conn = None
                self.outcomes.update(parse_answer(answer, self.hosts))
                return
            self.cut(f"the relay to {self.hosts[0][0]} broke: {type(exc).__name__}: {exc}")

    def cut(self, why: str) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None
            self.outcomes.update(failed(self.hosts, why, reached=False))

    def finish(self, digests: list[str]) -> dict[str, Any]:
        """Send the trailer, then the hosts' answer: each host after this one to its outcome."""
        if self.conn is None:
            return self.outcomes
        self.send(hashes_mac(self.key, self.body, digests) + b"\n")
        if self.conn is None:
            return self.outcomes
        try:
            self.conn.shutdown(socket.SHUT_WR)
            self.conn.settimeout(ANSWER_SECONDS)
            answer = read_line(self.conn, ANSWER_BYTES)
        except (OSError, MessageRefused) as exc:
            self.cut(f"no answer from {self.hosts[0][0]}: {type(exc).__name__}: {exc}")
            return self.outcomes
        self.conn.close()
        self.conn = None
        self.outcomes.update(parse_answer(answer, self.hosts))
        return self.outcomes


def refusal(conn: socket.socket) -> bytes:
    """The receiver's ``NO ...`` answer, if it sent one before it closed; else b""."""
    try:
        conn.settimeout(2.0)
        answer = read_line(conn, 512)
    except (OSError, MessageRefused):
        return b""
    return answer if answer.startswith(b"NO ") else b""


def drain(conn: socket.socket, seconds: float = 2.0) -> None:
    """After a refusal: read (and drop) what the sender still sends, for a while, so that
    closing does not reset the connection before the sender read the answer."""
    end = time.monotonic() + seconds
    try:
        conn.shutdown(socket.SHUT_WR)
        conn.settimeout(0.5)
        while time.monotonic() < end and conn.recv(CHUNK):
            pass
    except OSError:
        pass


def parse_answer(answer: bytes, hosts: list[list[Any]]) -> dict[str, Any]:
    """The outcomes in an answer ``OK <json>``; a refusal (``NO why``) or nothing is the
    first host's failure and the others' not reached."""
    text = answer.decode("utf-8", "replace")
    if text.startswith("OK "):
        try:
            outcomes = json.loads(text[3:])
        except ValueError:
            outcomes = None
        if isinstance(outcomes, dict):
            missing = [hop for hop in hosts if str(hop[0]) not in outcomes]
            return {**outcomes, **failed(missing, "no outcome in the relay's answer", reached=False)}
    why = text[3:] if text.startswith("NO ") else f"a bad answer: {text[:200]!r}"
    return {**failed(hosts[:1], why, reached=True), **failed(hosts[1:], f"after {hosts[0][0]}, which refused", False)}


def receive(conn: socket.socket, header: dict[str, Any], body: bytes, key: bytes, down: Downstream,
            staging: str) -> list[str]:  # fmt: skip
    """Every file of the message into ``staging`` (fsynced, with its mtime), passed on to
    ``down`` as it arrives; each file's sha256 checked against the signed header and the
    trailer against them. The digests, in order."""
    digests = []
    for name, size in header["files"] + header["pointers"]:
        path = os.path.join(staging, name)
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        digest = hashlib.sha256()
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(descriptor, "wb") as out:
            left = size
            while left:
                data = conn.recv(min(CHUNK, left))
                if not data:
                    raise MessageRefused("the transfer was cut short")
                down.send(data)
                digest.update(data)
                out.write(data)
                left -= len(data)
            out.flush()
            os.fsync(out.fileno())
        mtime = float(header["mtimes"][name])
        os.utime(path, (mtime, mtime))
        digests.append(digest.hexdigest())
        if digests[-1] != header["sha256"][name]:
            raise MessageRefused(f"{name} arrived with another sha256 than the chief's")
    trailer = read_line(conn, 128)
    if trailer != hashes_mac(key, body, digests):
        raise MessageRefused("bad trailer: the files are not the signed ones")
    return digests


def take(conn: socket.socket, header: dict[str, Any], body: bytes, key: bytes, host: str,
         install: Callable[[list[str], Callable[[str], None]], dict[str, Any]]) -> dict[str, Any]:  # fmt: skip
    """One relay message: received, passed on, swapped in. Every host's outcome."""
    down = Downstream(key, header)
    names = [name for name, _size in header["files"] + header["pointers"]]
    digests: list[str] = []
    try:
        done = install(names, lambda staging: digests.extend(receive(conn, header, body, key, down, staging)))
        size = sum(int(size) for _name, size in header["files"] + header["pointers"])
        mine = {"ok": True, "reached": True, "bytes": size, **done}
    except (MessageRefused, OSError, ValueError) as exc:
        mine = {"ok": False, "reached": True, "error": f"{type(exc).__name__}: {exc}"}
        down.cut(f"after {host}, which failed")
    return {host: mine, **down.finish(digests)}


def wait_for_close(conn: socket.socket) -> None:
    """Let the sender close first (its side keeps the TIME_WAIT, not this host's port)."""
    try:
        conn.settimeout(5.0)
        conn.recv(1)
    except OSError:
        pass


def serve(server: socket.socket, key: bytes, marker: str, host: str,
          install: Callable[[list[str], Callable[[str], None]], dict[str, Any]], seconds: float) -> str:  # fmt: skip
    """Serve ``server`` until a message signed for this copy arrives (or ``seconds`` pass):
    the port is given back as soon as it arrived. Returns what happened, for the tests."""
    deadline = time.monotonic() + seconds
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return "timeout"
            server.settimeout(left)
            try:
                conn, _peer = server.accept()
            except socket.timeout:
                return "timeout"
            with conn:
                conn.settimeout(IO_SECONDS)
                try:
                    header, body = read_header(conn, key, marker, 0)
                    check_relay_header(header, host)
                except (MessageRefused, OSError, ValueError, KeyError, TypeError, IndexError) as exc:
                    try:
                        conn.sendall(f"NO {exc}".encode("utf-8", "replace")[:400] + b"\n")
                    except OSError:
                        pass
                    drain(conn)
                    continue
                server.close()
                outcomes = {} if header["kind"] == "close" else take(conn, header, body, key, host, install)
                try:
                    conn.sendall(b"OK " + json.dumps(outcomes, sort_keys=True).encode("utf-8") + b"\n")
                    wait_for_close(conn)
                except OSError:
                    pass
                return str(header["kind"])
    finally:
        server.close()


def listen(port: int) -> socket.socket:
    """A listening socket on ``port`` on every address (IPv4 and, where the host has it,
    IPv6), as the supervisor's; raises OSError when the port is taken."""
    if socket.has_dualstack_ipv6():
        return socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True)
    return socket.create_server(("", port))


def start_listener(port: int, key: bytes, marker: str, host: str,
                   install: Callable[[list[str], Callable[[str], None]], dict[str, Any]],
                   seconds: float = LISTEN_SECONDS) -> dict[str, Any]:  # fmt: skip
    """Listen on ``port`` and leave a detached process serving it (double fork, its own
    session, no descriptor of the module's run kept: the SSH session ends with the module);
    ``{"listening": True, "port": port}``, or ``{"listening": False, "error": why}`` when the
    port cannot be listened on."""
    try:
        server = listen(port)
    except OSError as exc:
        return {"listening": False, "port": port, "error": f"port {port}: {exc}"}
    pid = os.fork()
    if pid:
        server.close()
        os.waitpid(pid, 0)
        return {"listening": True, "port": port}
    try:  # the first child: a session of its own, then the server's process, detached
        os.setsid()
        if os.fork():
            os._exit(0)
        for number in (signal.SIGTERM, signal.SIGINT):  # the module's process may have handlers of its own
            signal.signal(number, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        null = os.open(os.devnull, os.O_RDWR)
        for descriptor in (0, 1, 2):
            os.dup2(null, descriptor)
        keep = server.fileno()
        os.closerange(3, keep)
        os.closerange(keep + 1, 65536)
        serve(server, key, marker, host, install, seconds)
    finally:
        os._exit(0)


def send_chain(chain: list[list[Any]], key: bytes, marker: str, directory: str,
               files: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    """The chief's side: the files (``files``: name to ``[size, sha256]``, as its mark
    listed them) read from ``directory`` and sent once, to the first host of ``chain``
    that answers; each host's outcome (``ok``, ``reached``, ``error``, or what its swap
    did: ``files``, ``bytes``, ``removed``, ``redone``)."""
    names = sorted(files, key=lambda name: (is_pointer(name), name))
    mtimes = {name: os.lstat(os.path.join(directory, name)).st_mtime for name in names}
    header = {
        "run_id": marker, "seq": 1, "kind": "relay",
        "files": [[n, int(files[n][0])] for n in names if not is_pointer(n)],
        "pointers": [[n, int(files[n][0])] for n in names if is_pointer(n)],
        "sha256": {n: str(files[n][1]) for n in names}, "mtimes": mtimes, "chain": chain,
    }  # fmt: skip
    down = Downstream(key, header)
    if down.conn is None:
        return down.outcomes
    digests = []
    for name in names:
        size, left = int(files[name][0]), int(files[name][0])
        digest = hashlib.sha256()
        descriptor = os.open(os.path.join(directory, name), os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(descriptor, "rb") as handle:
            while left and down.conn is not None:
                data = handle.read(min(CHUNK, left))
                if not data:
                    raise ValueError(f"{name} shrank below {size} bytes while it was sent")
                digest.update(data)
                down.send(data)
                left -= len(data)
        digests.append(digest.hexdigest())
        if down.conn is None:
            break
    return down.finish(digests)


def close_listeners(hosts: list[list[Any]], key: bytes, marker: str) -> None:
    """Tell each listener that is sent nothing (a host that shares another's directory)
    to give its port back; one that cannot be reached gives it back at its deadline."""
    for host, address, port in hosts:
        try:
            with socket.create_connection((address, port), timeout=CONNECT_SECONDS) as conn:
                conn.settimeout(IO_SECONDS)
                line, _body = header_line(key, {"run_id": marker, "seq": 1, "kind": "close", "to": host})
                conn.sendall(line)
                read_line(conn, 512)
        except (OSError, MessageRefused):
            continue
