"""The reachability probe scales (issue 24 point 17, issue 26 "Scale"): its listener serves
every connection at once within a bounded lifetime that no client can extend, and each host
connects to its peers concurrently, a bounded number at a time."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any, Iterator

import pytest
import tf_preflight_probe as probe

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
        result.update(probe.serve({sock: port}, peers, lifetime, token))
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
        answer = probe.read_line(conn, timeout)
        if answered is not None:
            answered[me] = time.monotonic()
        time.sleep(delay)
        return answer


@pytest.fixture
def trickler() -> Iterator[Any]:
    """Starts clients that send one byte every 50 ms, never a line, never closing on their
    own; stops them at the end of the test. Each records when its connection was cut."""
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def start(port: int, record: dict[str, float]) -> None:
        def run() -> None:
            with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
                begun = time.monotonic()
                try:
                    while not stop.is_set():
                        conn.sendall(b"h")
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
    assert probe.bind_error(port) == 0  # the port is free again


def test_a_trickling_client_is_cut_at_its_budget_and_delays_no_one(trickler: Any) -> None:
    thread, result, port = serve_in_thread(["a"], 30, "token")
    record: dict[str, float] = {}
    trickler(port, record)
    time.sleep(0.3)  # the trickler is connected and served first
    began = time.monotonic()
    assert hello(port, "a") == b"token"
    assert time.monotonic() - began < 0.5 + MARGIN
    thread.join(10)
    assert not thread.is_alive() and result["heard"] == {str(port): ["a"]}
    # The listener ended (every peer heard) and closed the trickler's connection with it.
    deadline = time.monotonic() + 5
    while "cut_after" not in record and time.monotonic() < deadline:
        time.sleep(0.05)
    assert record.get("cut_after", 99) < probe.CONNECTION_BUDGET + MARGIN, record


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
    """Listeners that each answer a probe's hello as host ``h<i>`` of run ``r1`` after
    ``delay`` seconds, counting how many connections are open at once."""

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
            probe.read_line(conn, 10)
            time.sleep(self.delay)
            with self.lock:
                self.open -= 1
            conn.sendall(f"{probe.probe_token('r1', host)}\n".encode())
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
        failures = probe.connect_all(slow.endpoints, "me", 10, run_id="r1")
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
        failures = probe.connect_all(endpoints, "me", 1, run_id="r1", parallel=4)
    finally:
        slow.close()
    assert [f["index"] for f in failures] == [99] and "refused" in failures[0]["reason"].lower()
    assert 1 < slow.most <= 4, slow.most
