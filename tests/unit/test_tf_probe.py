"""The reachability probe scales (issue 24 point 17, issue 26 "Scale"): its listener serves
every connection at once within a bounded lifetime that no client can extend, and each host
connects to its peers concurrently, a bounded number at a time."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any, Iterator

import pytest
from ansible_collections.tf_runbook.multiworker.plugins.module_utils import (
    tf_probe_listen,
    tf_probe_ports,
    tf_probe_reach,
)
from conftest import PLUGINS
from helpers import run_module, tcp_server_side, wait_until

# The modules, run as Ansible runs them; their functions live in module_utils/tf_probe_*.py.
HOST_MODULE = PLUGINS / "modules" / "tf_preflight_host.py"

# Generous margins: this machine's cores are shared with other test runs.
MARGIN = 1.5


def listening_socket() -> tuple[socket.socket, int]:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    return sock, sock.getsockname()[1]


def serve_in_thread(peers: list[str], lifetime: float, token: str = "") -> tuple[threading.Thread, dict[str, Any], int]:
    sock, port = listening_socket()
    result: dict[str, Any] = {}

    def run() -> None:
        started = time.monotonic()
        result.update(tf_probe_listen.serve({sock: port}, peers, lifetime, token))
        result["seconds"] = time.monotonic() - started

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result, port


def hello(port: int, me: str, delay: float = 0.0, timeout: float = 20, answered: dict[str, float] | None = None) -> bytes:
    """Connect, wait ``delay`` seconds, say hello, read the answer's line, wait ``delay``
    seconds again (a far peer: its close reaches the listener a round trip later), close;
    return the answer. ``answered`` records when the answer came."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
        time.sleep(delay)
        conn.sendall(f"hello {me}\n".encode())
        answer = tf_probe_reach.read_line(conn, timeout)
        if answered is not None:
            answered[me] = time.monotonic()
        time.sleep(delay)
        return answer


@pytest.fixture
def trickler() -> Iterator[Any]:
    """Starts clients that send one byte every 50 ms, never a line, never closing on their
    own; stops them at the end of the test. Each records its port (``port``), how many bytes
    it sent (``sent``) and when its connection was cut (``cut_after``)."""
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def start(port: int, record: dict[str, float]) -> None:
        def run() -> None:
            with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
                begun = time.monotonic()
                record["port"] = conn.getsockname()[1]
                try:
                    while not stop.is_set():
                        conn.sendall(b"h")
                        record["sent"] = record.get("sent", 0) + 1
                        time.sleep(0.05)
                except OSError:
                    record["cut_after"] = time.monotonic() - begun

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        threads.append(thread)

    yield start
    stop.set()
    for thread in threads:
        thread.join(5)


def test_a_trickling_client_does_not_keep_the_listener_past_its_lifetime(trickler: Any) -> None:
    lifetime = 1.5
    thread, result, port = serve_in_thread(["never-comes"], lifetime)
    trickler(port, {})
    thread.join(lifetime + MARGIN + 10)
    assert not thread.is_alive(), "the listener outlived its lifetime while a client trickled bytes"
    assert result["seconds"] < lifetime + MARGIN, result
    assert tf_probe_ports.bind_error(port) == 0  # the port is free again


def test_a_trickling_client_is_cut_at_its_budget_and_delays_no_one(trickler: Any) -> None:
    thread, result, port = serve_in_thread(["a"], 30, "token")
    record: dict[str, float] = {}
    trickler(port, record)

    def trickler_served() -> bool:  # the listener accepted it and reads what it trickles
        side = tcp_server_side(port, record["port"]) if record.get("sent", 0) >= 2 else None
        return side is not None and side["unread"] == 0

    wait_until(trickler_served, 10, "the trickler connected and served first")
    began = time.monotonic()
    assert hello(port, "a") == b"token"
    assert time.monotonic() - began < 0.5 + MARGIN
    thread.join(10)
    assert not thread.is_alive() and result["heard"] == {str(port): ["a"]}
    # The listener ended (every peer heard) and closed the trickler's connection with it.
    wait_until(lambda: "cut_after" in record, 5, "the trickler's connection cut")
    assert record["cut_after"] < tf_probe_listen.CONNECTION_BUDGET + MARGIN, record


