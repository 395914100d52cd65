# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The preflight probe's connect side: from this host, reach every worker endpoint of the
cluster as TensorFlow will, check that the probe of the right host and run answers, and
wait for this host's own listener to end (the modules ``tf_preflight_reach`` and, for the
one-run probe, ``tf_preflight_host`` run it)."""

from __future__ import annotations

import concurrent.futures
import socket
import time
from typing import Any

from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_probe_listen import await_listener_end, probe_token

# Most connections one host's reach has open at once.
CONNECT_PARALLEL = 32
# Seconds between the starts of two of one host's connects (at most a second for all of
# them), and the order: from the endpoint after this host's own, round the list. Every host
# of a large cluster starts its reach at the same moment; connects started together to
# peers first met resolve their addresses (ARP) in one burst, which a software bridge
# drops in part (64 namespace hosts on one bridge: about half of 4032 connections without
# an answer). Spread over time and over the peers, each host meets about one peer at a time.
CONNECT_SPACING = 0.02
CONNECT_SPREAD = 1.0
# A connection that gets no answer is tried again, a new connect, for as long as a refused
# one (``settle``, at least ``timeout``): a packet lost on the way is not a firewall. On
# namespace hosts, the kernel's one neighbour table for all of them (gc_thresh3, 1024
# entries) drops the first packets to a peer whose address has no room there yet, until
# entries unused for 5 s make room: 64 hosts that meet all at once need 4032 entries.
# Each try waits at most ``timeout`` / NO_ANSWER_TRIES and at least a second (the kernel's
# first SYN resend), so that a cluster without settle (one host) still tries three times.
NO_ANSWER_TRIES = 3

# The options of the reach, as ``tf_preflight_reach``'s own and as the suboptions of
# ``tf_preflight_host``'s ``reach`` (the doc fragment ``probe_reach`` documents them once).
REACH_SPEC: dict[str, dict[str, Any]] = {
    "endpoints": {"type": "list", "elements": "dict", "default": []},
    "timeout": {"type": "float", "default": 10},
    "settle": {"type": "float", "default": 0},
    "wait": {"type": "float", "default": 0},
}


def read_line(conn: socket.socket, timeout: float) -> bytes:
    """The first line the peer sends within ``timeout`` seconds (at most 256 bytes)."""
    conn.settimeout(max(timeout, 0.1))
    data = b""
    try:
        while b"\n" not in data and len(data) < 256:
            chunk = conn.recv(256)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    return data.split(b"\n", 1)[0]


def reach(
    endpoint: dict[str, Any], me: str, timeout: float, expect: str | None = None, settle: float = 0.0,
    tries: int = NO_ANSWER_TRIES,
) -> str:
    """'' when ``endpoint`` accepts a connection within ``timeout`` seconds and, with
    ``expect``, answers it with that token; else why not.

    A refused connection, or one that gets no answer, is tried again until ``timeout`` or,
    when longer, ``settle`` seconds have passed: the peer's listener may not be up yet (in
    the one-run probe, each host binds its listeners in its own module run, at slightly
    different times), or a packet was lost. A try without answer waits ``timeout`` /
    ``tries`` seconds, at least a second (NO_ANSWER_TRIES).
    """
    began = time.monotonic()
    deadline = began + max(timeout, settle)
    per_try = max(timeout / max(tries, 1), min(timeout, 1.0))
    silent = 0
    last = "no answer"
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return last
        # A last try shorter than half a try is folded into this one.
        wait = left if left < per_try * 1.5 else per_try
        try:
            with socket.create_connection((endpoint["address"], int(endpoint["port"])), timeout=wait) as conn:
                if expect is None:
                    conn.sendall(f"hello {me}\n".encode())
                    return ""
                # The probe's listener speaks first: nothing is sent to a port that does
                # not answer as this run's probe of that host (an unrelated service).
                answer = read_line(conn, max(deadline - time.monotonic(), 2.0))
                if answer.decode("utf-8", "replace") == expect:
                    conn.sendall(f"hello {me}\n".encode())
                    return ""
                shown = answer.decode("utf-8", "replace")[:80].encode("unicode_escape").decode("ascii")
                return (
                    f"the port answered, but not as this run's probe on host {endpoint.get('host')} "
                    f"(it said {shown!r}): another service listens at that address; is tf_worker_address right?"
                )
        except socket.timeout:
            silent += 1
            last = no_answer(timeout, silent, time.monotonic() - began)
        except socket.gaierror as exc:
            return f"address {endpoint['address']!r} does not resolve: {exc.strerror}"
        except OSError as exc:
            # Refused: the listener may not be up yet; keep trying until the deadline.
            last = f"{exc.strerror or exc} (a firewall rejecting the connection, or the address is not that host's?)"
            time.sleep(0.2)


def no_answer(timeout: float, tries: int, seconds: float) -> str:
    """Why a port that never answered failed: after several tries, a firewall dropping
    the packets is the likely cause; one try alone may also have lost its packets."""
    if tries < 2:
        return f"no answer within {timeout:g} s (a firewall dropping the packets, or a network losing them?)"
    return f"no answer within {timeout:g} s ({tries} tries over {seconds:.0f} s: a firewall dropping the packets?)"


def connect_all(
    endpoints: list[dict[str, Any]], me: str, timeout: float, run_id: str | None = None,
    parallel: int = CONNECT_PARALLEL, settle: float = 0.0, spacing: float = CONNECT_SPACING,
) -> list[dict[str, Any]]:
    """Every endpoint that cannot be reached, or (with ``run_id``) that does not answer as
    the probe of its host for that run, in the order of ``endpoints``.

    Up to ``parallel`` endpoints are tried at once, so that the probe takes about the
    slowest round trip (at most ``timeout`` seconds each), not the sum of them. A refused
    endpoint is tried again for up to ``settle`` seconds (see ``reach``). The connects
    start ``spacing`` seconds apart (all of them within CONNECT_SPREAD seconds), from the
    endpoint after this host's own (see CONNECT_SPACING).
    """
    if not endpoints:
        return []
    order = spread_order(endpoints, me)
    step = min(spacing, CONNECT_SPREAD / len(endpoints))
    began = time.monotonic()

    def attempt(turn: int) -> str:
        endpoint = endpoints[order[turn]]
        pause = began + turn * step - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        expect = None if run_id is None else probe_token(run_id, str(endpoint.get("host")))
        return reach(endpoint, me, timeout, expect, settle)

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(parallel, len(endpoints)))) as pool:
        reasons = dict(zip(order, pool.map(attempt, range(len(order)))))
    return [{**endpoint, "reason": reasons[i]} for i, endpoint in enumerate(endpoints) if reasons[i]]


def spread_order(endpoints: list[dict[str, Any]], me: str) -> list[int]:
    """The indexes of ``endpoints`` from the one after ``me``'s last own endpoint, round
    the list (all of them in their order where ``me`` has none): every host walks the
    same list from another place, so that no peer meets every host at once."""
    own = [i for i, endpoint in enumerate(endpoints) if endpoint.get("host") == me]
    start = own[-1] + 1 if own else 0
    return [(start + i) % len(endpoints) for i in range(len(endpoints))]


def connect_and_await(
    reach_options: dict[str, Any], me: str, run_id: str | None, ports: list[int], listener_pid: int
) -> dict[str, Any]:
    """Connect as ``me`` to every endpoint of ``reach_options`` (REACH_SPEC's options), then
    wait for this host's listener ``listener_pid`` on ``ports`` to end: ``failures``,
    ``listener_gone`` and ``ports_held``."""
    failures = connect_all(
        reach_options["endpoints"], me, reach_options["timeout"], run_id, settle=reach_options["settle"]
    )
    # A failed connection refuses the run, whose rescue stops the listeners: no wait.
    held = await_listener_end(ports, listener_pid, 0 if failures else reach_options["wait"])
    return {"failures": failures, "listener_gone": not held, "ports_held": held}
