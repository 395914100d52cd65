# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The preflight probe's listeners: short-lived servers on a host's worker ports that stand
in for TensorFlow, answer with the token of their host and run, end once every peer said
hello (or on a ``stop`` carrying that token, or at their lifetime), and the ways to wait for
them or stop them (the modules ``tf_preflight_host`` and ``tf_preflight_stop`` run them on the host)."""

from __future__ import annotations

import errno
import os
import selectors
import socket
import time
from typing import Any

from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_probe_ports import bind_error, port_owner

PROBE = "tf-runbook-probe"
# Seconds one connection to a probe listener may take, from its accept to its close.
CONNECTION_BUDGET = 2.0


def probe_token(run_id: str, host: str) -> str:
    """What the probe listener of ``host`` answers for run ``run_id``: a connector knows
    from it that the listener that accepted is the probe of that host and run, not an
    unrelated service at a wrong address, nor another host's probe."""
    return f"{PROBE} {run_id} {host}"


def stop_message(token: str) -> bytes:
    return f"stop {token}".strip().encode() + b"\n"


def _open_listeners(ports: list[int]) -> dict[socket.socket, int]:
    listeners = {}
    for port in ports:
        try:
            sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            address = "::"
        except OSError:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            address = "0.0.0.0"
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, port))
        sock.listen(1024)  # every host of a large cluster connects at once
        listeners[sock] = port
    return listeners


def listen(ports: list[int], peers: list[str], lifetime: float, token: str = "") -> dict[str, Any]:
    """Accept hellos on every port until each peer reached each port, or ``stop``."""
    return serve(_open_listeners(ports), peers, lifetime, token)


def serve(
    listeners: dict[socket.socket, int], peers: list[str], lifetime: float, token: str = "",
    budget: float = CONNECTION_BUDGET,
) -> dict[str, Any]:
    """Answer each hello with ``token``; end on a ``stop`` that carries the same token, once
    every peer reached every port, or after ``lifetime`` seconds, whichever comes first.

    Every connection is served at once (one selector, no connection waits behind another),
    and each gets at most ``budget`` seconds from its accept: the listener sends ``token``
    at once (a connector checks it before it sends anything, so that a service that is not
    the probe never gets a byte from it), then the peer sends its line and closes first (so
    that TIME_WAIT stays on the peer's side and not on the worker port that TensorFlow
    binds next). A client that trickles bytes is cut off at its budget,
    and nothing a client does moves the end of the listener's ``lifetime``.
    """
    heard: dict[int, set[str]] = {port: set() for port in listeners.values()}
    expected = set(peers)
    deadline = time.monotonic() + lifetime
    stopped = False
    selector = selectors.DefaultSelector()
    # Each open connection: its port, the bytes of its line so far (None once answered),
    # and when its budget ends.
    open_conns: dict[socket.socket, list[Any]] = {}

    def finish(conn: socket.socket) -> None:
        selector.unregister(conn)
        del open_conns[conn]
        conn.close()

    def close_listeners() -> None:
        for sock in listeners:
            if sock.fileno() >= 0:
                selector.unregister(sock)
                sock.close()

    for sock in listeners:
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
    try:
        accepting = True
        while True:
            now = time.monotonic()
            for conn in [c for c, (_port, _line, ends) in open_conns.items() if ends <= now]:
                finish(conn)  # out of budget: silent, trickling, or slow to close
            if accepting and (stopped or (expected and all(expected <= names for names in heard.values()))):
                accepting = False
                close_listeners()  # the ports are free; answered peers may still close first
            if now >= deadline or (not accepting and not open_conns):
                break
            next_end = min([deadline] + [ends for _port, _line, ends in open_conns.values()])
            for key, _events in selector.select(min(0.2, max(next_end - now, 0.0))):
                sock = key.fileobj
                if sock in listeners:
                    try:
                        conn, _peer = sock.accept()
                    except OSError:
                        continue  # the peer gave up before the accept
                    conn.setblocking(False)
                    # The listener speaks first: a connector checks who answered before
                    # it sends a byte, so that an unrelated service gets nothing from it.
                    try:
                        conn.send(f"{token or PROBE}\n".encode())
                    except OSError:
                        conn.close()
                        continue  # the peer did not wait for the answer
                    open_conns[conn] = [listeners[sock], b"", min(time.monotonic() + budget, deadline)]
                    selector.register(conn, selectors.EVENT_READ)
                    continue
                state = open_conns[sock]
                try:
                    data = sock.recv(256)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    data = b""
                if not data:
                    finish(sock)  # the peer closed: done with it
                    continue
                if state[1] is None:
                    continue  # heard: wait for the peer to close
                state[1] += data
                if b"\n" not in state[1] and len(state[1]) < 256:
                    continue
                line, state[1] = state[1].split(b"\n", 1)[0] + b"\n", None
                if line == stop_message(token):
                    stopped = True
                elif line.startswith(b"hello "):
                    heard[state[0]].add(line[6:].decode("utf-8", "replace").strip())
    finally:
        for conn in list(open_conns):
            finish(conn)
        close_listeners()
        selector.close()
    return {"heard": {str(port): sorted(names) for port, names in heard.items()}, "stopped": stopped}