def test_silent_connections_do_not_delay_a_hello() -> None:
    thread, result, port = serve_in_thread(["a"], 30, "token")
    silent = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(8)]
    try:
        began = time.monotonic()
        assert hello(port, "a") == b"token"
        assert time.monotonic() - began < 0.5 + MARGIN
    finally:
        for conn in silent:
            conn.close()
    thread.join(10)
    assert not thread.is_alive()


def test_slow_clients_are_served_concurrently() -> None:
    """16 far peers, each 0.5 s from its connect to its hello and 0.5 s from the answer to
    its close: one connection at a time, the last is answered 8 s after the first connect at
    least; served at once, all are answered in about 0.5 s."""
    count, delay = 16, 0.5
    serial = count * delay
    names = [f"h{i}" for i in range(count)]
    thread, result, port = serve_in_thread(names, 60, "token")
    answers: dict[str, bytes] = {}
    answered: dict[str, float] = {}
    began = time.monotonic()
    clients = [
        threading.Thread(target=lambda n=n: answers.update({n: hello(port, n, delay, answered=answered)}))
        for n in names
    ]
    for client in clients:
        client.start()
    for client in clients:
        client.join(serial + 10)
    assert answers == {n: b"token" for n in names}
    elapsed = max(answered.values()) - began
    assert elapsed < serial / 4, f"{elapsed:.2f} s to answer {count} far peers (one at a time: {serial:g} s at least)"
    thread.join(10)
    assert not thread.is_alive() and result["heard"] == {str(port): sorted(names)}


class SlowEndpoints:
    """Listeners that each answer as the probe of host ``h<i>`` of run ``r1`` after
    ``delay`` seconds (speaking first, as the probe's listener does), then read the
    connector's hello, counting how many connections are open at once."""

    def __init__(self, count: int, delay: float) -> None:
        self.delay = delay
        self.lock = threading.Lock()
        self.open = self.most = 0
        self.sockets = [listening_socket() for _ in range(count)]
        self.endpoints = [
            {"index": i, "host": f"h{i}", "address": "127.0.0.1", "port": port} for i, (_s, port) in enumerate(self.sockets)
        ]
        self.threads = [
            threading.Thread(target=self.answer, args=(sock, f"h{i}"), daemon=True)
            for i, (sock, _port) in enumerate(self.sockets)
        ]
        for thread in self.threads:
            thread.start()

    def answer(self, sock: socket.socket, host: str) -> None:
        try:
            conn, _peer = sock.accept()
        except OSError:
            return
        with self.lock:
            self.open += 1
            self.most = max(self.most, self.open)
        with conn:
            time.sleep(self.delay)
            with self.lock:
                self.open -= 1
            conn.sendall(f"{tf_probe_listen.probe_token('r1', host)}\n".encode())
            tf_probe_reach.read_line(conn, 10)
            conn.recv(16)

    def close(self) -> None:
        """Close the listeners and wait for every answering thread: no thread of this test
        may outlive it (a later test forks)."""
        for sock, _port in self.sockets:
            sock.close()
        for thread in self.threads:
            thread.join(10)
        assert not any(thread.is_alive() for thread in self.threads)


def test_a_host_connects_to_its_peers_concurrently() -> None:
    count, delay = 16, 0.5
    serial = count * delay
    slow = SlowEndpoints(count, delay)
    try:
        began = time.monotonic()
        failures = tf_probe_reach.connect_all(slow.endpoints, "me", 10, run_id="r1")
        elapsed = time.monotonic() - began
    finally:
        slow.close()
    assert failures == []
    assert elapsed < serial / 4, f"{elapsed:.2f} s for {count} slow peers (one after another: {serial:g} s at least)"


def test_the_connections_at_once_are_bounded_and_failures_keep_the_endpoints_order() -> None:
    slow = SlowEndpoints(12, 0.3)
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    dead_port = dead.getsockname()[1]
    dead.close()  # nobody listens there: refused
    endpoints = [*slow.endpoints[:6], {"index": 99, "host": "gone", "address": "127.0.0.1", "port": dead_port},
                 *slow.endpoints[6:]]
    try:
        failures = tf_probe_reach.connect_all(endpoints, "me", 1, run_id="r1", parallel=4)
    finally:
        slow.close()
    assert [f["index"] for f in failures] == [99] and "refused" in failures[0]["reason"].lower()
    assert 1 < slow.most <= 4, slow.most


