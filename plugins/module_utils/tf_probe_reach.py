# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The preflight probe's connect side: from this host, reach every worker endpoint of the
cluster as TensorFlow will, check that the probe of the right host and run answers, and
wait for this host's own listener to end (the modules ``tf_preflight_reach`` and, for the
one-run probe, ``tf_preflight_host`` run it)."""

from __future__ import annotations

import concurrent.futures
import random
import socket
import time
from typing import Any

from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_json_list import json_list
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_probe_listen import await_listener_end, probe_token

# Most connections one host's reach has open at once.
CONNECT_PARALLEL = 32
# A refused port (its listener not up yet) is tried again after REFUSED_FIRST seconds, then
# half as often again each time, up to once every REFUSED_MOST seconds, each pause a random
# quarter shorter so that hosts do not try in step. At 128 namespace hosts, whose runs
# start over a minute, a retry every 0.2 s sent hundreds of thousands of refused connects,
# which took the CPU from the hosts still to start: the run took 129 s, and 110 s with
# this (tests/bench/NOTES.md, issue 42). A listener that comes up is heard within a second.
REFUSED_FIRST = 0.2
REFUSED_MOST = 1.0

# The options of the reach, as ``tf_preflight_reach``'s own and as the suboptions of
# ``tf_preflight_host``'s ``reach`` (the doc fragment ``probe_reach`` documents them once).
REACH_SPEC: dict[str, dict[str, Any]] = {
    # A list, or the list as one JSON string (module_utils/tf_json_list.py).
    "endpoints": {"type": "raw", "default": []},
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
    endpoint: dict[str, Any], me: str, timeout: float, expect: str | None = None, settle: float = 0.0
) -> str:
    """'' when ``endpoint`` accepts a connection within ``timeout`` seconds and, with
    ``expect``, answers it with that token; else why not.

    A refused connection is tried again until ``timeout`` or, when longer, ``settle``
    seconds have passed: the peer's listener may not be up yet (in the one-run probe, each
    host binds its listeners in its own module run, at slightly different times). A
    connection that gets no answer is given ``timeout`` seconds, never more.
    """
    deadline = time.monotonic() + max(timeout, settle)
    last = "no answer"
    pause = REFUSED_FIRST
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return last
        try:
            with socket.create_connection((endpoint["address"], int(endpoint["port"])), timeout=min(left, timeout)) as conn:
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
            return f"no answer within {timeout:g} s (a firewall dropping the packets?)"
        except socket.gaierror as exc:
            return f"address {endpoint['address']!r} does not resolve: {exc.strerror}"
        except OSError as exc:
            # Refused: the listener may not be up yet; keep trying until the deadline.
            last = f"{exc.strerror or exc} (a firewall rejecting the connection, or the address is not that host's?)"
            time.sleep(max(0.0, min(pause * random.uniform(0.75, 1.0), deadline - time.monotonic())))
            pause = min(pause * 1.5, REFUSED_MOST)


def connect_all(
    endpoints: list[dict[str, Any]], me: str, timeout: float, run_id: str | None = None,
    parallel: int = CONNECT_PARALLEL, settle: float = 0.0,
) -> list[dict[str, Any]]:
    """Every endpoint that cannot be reached, or (with ``run_id``) that does not answer as
    the probe of its host for that run, in the order of ``endpoints``.

    Up to ``parallel`` endpoints are tried at once, so that the probe takes about the
    slowest round trip (at most ``timeout`` seconds each), not the sum of them. A refused
    endpoint is tried again for up to ``settle`` seconds (see ``reach``).
    """

    def attempt(endpoint: dict[str, Any]) -> str:
        expect = None if run_id is None else probe_token(run_id, str(endpoint.get("host")))
        return reach(endpoint, me, timeout, expect, settle)

    if not endpoints:
        return []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(parallel, len(endpoints)))) as pool:
        reasons = list(pool.map(attempt, endpoints))
    return [{**endpoint, "reason": reason} for endpoint, reason in zip(endpoints, reasons) if reason]


def connect_and_await(
    reach_options: dict[str, Any], me: str, run_id: str | None, ports: list[int], listener_pid: int
) -> dict[str, Any]:
    """Connect as ``me`` to every endpoint of ``reach_options`` (REACH_SPEC's options), then
    wait for this host's listener ``listener_pid`` on ``ports`` to end: ``failures``,
    ``listener_gone`` and ``ports_held``."""
    failures = connect_all(
        json_list(reach_options["endpoints"], "endpoints", dict), me, reach_options["timeout"], run_id,
        settle=reach_options["settle"],
    )
    # A failed connection refuses the run, whose rescue stops the listeners: no wait.
    held = await_listener_end(ports, listener_pid, 0 if failures else reach_options["wait"])
    return {"failures": failures, "listener_gone": not held, "ports_held": held}