def start_listener(ports: list[int], peers: list[str], lifetime: float, token: str = "") -> int:
    """Bind the listeners now, serve them from a detached process; return its pid.

    Binding before returning means that every listener is up once the task is done on
    every host, so the connect probes never race it. The server process leaves the
    module's session and output, so that the module returns at once.
    """
    listeners = _open_listeners(ports)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # first child: detach, fork the server, report its pid, leave
        try:
            os.close(read_end)
            os.setsid()
            server = os.fork()
            if server == 0:
                os.close(write_end)
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                try:
                    serve(listeners, peers, lifetime, token)
                finally:
                    os._exit(0)
            os.write(write_end, str(server).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    os.waitpid(pid, 0)
    with os.fdopen(read_end) as handle:
        server_pid = int(handle.read() or 0)
    for sock in listeners:
        sock.close()
    return server_pid


def listen_failure(me: str, ports: list[int], exc: OSError) -> str:
    """Why the probe's listeners could not start. The look found the ports free a moment
    before (else nothing listens): a port taken since is most often another host of the
    play on this same machine, whose probe listens on it now."""
    since = (
        ": they were free when the probe looked a moment before, so another host of the play holds them on "
        "this same machine (an inventory that names one machine twice: list it once, with tf_worker_slots), "
        "or a process took them since"
        if exc.errno == errno.EADDRINUSE else ""
    )
    return (f"Preflight refused the run: host {me}: cannot listen on worker port(s) "
            f"{', '.join(str(p) for p in ports)}: {exc.strerror or exc}{since}")


def process_gone(pid: int, proc: str = "/proc") -> bool:
    """Whether process ``pid`` has ended (a zombie has: an orphan's reaper may be slow)."""
    try:
        with open(os.path.join(proc, str(pid), "stat"), encoding="ascii", errors="replace") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


def await_listener_end(ports: list[int], pid: int, wait: float) -> list[int]:
    """Wait up to ``wait`` seconds for this host's probe listener ``pid`` (0: none was
    started) to end by itself and for ``ports`` to be free; return the ports still held
    then ([] once it ended and they are free).

    The listener ends once every peer reached every port it holds, so this returns when
    the last host of the cluster has connected here; it never shortens the listener's life.
    """
    if not pid:
        return []
    deadline = time.monotonic() + wait
    while True:
        held = [port for port in ports if bind_error(port)] if process_gone(pid) else list(ports)
        if not held or time.monotonic() >= deadline:
            return held
        time.sleep(0.1)


def stop_listeners(ports: list[int], wait: float, token: str = "", pid: int | None = None) -> list[int]:
    """Send ``stop`` to this host's listeners; return the ports still taken after ``wait``.

    With ``pid`` (the probe's listener, 0 when none was started), only the ports that
    process holds are told to stop and waited for: a port held by any other process (the
    reason the run was refused, often) gets no byte from the probe.
    """
    if pid is not None:
        ports = [port for port in ports if pid and port_owner(port).get("pid") == pid]
    for port in ports:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
                conn.sendall(stop_message(token))
        except OSError:
            pass  # nothing listens: already ended
    deadline = time.monotonic() + wait
    busy = list(ports)
    while busy and time.monotonic() < deadline:
        busy = [port for port in busy if bind_error(port)]
        if busy:
            time.sleep(0.1)
    return busy