# -- the one-run probe (issue 26: one module run per host for the whole preflight) ----------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def bind_later(port: int, delay: float) -> tuple[threading.Thread, list[socket.socket]]:
    """A probe-like listener on ``port`` that comes up ``delay`` seconds from now (a peer
    whose own module run binds later) and answers one hello as the probe of host h, run r1."""
    held: list[socket.socket] = []

    def run() -> None:
        time.sleep(delay)
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen(8)
        held.append(sock)
        sock.settimeout(20)
        conn, _ = sock.accept()
        with conn:
            conn.sendall(f"{tf_probe_listen.probe_token('r1', 'h')}\n".encode())
            tf_probe_reach.read_line(conn, 5)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, held


def test_a_refused_endpoint_is_tried_again_for_the_settle_time_and_no_longer() -> None:
    port = free_port()
    endpoint = {"index": 0, "host": "h", "address": "127.0.0.1", "port": port}
    # Without settle: refused until the 0.5 s timeout, a failure.
    began = time.monotonic()
    [failure] = tf_probe_reach.connect_all([endpoint], "me", 0.5, run_id="r1")
    assert "refused" in failure["reason"].lower() and time.monotonic() - began < 0.5 * 4
    # With settle: a listener that comes up 1.5 s later is reached.
    thread, held = bind_later(port, 1.5)
    try:
        began = time.monotonic()
        assert tf_probe_reach.connect_all([endpoint], "me", 0.5, run_id="r1", settle=10) == []
        assert 1.4 <= time.monotonic() - began < 10
    finally:
        thread.join(10)
        for sock in held:
            sock.close()
    # Still refused at the end of settle: a failure after settle seconds, not before.
    began = time.monotonic()
    [failure] = tf_probe_reach.connect_all([endpoint], "me", 0.3, run_id="r1", settle=1.2)
    assert "refused" in failure["reason"].lower() and 1.1 <= time.monotonic() - began < 1.2 * 4


def test_a_refused_endpoint_is_tried_less_and_less_often_up_to_once_a_second(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hosts whose runs start over a minute (128 namespace hosts) tried each refused port
    every 0.2 s: the connects' kernel work grew with the square of the hosts."""
    tries: list[float] = []

    def refused(*_args: Any, **_kwargs: Any) -> Any:
        tries.append(time.monotonic())
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(tf_probe_reach.socket, "create_connection", refused)
    began = time.monotonic()
    reason = tf_probe_reach.reach({"address": "127.0.0.1", "port": 9, "host": "h"}, "me", 0.5, "token", settle=4)
    assert "refused" in reason.lower() and 3.9 <= time.monotonic() - began < 4.5
    pauses = [b - a for a, b in zip(tries, tries[1:])]
    # 0.2 s, then half as long again each time, each up to a quarter shorter; then about a
    # second: 7 to 9 tries in 4 s, against 20 at one every 0.2 s.
    assert 7 <= len(tries) <= 9, pauses
    assert 0.14 <= pauses[0] <= 0.25 and all(pause <= 1.05 for pause in pauses), pauses
    assert all(b >= 0.75 * 1.5 * a - 0.02 for a, b in zip(pauses[:3], pauses[1:4])), pauses


def one_run_args(me: str, ports: list[int], endpoints: list[dict[str, Any]], base_dir: str, **extra: Any) -> dict[str, Any]:
    return {"me": me, "run_id": "r1", "ports": ports, "base_dir": base_dir, "listen": {"peers": ["a", "b"], "lifetime": 60},
            "reach": {"endpoints": endpoints, "timeout": 1, "settle": 10, "wait": 10, **extra}}


def test_the_one_run_probe_looks_listens_connects_and_returns_once_its_listener_ended(tmp_path: Any) -> None:
    """Two hosts a and b (two ports on this machine), each one run of tf_preflight_host with
    endpoints; b starts 1.5 s after a, so a's first connections to b are refused and tried
    again. Both return the look and no failure, their listeners ended, every port free."""
    port_a, port_b = free_port(), free_port()
    endpoints = [{"index": 0, "host": "a", "address": "127.0.0.1", "port": port_a},
                 {"index": 1, "host": "b", "address": "127.0.0.1", "port": port_b}]
    results: dict[str, dict[str, Any]] = {}

    def host(me: str, port: int, delay: float) -> None:
        time.sleep(delay)
        results[me] = run_module(HOST_MODULE, one_run_args(me, [port], endpoints, str(tmp_path)))

    threads = [threading.Thread(target=host, args=("a", port_a, 0)), threading.Thread(target=host, args=("b", port_b, 1.5))]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert time.monotonic() - began < 20
    for me in ("a", "b"):
        result = results[me]
        assert result["busy_ports"] == [] and result["free_mb"] > 0 and result["run_launched"] == "", result
        assert result["listener_pid"] > 0
        assert result["failures"] == [] and result["listener_gone"] is True and result["ports_held"] == [], result
    assert tf_probe_ports.bind_error(port_a) == 0 and tf_probe_ports.bind_error(port_b) == 0


def test_the_one_run_probe_names_a_peer_that_never_listens_and_does_not_wait(tmp_path: Any) -> None:
    port_a, port_b = free_port(), free_port()
    endpoints = [{"index": 0, "host": "a", "address": "127.0.0.1", "port": port_a},
                 {"index": 1, "host": "b", "address": "127.0.0.1", "port": port_b}]
    began = time.monotonic()
    result = run_module(HOST_MODULE, one_run_args("a", [port_a], endpoints, str(tmp_path), settle=1, wait=30))
    assert time.monotonic() - began < 15  # not the 30 s wait: the run is refused anyway
    assert [f["index"] for f in result["failures"]] == [1] and "refused" in result["failures"][0]["reason"].lower()
    assert result["listener_gone"] is False and result["ports_held"] == [port_a]
    token = tf_probe_listen.probe_token("r1", "a")
    assert tf_probe_listen.stop_listeners([port_a], 10, token, result["listener_pid"]) == []


def test_the_host_probe_without_endpoints_connects_to_nothing(tmp_path: Any) -> None:
    port = free_port()
    args = {"me": "a", "run_id": "r1", "ports": [port], "base_dir": str(tmp_path)}
    result = run_module(HOST_MODULE, args)
    assert result["listener_pid"] == 0 and result["failures"] == [] and result["listener_gone"] is True
    # Listening without endpoints (the two-step probe): the listener is up, for the
    # tf_preflight_reach's runs, and the result says so.
    args.update({"listen": {"peers": ["a", "never-comes"], "lifetime": 30}})
    result = run_module(HOST_MODULE, args)
    try:
        assert result["listener_pid"] > 0 and result["failures"] == []
        assert result["listener_gone"] is False and result["ports_held"] == [port]
        assert tf_probe_ports.bind_error(port) != 0
    finally:
        assert tf_probe_listen.stop_listeners([port], 10, tf_probe_listen.probe_token("r1", "a"), result["listener_pid"]) == []


@pytest.mark.parametrize("banner", [b"", b"SSH-2.0-OpenSSH_9.6\r\n"])
def test_a_service_that_is_not_the_probe_gets_not_a_byte(banner: bytes) -> None:
    """The probe's listener speaks first, and a connector sends its hello only to the probe
    it expects: a silent service, or one with a banner, at a worker port (a port taken on
    a peer, in the one-run probe that connects before the controller saw the peers' looks)
    receives nothing, and the port is named as not this run's probe."""
    sock, port = listening_socket()
    received: list[bytes] = []

    def serve_once() -> None:
        conn, _ = sock.accept()
        with conn:
            conn.sendall(banner)
            conn.settimeout(5)
            data = b""
            try:
                while chunk := conn.recv(256):
                    data += chunk
            except OSError:
                pass
            received.append(data)

    thread = threading.Thread(target=serve_once, daemon=True)
    thread.start()
    try:
        [failure] = tf_probe_reach.connect_all([{"index": 1, "host": "b", "address": "127.0.0.1", "port": port}], "a", 0.5,
                                      run_id="r1")
        thread.join(10)
    finally:
        sock.close()
    assert "not as this run's probe on host b" in failure["reason"]
    assert received == [b""]
