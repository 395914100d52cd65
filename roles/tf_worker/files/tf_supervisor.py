#!/usr/bin/env python3
"""Run one training worker under the runbook's control, on the worker's own host.

Started by the launch phase (the tf_worker_launch module), detached. It:
- starts the training process in its own session and process group, with TF_CONFIG
  from the worker's ``tf_config.json`` in its environment (never on a command line) and
  the worker directory as its working directory;
- records ``state.json`` (supervisor pid, training pid and process group) before the
  training can do anything, so that a stop finds the run's processes through the run's
  own records and never by name;
- enforces the startup deadline (a line matching the startup pattern must appear in the
  log) and the job deadline, because TensorFlow alone waits up to an hour for a missing
  peer and ignores SIGTERM while doing so;
- on a stop request (tf_worker_stop), or a passed deadline, stops the whole process group:
  SIGTERM, then SIGKILL after a grace period;
- on a SIGTERM from outside the runbook (a preemption, a host's shutdown), gives the job
  its grace to save (TensorFlow's PreemptionCheckpointHandler saves and exits 42): the
  group gets one SIGTERM, forwarded only when it did not get one itself, and the keeper
  survives it; the cause is ``preempted``;
- runs the job under a wrapper (``tf_runbook_job.py``) that dumps every thread's Python
  stack into ``stacks.txt`` on a real-time signal, and takes those stacks before it stops
  the job on its job deadline;
- writes ``exit.json`` (return code, signal, reason, times, the ``cause`` of the end from
  tf_causes.classify, the ``stacks`` when some were taken) last, atomically, with the time
  it first saw each line of the metrics contract (``worker=...``) in the log, which has no
  timestamps of its own (the run report's timeline reads them through the verdict);
- tells the job its attempt number and checkpoint directory through the environment
  (``TF_RUNBOOK_ATTEMPT``, ``TF_RUNBOOK_CHECKPOINT_DIR``);
- owns the job for its whole life: a keeper process in the job's group holds one end of
  a pipe whose other end only the supervisor holds, and kills the whole group (SIGKILL)
  when the supervisor is gone, however it died; the job itself also gets SIGKILL as its
  parent-death signal;
- validates every argument before anything is started;
- with ``--go-timeout``, starts the job only on the launch's go: it first holds the
  worker's own TensorFlow port (proving it free) and records an armed ``state.json``
  (no job pid yet); the launch sends every worker of the run its go at once, over that
  port, with a secret token that reaches the supervisor on its stdin (below); no go within
  the timeout, or a stop, ends it without starting the job; connections are served at
  once (a selector, a second each), and a go whose launch already closed its connection
  (it gave up) starts nothing;
- with ``--controller-timeout``, stops the job when the controller's heartbeat file has
  not been renewed for that long (Ctrl-C, a sleeping laptop, a lost network);
- with ``--peer-timeout``, watches the other workers' TensorFlow ports: a worker whose
  job failed on its own keeps announcing the failure on its port for a while, and a peer
  that hears it stops at once; a peer port that stopped answering (host down) for the
  timeout stops it too; an announcement carries the run id and a MAC under the run's
  key (handed like the go's token): any other is ignored;
- with ``--secrets-stdin`` (the launch gives it when it has secrets), first reads the
  launch's secrets, the go's token and the announcement key, as one JSON line of at most
  4096 bytes (tf_run's SECRETS_LINE_BYTES) from its stdin, which the launch then closes;
  a missing, overlong or malformed line is refused like a bad argument. Never through
  its environment, which stays readable in ``/proc/<pid>/environ`` for its whole life (by
  the job too, which runs as the same user), nor its command line; the job never gets
  them. Without the flag it reads nothing from stdin;
- records who stopped the job as a field of ``exit.json`` (``stopped_by``), reading the
  stop request (``stop.json``) that ``tf_worker_stop`` writes before it signals;
- with ``--evaluator`` (the sidecar evaluator's endpoint, issue 41): the chief's
  supervisor pushes each complete checkpoint of its checkpoint directory to the
  evaluator's supervisor, and tells it when the training ended; the evaluator's supervisor
  (its TF_CONFIG's task type is ``evaluator``) receives them into its own checkpoint
  directory on its port, and stops its job ``--evaluator-grace`` seconds after the
  training ended, recorded as stopped by the runbook (``training_ended`` in exit.json).
  Both sides are tf_checkpoint_push.py, shipped next to this file.

Standard library only: it runs under the worker's interpreter before anything else. The
shared contract it imports (tf_run, tf_proc, tf_causes, tf_metrics of plugins/module_utils/)
is shipped next to it, never copied into it.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import errno
import hmac
import json
import math
import os
import re
import secrets
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

# The shared contract (plugins/module_utils/, standard library only) is shipped next to
# this file by the deploy; in the source tree it is found where it lives.
_HERE = os.path.dirname(os.path.abspath(__file__))
_SOURCE_UTILS = os.path.join(_HERE, "..", "..", "..", "plugins", "module_utils")
# No bytecode next to them: the job directory holds what the deploy wrote, nothing more.
sys.dont_write_bytecode = True
if not os.path.exists(os.path.join(_HERE, "tf_run.py")) and os.path.isdir(_SOURCE_UTILS):
    sys.path.insert(0, os.path.normpath(_SOURCE_UTILS))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from tf_checkpoint_push import Pusher, Receiver  # noqa: E402
from tf_causes import CAUSES, classify, parse_stacks, read_job_end, request_stacks, stacks_dumped  # noqa: E402
from tf_metrics import is_timed, progress_of  # noqa: E402
from tf_proc import group_members, oom_evidence, oom_kill_counts, signal_caught, signal_pending  # noqa: E402
from tf_run import (  # noqa: E402
    ANNOUNCE_MAGIC,
    CONFIG_FILE,
    EVALUATOR,
    EXIT_FILE,
    GO_FAILED,
    GO_LINE_BYTES,
    GO_MAGIC,
    GO_STARTED,
    JOB_END_FILE,
    JOB_ENV_FILE,
    JOB_WRAPPER,
    LOG_FILE,
    SECRET_ANNOUNCE_KEY,
    SECRET_GO_TOKEN,
    SECRETS_FLAG,
    SECRETS_LINE_BYTES,
    STACKS_FILE,
    STATE_FILE,
    STOP_FILE,
    STOPPED_BY,
    cluster_tasks,
    parse_secrets_line,
    read_json,
    signal_name,
    stacks_signal,
    task_position,
    write_json_atomic,
)

POLL_SECONDS = 0.2
# How long a supervisor started with SECRETS_FLAG waits for its secrets line (the launch
# writes it right after it started the supervisor).
SECRETS_SECONDS = 10.0
# How often the heartbeat and the peers are checked.
WATCH_SECONDS = 2.0
# At most how often state.json's ``progress`` is written again (when a timed line came):
# status.yml and the wait read each epoch's end from it, on this host's clock.
PROGRESS_SECONDS = 1.0
# How often a peer probe looks whether it should give up (its job ended).
PROBE_SLICE_SECONDS = 0.05
# gRPC's first backoff before it connects again to a port that was closed (the chief's,
# before its TensorFlow listens), given to the job unless its environment sets one
# (grpc_default_options); later backoffs grow by gRPC's 1.6 up to TensorFlow's 1 s cap.
GRPC_RECONNECT_OPTION = "grpc.initial_reconnect_backoff_ms"
GRPC_RECONNECT_MS = 50
# Longest time a failed worker keeps announcing its failure.
ANNOUNCE_SECONDS = 30.0
# How long a connection may take to send the go line, and how many may be open at once
# (more are closed as they come: a scan cannot hold the go back).
GO_READ_SECONDS = 1.0
GO_MAX_CONNECTIONS = 256
# How long the job's stacks may take to be written, when they are asked for.
STACKS_SECONDS = 5.0
# How many of the log's last lines the cause is read from.
TAIL_LINES = 80
# After a SIGTERM from outside the runbook: how long the supervisor waits to see whether
# the job's group got it too (a host's shutdown signals every process), before it
# forwards one itself.
FORWARD_CHECK_SECONDS = 0.5
PR_SET_PDEATHSIG = 1

# At most how many timed lines exit.json keeps (which lines: tf_metrics.is_timed).
MAX_TIMED_LINES = 20000
# The held job (``--preimport``, issue 42): the wrapper's gate (a pipe's read end, its
# number) and the modules it imports before it waits there; both taken out of the
# environment by the wrapper before the script runs. The byte that opens the gate.
JOB_GATE_ENV = "TF_RUNBOOK_JOB_GATE"
JOB_PREIMPORT_ENV = "TF_RUNBOOK_JOB_PREIMPORT"
JOB_GATE_OPEN = b"g"
# The grace of a stop for a peer's failure (issue 42), at most: the save a grace is for
# needs every worker of a synchronous strategy, the failed peer included, so it cannot
# finish; and TensorFlow's coordination service catches SIGTERM (its preemption notice),
# so a TensorFlow job stopped so would live out the whole grace, seconds of every restart.
PEER_STOP_GRACE = 1.0
# A module's dotted name, as --preimport takes them.
MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def group_alive(pgid: int, keeper: int | None = None) -> bool:
    """Whether anything of the group still runs (a zombie waiting for its reaper does not),
    the keeper aside: it blocks SIGTERM and lives until the supervisor lets it go."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return any(pid != keeper for pid in group_members(pgid))


def signal_group(pgid: int, sig: int) -> bool:
    """Signal a process group; False when it is gone. A member this user may not signal
    (a setuid helper the job started) does not stop the others from being signalled."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        for pid in group_members(pgid):
            try:
                os.kill(pid, sig)
            except OSError:
                pass
    return True


def stop_group(
    pgid: int, child: subprocess.Popen[bytes], grace: float, terminate: bool = True, keeper: int | None = None
) -> None:
    """SIGTERM the process group (unless ``terminate`` is false: it got one already) and
    SIGCONT it, then SIGKILL whatever is left after ``grace`` seconds. Done as soon as
    nothing but the ``keeper`` is left: it outlives any SIGTERM by design, and waiting for
    it would make every stop, and every finished job, last the whole grace.

    A stopped process (SIGSTOP, a debugger's, a frozen peer) holds a SIGTERM it handles
    (TensorFlow's preemption handler, the job's own) pending until it is continued: without
    the SIGCONT it would be stopped only by the SIGKILL, its grace to save wasted."""
    if terminate and not signal_group(pgid, signal.SIGTERM):
        return
    signal_group(pgid, signal.SIGCONT)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        child.poll()
        if not group_alive(pgid, keeper):
            return
        time.sleep(POLL_SECONDS)
    signal_group(pgid, signal.SIGKILL)


def _set_pdeathsig(sig: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass


def job_environment(worker_dir: Path, base: dict[str, str]) -> dict[str, str]:
    """``base`` with the worker's ``job_env.json`` (the user's tf_worker_env, its GPUs and
    the job directory on PYTHONPATH, written 0600 by the deploy) laid over it. The file
    never reaches a command line; TF_CONFIG and TF_RUNBOOK_* stay the runbook's own."""
    env = dict(base)
    try:
        text = (worker_dir / JOB_ENV_FILE).read_text(encoding="utf-8")
    except FileNotFoundError:
        return env
    for name, value in json.loads(text).items():
        if name != "TF_CONFIG" and not name.startswith("TF_RUNBOOK_"):
            env[str(name)] = str(value)
    return env


def grpc_default_options(current: str) -> str:
    """``TF_GRPC_DEFAULT_OPTIONS`` (TensorFlow's gRPC channel arguments, ``name=value`` by
    commas) with a first reconnect backoff of GRPC_RECONNECT_MS, unless it sets one.

    A worker whose TensorFlow is up before the chief's finds the chief's port closed, and
    gRPC tries a closed port again only after its first backoff, a second by default
    (TensorFlow caps the backoff at a second, and gRPC starts it there): that worker then
    joined up to a second after the chief listened, at random, in about half of the runs
    of two workers on one host. Empty items are dropped (TensorFlow logs them as errors).
    """
    items = [item.strip() for item in current.split(",") if item.strip()]
    if any(item.split("=", 1)[0].strip() == GRPC_RECONNECT_OPTION for item in items):
        return current
    return ",".join([*items, f"{GRPC_RECONNECT_OPTION}={GRPC_RECONNECT_MS}"])


def job_preexec(keeper_fd: int, supervisor_pid: int) -> Callable[[], None]:
    """Runs in the job's process between fork and exec.

    Makes a new session (the job's process group), then forks the keeper: a process of
    that group that blocks reading ``keeper_fd`` and kills the whole group when the read
    ends, which happens when the last holder of the pipe's write end, the supervisor,
    is gone (exit, crash or SIGKILL). Membership of the group is inherited by every
    process the job starts, so the keeper brings down all of them, not only the first.
    The keeper blocks SIGTERM, SIGINT and SIGHUP: a signal to the whole group never cuts a
    job's save short, and stays pending on the keeper as the sign that the group got it.
    """

    def preexec() -> None:
        os.setsid()
        if os.fork() == 0:
            try:
                # A SIGTERM to the group (a preemption, a host's shutdown) must not end the
                # keeper, and the supervisor must see that the group got it: blocked, the
                # signal stays pending on the keeper (tf_proc.signal_pending).
                signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT, signal.SIGHUP})
                # Hold nothing but the pipe: Popen's error pipe and the log stay closed.
                os.closerange(0, keeper_fd)
                os.closerange(keeper_fd + 1, 65536)
                while True:
                    try:
                        if not os.read(keeper_fd, 1):
                            break
                    except InterruptedError:
                        continue
            finally:
                try:
                    os.killpg(0, signal.SIGKILL)
                finally:
                    os._exit(0)
        # The job itself: SIGKILL when the supervisor dies, even if the keeper was killed.
        _set_pdeathsig(signal.SIGKILL)
        if os.getppid() != supervisor_pid:
            os._exit(125)

    return preexec


# At most how much of the log is read into memory at once: a job that writes faster than
# a poll must not make the supervisor hold its whole output.
READ_CHUNK_BYTES = 1 << 20


def read_from(path: Path, offset: int, take: Callable[[bytes], None], chunk: int = READ_CHUNK_BYTES) -> int:
    """Hand what ``path`` holds past ``offset`` to ``take``, ``chunk`` bytes at a time;
    the new offset (``offset`` when the file cannot be read)."""
    with open(path, "rb") as handle:
        handle.seek(offset)
        while True:
            data = handle.read(chunk)
            if not data:
                return offset
            offset += len(data)
            take(data)


class LogWatcher:
    """Reads the log incrementally and remembers whether the startup pattern appeared."""

    def __init__(self, path: Path, pattern: str) -> None:
        self.path = path
        self.pattern = re.compile(pattern) if pattern else None
        self.offset = 0
        self.tail = ""
        self.matched = self.pattern is None

    def poll(self) -> bool:
        if self.matched:
            return True
        assert self.pattern is not None
        pattern = self.pattern

        def take(data: bytes) -> None:
            text = self.tail + data.decode("utf-8", errors="replace")
            if not self.matched and pattern.search(text):
                self.matched = True
            # Keep the last partial line so that a match split across reads is still seen.
            self.tail = text[-4096:]

        try:
            self.offset = read_from(self.path, self.offset, take)
        except OSError:
            return False
        return self.matched


def heartbeat_age(path: str, since: float, now: float | None = None) -> float:
    """Seconds since the controller last renewed ``path`` (or since ``since``, the
    supervisor's start, when that is later or the file is missing)."""
    try:
        renewed = os.stat(path).st_mtime
    except OSError:
        renewed = since
    return (time.time() if now is None else now) - max(renewed, since)


def parse_endpoint(endpoint: str) -> tuple[str, int]:
    """``host:port``, ``[v6]:port`` -> (host, port)."""
    host, _, port = endpoint.rpartition(":")
    return host.strip("[]"), int(port)


def cluster_peers(config: dict[str, Any], evaluator: str = "") -> tuple[int, list[tuple[int, str, int]]]:
    """This worker's port and every other worker's (index, host, port), from TF_CONFIG:
    every task of the cluster (chief, worker, ps: tf_run.cluster_tasks), by the runbook's
    index of each. The evaluator is in no cluster: its port is its endpoint's
    (``evaluator``, from --evaluator), and it watches no peer."""
    workers = [endpoint for _kind, _n, endpoint in cluster_tasks(config["cluster"])]
    if config["task"].get("type") == EVALUATOR:
        if not evaluator:
            raise ValueError("an evaluator's supervisor needs its endpoint (--evaluator)")
        return parse_endpoint(evaluator)[1], []
    if set(config["cluster"]) == {"worker"} and config["task"].get("type", "worker") == "worker":
        index = int(config["task"]["index"])
    else:
        index = task_position(config)
    if not 0 <= index < len(workers):
        raise ValueError(f"task index {index} is not in the cluster of {len(workers)} worker(s)")
    peers = [(i, *parse_endpoint(str(ep))) for i, ep in enumerate(workers) if i != index]
    return parse_endpoint(str(workers[index]))[1], peers


def announcement(key: bytes, run_id: str, reason: str) -> bytes:
    """The line a failed worker's supervisor answers on its port: the magic, the run id, a
    MAC of both under the run's announcement key, then the reason (one line)."""
    text = reason.replace("\n", " ").encode("utf-8")[:400]
    ident = run_id.encode("utf-8")
    mac = hmac.new(key, ident + b"\n" + text, "sha256").hexdigest().encode("ascii")
    return ANNOUNCE_MAGIC + ident + b" " + mac + b" " + text + b"\n"


def heard_failure(data: bytes, key: bytes, run_id: str) -> str | None:
    """The reason of an announcement of this run, made with this run's key; None for
    anything else (another run's, a forged or a garbled one: ignored)."""
    if not key or not data.startswith(ANNOUNCE_MAGIC):
        return None
    ident, _, rest = data[len(ANNOUNCE_MAGIC) :].split(b"\n", 1)[0].partition(b" ")
    mac, _, text = rest.partition(b" ")
    expected = hmac.new(key, ident + b"\n" + text, "sha256").hexdigest().encode("ascii")
    if ident != run_id.encode("utf-8") or not hmac.compare_digest(mac, expected):
        return None
    return text.decode("utf-8", "replace")


def probe_peers(
    peers: list[tuple[int, str, int]],
    timeout: float,
    key: bytes = b"",
    run_id: str = "",
    give_up: Callable[[], bool] | None = None,
) -> dict[int, tuple[str, str]]:
    """Connect to every peer port at once: index -> (status, detail).

    status is ``failed`` (the peer's supervisor announced a failure of this run, with this
    run's key; detail is its reason), ``listening`` (an announcement that is not this
    run's counts as this), ``refused`` (nothing listens: not started yet, or finished)
    or ``unreachable`` (no answer within ``timeout``).

    ``give_up`` is asked every PROBE_SLICE_SECONDS: once it is true, the probe ends at
    once and tells nothing (an empty result). The supervisor gives up when its own job
    ended or a stop reached it: a listening peer keeps a probe waiting for half its
    timeout, and the job's exit (or the stop) would be seen that much later.
    """
    result: dict[int, tuple[str, str]] = {}
    sel = selectors.DefaultSelector()
    socks: dict[int, socket.socket] = {}
    for index, host, port in peers:
        try:
            family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
            sock = socket.socket(family, kind, proto)
        except OSError as exc:
            result[index] = ("unreachable", str(exc))
            continue
        sock.setblocking(False)
        err = sock.connect_ex(addr)
        if err not in (0, errno.EINPROGRESS, errno.EAGAIN):
            result[index] = ("refused" if err == errno.ECONNREFUSED else "unreachable", os.strerror(err))
            sock.close()
            continue
        socks[index] = sock
        sel.register(sock, selectors.EVENT_WRITE, index)
    connected: dict[int, bytes] = {}
    end = time.monotonic() + timeout
    while socks and time.monotonic() < end:
        if give_up is not None and give_up():
            for sock in socks.values():
                sock.close()
            sel.close()
            return {}
        for ready, events in sel.select(min(PROBE_SLICE_SECONDS, max(0.0, end - time.monotonic()))):
            index = ready.data
            sock = socks[index]
            if events & selectors.EVENT_WRITE and index not in connected:
                err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    result[index] = ("refused" if err == errno.ECONNREFUSED else "unreachable", os.strerror(err))
                    sel.unregister(sock)
                    sock.close()
                    del socks[index]
                    continue
                connected[index] = b""
                sel.modify(sock, selectors.EVENT_READ, index)
            elif events & selectors.EVENT_READ:
                try:
                    chunk = sock.recv(512)
                except OSError:
                    chunk = b""
                connected[index] += chunk
                data = connected[index]
                if not chunk or not ANNOUNCE_MAGIC.startswith(data[: len(ANNOUNCE_MAGIC)]) or b"\n" in data:
                    sel.unregister(sock)
                    sock.close()
                    del socks[index]
        if all(i in connected for i in socks) and time.monotonic() > end - timeout / 2:
            # Connected and silent for a while: a TensorFlow server, not an announcement.
            break
    for index, sock in socks.items():
        sock.close()
        if index not in connected:
            result[index] = ("unreachable", f"no answer within {timeout:g} s")
    sel.close()
    for index, data in connected.items():
        reason = heard_failure(data, key, run_id)
        result[index] = ("failed", reason) if reason is not None else ("listening", "")
    return result


class PeerWatch:
    """Decides from repeated probes whether a peer failed.

    A peer that announces a failure ends the run at once. A peer that was seen listening
    and then gives no answer at all (host down, network cut) for ``timeout`` seconds ends
    it too. A refused connection is not a failure: the peer has not started its server
    yet, or finished, and its supervisor announces a failure of its own.
    """

    def __init__(self, peers: list[tuple[int, str, int]], timeout: float) -> None:
        self.peers = peers
        self.timeout = timeout
        self.seen: set[int] = set()
        self.silent_since: dict[int, float] = {}

    def verdict(self, probes: dict[int, tuple[str, str]], now: float) -> str | None:
        endpoints = {i: f"{h}:{p}" for i, h, p in self.peers}
        for index, (status, detail) in sorted(probes.items()):
            if status == "failed":
                return f"stopped by the supervisor: worker {index} at {endpoints[index]} failed ({detail})"
            if status == "listening":
                self.seen.add(index)
                self.silent_since.pop(index, None)
            elif status == "unreachable" and index in self.seen:
                since = self.silent_since.setdefault(index, now)
                if now - since >= self.timeout:
                    return (
                        f"stopped by the supervisor: worker {index} at {endpoints[index]} gave no answer "
                        f"for {self.timeout:g} s"
                    )
            else:
                self.silent_since.pop(index, None)
        return None


def listen_on(port: int, attempts: int, pause: float) -> socket.socket:
    """A listening socket on this worker's port, on every address (IPv4 and, where the
    host has it, IPv6), tried ``attempts`` times ``pause`` seconds apart (the port may
    still be let go of by the job's own server, or a restart's earlier attempt); raises
    OSError when it stays taken."""
    for attempt in range(attempts):
        try:
            if socket.has_dualstack_ipv6():
                return socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True)
            return socket.create_server(("", port))
        except OSError:
            if attempt + 1 >= attempts:
                raise
            time.sleep(pause)
    raise OSError(f"port {port} could not be listened on")  # not reached: attempts >= 1


def bind_announcer(port: int, attempts: int = 10) -> socket.socket | None:
    """The failure announcer's socket, retried for a few seconds: the job's own server may
    take a moment to let go of the port; None when it stays taken."""
    try:
        return listen_on(port, attempts, 0.5)
    except OSError:
        return None


def serve_announcement(server: socket.socket, message: bytes, done: threading.Event) -> None:
    """Answer every connection with ``message`` until ``done`` is set."""
    server.settimeout(0.2)
    while not done.is_set():
        try:
            conn, _ = server.accept()
        except socket.timeout:
            continue
        except OSError:
            if done.wait(0.2):
                return
            continue
        with conn:
            try:
                conn.settimeout(1.0)
                conn.sendall(message)
            except OSError:
                pass


def announce_failure(
    port: int,
    peers: list[tuple[int, str, int]],
    message: bytes,
    window: float,
    stopped: Callable[[], bool],
    key: bytes = b"",
    run_id: str = "",
) -> None:
    """Answer every connection to this worker's port with ``message`` (the
    ``announcement`` of the failure), until no peer's
    job is left to tell (every peer port refuses, gives no answer, or announces a failure
    of its own: that peer's job has ended too), ``window`` seconds passed or ``stopped()``
    is true (a stop reached the supervisor). Without the third case, two workers that
    failed together would keep each other's supervisors announcing for the whole window.

    The answering runs in a thread of its own: while this one probes the peers (up to a
    second each time), a peer probing this port must still hear the failure at once,
    or two supervisors whose checks fall in step would never hear each other."""
    server = bind_announcer(port)
    if server is None:
        return
    end = time.monotonic() + window
    done = threading.Event()
    answering = threading.Thread(target=serve_announcement, args=(server, message, done), daemon=True)
    answering.start()
    try:
        while time.monotonic() < end and not stopped():
            # In slices: a stop (the restart's, issue 42) ends the announcing at once, not
            # after the rest of a WATCH_SECONDS sleep (a signal handler does not cut one short).
            until = time.monotonic() + min(WATCH_SECONDS, max(0.0, end - time.monotonic()))
            while time.monotonic() < until and not stopped():
                time.sleep(min(POLL_SECONDS, max(0.0, until - time.monotonic())))
            if peers and not stopped():
                probes = probe_peers(peers, 1.0, key, run_id, stopped)
                if all(status in ("refused", "unreachable", "failed") for status, _ in probes.values()):
                    return
    finally:
        done.set()
        answering.join(2.0)
        server.close()


def hold_port(port: int, attempts: int = 5, pause: float = 0.2) -> socket.socket:
    """The armed supervisor's hold on this worker's TensorFlow port: the go comes to the
    port the peers will use. Tried for a second (a restart's port may still be let go of
    by the attempt before, stopping); raises OSError when the port stays taken."""
    return listen_on(port, attempts, pause)


def go_line_ok(data: bytes, token: bytes) -> bool:
    """Whether ``data``'s first line is this run's go (the magic, then the token)."""
    return bool(token) and hmac.compare_digest(data.split(b"\n", 1)[0], GO_MAGIC + token)


def launcher_gave_up(conn: socket.socket) -> bool:
    """Whether the launch closed the go's connection after sending the go: it gave up
    waiting (its timeout passed while the go sat in this port's queue). Such a go is
    stale: starting the job then would start it behind the launch's back."""
    try:
        conn.setblocking(False)
        return conn.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        conn.setblocking(True)


def await_go(
    listener: socket.socket,
    token: bytes,
    timeout: float,
    stopped: Callable[[], bool],
    budget: float = GO_READ_SECONDS,
) -> tuple[socket.socket | None, str]:
    """Wait on the held port for the go: (the go's connection, "go"), or (None, "stopped")
    when ``stopped()`` became true, or (None, "timeout") after ``timeout`` seconds.

    Every connection is served at once (a selector), each with ``budget`` seconds to send
    its line: silent connections (a port scan) cannot hold the go back. A connection that
    sends anything but this run's go is closed and the wait goes on; so is a go whose
    launch has already closed the connection (it gave up: see launcher_gave_up)."""
    end = time.monotonic() + timeout
    listener.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, None)
    pending: dict[socket.socket, tuple[float, bytes]] = {}

    def drop(conn: socket.socket) -> None:
        sel.unregister(conn)
        pending.pop(conn, None)
        conn.close()

    try:
        while True:
            if stopped():
                # A go being sent hears that the stop won.
                for conn, (_until, data) in list(pending.items()):
                    if data and (data.startswith(GO_MAGIC) or GO_MAGIC.startswith(data)):
                        sel.unregister(conn)
                        pending.pop(conn)
                        answer_go(conn, GO_FAILED + b"stopped before its job started")
                return None, "stopped"
            now = time.monotonic()
            if now >= end:
                return None, "timeout"
            for conn in [c for c, (until, _) in pending.items() if until <= now]:
                drop(conn)
            for key, _events in sel.select(min(POLL_SECONDS, max(0.0, end - now))):
                if key.data is None:
                    try:
                        conn, _ = listener.accept()
                    except OSError:  # gone already, or out of descriptors: no busy loop
                        time.sleep(0.01)
                        continue
                    if len(pending) >= GO_MAX_CONNECTIONS:
                        conn.close()
                        continue
                    conn.setblocking(False)
                    pending[conn] = (time.monotonic() + budget, b"")
                    sel.register(conn, selectors.EVENT_READ, "conn")
                    continue
                conn = key.fileobj  # type: ignore[assignment]
                until, data = pending[conn]
                try:
                    chunk = conn.recv(GO_LINE_BYTES - len(data))
                except BlockingIOError:
                    continue
                except OSError:
                    chunk = b""
                data += chunk
                if chunk and b"\n" not in data and len(data) < GO_LINE_BYTES:
                    pending[conn] = (until, data)
                    continue
                sel.unregister(conn)
                pending.pop(conn, None)
                if not chunk or not go_line_ok(data, token) or launcher_gave_up(conn):
                    conn.close()
                    continue
                if stopped():  # the stop came while the go was being read: it wins
                    answer_go(conn, GO_FAILED + b"stopped before its job started")
                    return None, "stopped"
                return conn, "go"
    finally:
        for conn in list(pending):
            drop(conn)
        sel.close()


def answer_go(conn: socket.socket, answer: bytes) -> None:
    """Answer the go, then wait (briefly) for the launch to close first, so that the
    connection's TIME_WAIT stays on the launch's side, away from the job's port."""
    try:
        conn.settimeout(1.0)
        conn.sendall(answer.replace(b"\n", b" ")[:GO_LINE_BYTES - 1] + b"\n")
        while conn.recv(64):
            pass
    except OSError:
        pass
    finally:
        conn.close()


class LineClock:
    """Notes the time at which each timed line first appeared in the log.

    Reads the log incrementally in binary (a partial last line waits for its end) and keeps
    ``[time, line]`` for the lines of every output format that tf_metrics times (the
    contract's ``worker=`` lines, Keras' epoch headers and step lines), at most ``limit``.
    """

    def __init__(self, path: Path, limit: int = MAX_TIMED_LINES) -> None:
        self.path = path
        self.limit = limit
        self.offset = 0
        self.partial = b""
        self.lines: list[list[Any]] = []

    def _note(self, raw: bytes, now: float) -> None:
        if len(self.lines) >= self.limit:
            return
        # A progress bar redraws itself with carriage returns: its last state is the line.
        line = raw.rsplit(b"\r", 1)[-1].strip().decode("utf-8", errors="replace")
        if is_timed(line):
            # Rounded down to the millisecond: never later than the exit recorded after it.
            self.lines.append([int(now * 1000) / 1000, line])

    def poll(self, now: float | None = None, final: bool = False) -> None:
        now = time.time() if now is None else now

        def take(chunk: bytes) -> None:
            *complete, self.partial = (self.partial + chunk).split(b"\n")
            self.partial = self.partial[-65536:]
            for raw in complete:
                self._note(raw, now)

        try:
            self.offset = read_from(self.path, self.offset, take)
        except OSError:  # the exit record must be written whatever happened to the log
            return
        if final and self.partial:
            self._note(self.partial, now)
            self.partial = b""


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Supervise one TensorFlow worker.")
    parser.add_argument("--worker-dir", required=True, type=Path)
    parser.add_argument("--python", required=True, help="interpreter that runs the job")
    parser.add_argument("--script", required=True, type=Path)
    parser.add_argument("--startup-timeout", type=float, default=0, help="0: none")
    parser.add_argument("--startup-pattern", default="")
    parser.add_argument("--job-timeout", type=float, default=0, help="0: none")
    parser.add_argument("--grace", type=float, default=5.0)
    parser.add_argument("--attempt", type=int, default=0, help="restart attempt, 0 first")
    parser.add_argument("--checkpoint-dir", default="", help="where the job may back up")
    parser.add_argument("--controller-timeout", type=float, default=0, help="0: not tied to the controller")
    parser.add_argument("--heartbeat-file", default="", help="renewed by the controller's wait")
    parser.add_argument("--peer-timeout", type=float, default=0, help="0: peers not watched")
    parser.add_argument("--run-id", default="", help="the run's id, carried by failure announcements")
    parser.add_argument("--evaluator", default="", help="the sidecar evaluator's endpoint (host:port), if any")
    parser.add_argument("--evaluator-grace", type=float, default=30.0, help="the evaluator's time after the training ended")
    parser.add_argument("--evaluator-required", action="store_true", help="a failed evaluator fails the run")
    parser.add_argument(
        "--go-timeout", type=float, default=0, help="0: start at once; else await the launch's go that long"
    )
    parser.add_argument(
        "--preimport", default="",
        help="with --go-timeout: start the job's interpreter when armed, import these modules (comma-separated) "
             "and hold it before the script until the go ('' for none: the job starts at the go)",
    )  # fmt: skip
    parser.add_argument(
        SECRETS_FLAG, dest="secrets_stdin", action="store_true",
        help="first read the launch's secrets, one JSON line, from stdin",
    )  # fmt: skip
    parser.add_argument("job_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.job_args and args.job_args[0] == "--":
        args.job_args = args.job_args[1:]
    return args


def read_secrets(fd: int = 0, limit: int = SECRETS_LINE_BYTES, timeout: float = SECRETS_SECONDS) -> dict[str, str]:
    """The launch's secrets from one line of at most ``limit`` bytes on ``fd`` (stdin),
    read within ``timeout`` seconds; never more than ``limit`` + 1 bytes are read.
    Raises ValueError saying what is wrong (never quoting the line)."""
    data = b""
    end = time.monotonic() + timeout
    # select(), not epoll: it also takes a regular file as stdin.
    with selectors.SelectSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while b"\n" not in data and len(data) <= limit:
            left = end - time.monotonic()
            if left <= 0:
                raise ValueError(f"no secrets line on stdin within {timeout:g} s")
            if not selector.select(left):
                continue
            try:
                chunk = os.read(fd, limit + 1 - len(data))
            except OSError as exc:
                raise ValueError(f"stdin cannot be read: {exc.strerror}") from None
            if not chunk:
                break
            data += chunk
    newline = data.find(b"\n")
    return parse_secrets_line(data[: newline + 1] if newline >= 0 else data)


def take_secrets(args: argparse.Namespace) -> tuple[dict[str, str], str]:
    """(the launch's secrets, why they could not be read or ""): with SECRETS_FLAG, read
    from stdin, which then becomes /dev/null; without it, none and stdin is untouched."""
    if not args.secrets_stdin:
        return {}, ""
    try:
        secrets_ = read_secrets()
        problem = ""
    except ValueError as exc:
        secrets_, problem = {}, f"{SECRETS_FLAG}: {exc}"
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
    return secrets_, problem


def validate(args: argparse.Namespace, config_text: str | None, secrets_: dict[str, str] | None = None) -> list[str]:
    """Every problem with the arguments, before anything is started; ``secrets_`` are the
    launch's (take_secrets())."""
    secrets_ = secrets_ or {}
    problems = []
    for name in ("startup_timeout", "job_timeout", "grace", "controller_timeout", "peer_timeout", "go_timeout",
                 "evaluator_grace"):
        value = getattr(args, name)
        if not math.isfinite(value) or value < 0:
            problems.append(f"--{name.replace('_', '-')} must be 0 or more seconds, got {value:g}")
    if args.attempt < 0:
        problems.append(f"--attempt must be 0 or more, got {args.attempt}")
    try:
        re.compile(args.startup_pattern)
    except re.error as exc:
        problems.append(f"--startup-pattern {args.startup_pattern!r} is not a valid regular expression: {exc}")
    bad = [name for name in args.preimport.split(",") if name and not MODULE_NAME.match(name)]
    if bad:
        problems.append(f"--preimport {args.preimport!r} (tf_launch_preimport): {', '.join(map(repr, bad))} "
                        "is not a Python module's dotted name")
    if args.controller_timeout > 0 and not args.heartbeat_file:
        problems.append("--controller-timeout needs --heartbeat-file")
    if args.go_timeout > 0 and not secrets_.get(SECRET_GO_TOKEN):
        problems.append(f"--go-timeout needs the go's token ({SECRET_GO_TOKEN}) on stdin with {SECRETS_FLAG}")
    if args.peer_timeout > 0 and not secrets_.get(SECRET_ANNOUNCE_KEY):
        problems.append(
            f"--peer-timeout needs the run's announcement key ({SECRET_ANNOUNCE_KEY}) on stdin with {SECRETS_FLAG}"
        )
    if args.evaluator and not secrets_.get(SECRET_ANNOUNCE_KEY):
        problems.append(f"--evaluator needs the run's announcement key ({SECRET_ANNOUNCE_KEY}) on stdin with {SECRETS_FLAG}")
    if config_text is None:
        problems.append(f"{CONFIG_FILE} cannot be read")
    else:
        try:
            if args.evaluator:
                parse_endpoint(args.evaluator)
            cluster_peers(json.loads(config_text), args.evaluator)
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            problems.append(f"{CONFIG_FILE} is not a usable TF_CONFIG: {exc}")
    return problems


def stop_request(worker_dir: Path) -> tuple[str, str, str | None] | None:
    """(by, reason, cause kind or None) from the stop request tf_worker_stop wrote, if
    any: a cause (``stalled``, say) is recorded instead of the one ``by`` implies."""
    request = read_json(worker_dir / STOP_FILE)
    if not request:
        return None
    by = str(request.get("by") or "runbook")
    cause = request.get("cause")
    return (
        by if by in STOPPED_BY else "runbook",
        str(request.get("reason") or f"stopped by the {by}"),
        cause if cause in CAUSES else None,
    )


def log_tail(path: Path, lines: int = TAIL_LINES, limit: int = 65536) -> list[str]:
    """The log's last ``lines`` lines (of its last ``limit`` bytes); none when unreadable."""
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, os.path.getsize(path) - limit))
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return []
    return text.splitlines()[-lines:]


def job_dir_of(script: Path) -> str:
    """The job directory whose files are the job's own code: this file's (the deploy ships
    the supervisor into it) when the script is there, else the script's own directory."""
    path, here = os.path.realpath(script), os.path.realpath(_HERE)
    return here if path.startswith(here + os.sep) else os.path.dirname(path)


def read_stacks(worker_dir: Path, job_dir: str) -> dict[str, Any] | None:
    """exit.json's ``stacks`` from the worker's stacks.txt, when a dump was taken."""
    path = worker_dir / STACKS_FILE
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
        captured_at = path.stat().st_mtime
    except OSError:
        return None
    if not stacks_dumped(text):
        return None
    return {"file": STACKS_FILE, "captured_at": captured_at, **parse_stacks(text, job_dir)}


class RecordGuard:
    """The job runs in its worker directory, where the supervisor keeps its records: a job
    or a library that writes a file of the same name (its own ``state.json``, say) would
    fake an exit or hide the process group from a stop. The guard notes each record the
    supervisor writes and tells, at every poll, which one someone else wrote: the run then
    fails with that reason instead of going wrong in silence."""

    # A stop request is written just before its signal: only one that no signal follows
    # within this long is someone else's.
    STOP_REQUEST_SECONDS = 5.0

    def __init__(self, worker_dir: Path) -> None:
        self.worker_dir = worker_dir
        self.written: dict[str, tuple[int, int, int] | None] = {}
        self.stop_seen: float | None = None
        # A record the job wrote before the supervisor's first look (see rewrite).
        self.collided: str | None = None

    def _stat(self, name: str) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.worker_dir / name)
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def wrote(self, name: str) -> None:
        """The supervisor has just written ``name``."""
        self.written[name] = self._stat(name)

    def rewrite(self, name: str) -> None:
        """The supervisor is about to write ``name`` again, outside a poll: a record the job
        wrote since the supervisor last did would be replaced unseen, so it is noted here
        (on a loaded host a job can write before the supervisor records its start)."""
        if self.collided is None and name in self.written and self._stat(name) != self.written[name]:
            self.collided = name

    def foreign(self, now: float, signalled: bool) -> str | None:
        """The record someone else wrote since the supervisor last did, or None."""
        if self.collided is not None:
            return self.collided
        for name, seen in self.written.items():
            if self._stat(name) != seen:
                return name
        if self._stat(EXIT_FILE) is not None:
            return EXIT_FILE
        if self._stat(STOP_FILE) is None or signalled:
            self.stop_seen = None
            return None
        self.stop_seen = self.stop_seen if self.stop_seen is not None else now
        return STOP_FILE if now - self.stop_seen > self.STOP_REQUEST_SECONDS else None


def finish(
    worker_dir: Path,
    result: dict[str, Any],
    cause: str | None = None,
    tail: list[str] | None = None,
    oom_kills: int | None = None,
    stacks: dict[str, Any] | None = None,
    nonce: str | None = None,
    oom_source: str | None = None,
) -> dict[str, Any]:
    """Write exit.json: ``result`` with its cause (``cause``, a kind the stop named, or
    what tf_causes.classify reads from the record, the wrapper's job_end.json and, only
    without that, the log's last lines), its stacks when some were taken, and this
    supervisor's ``nonce`` (state.json's: the wait trusts an exit record only with it)."""
    if cause is not None:
        result["cause"] = {"kind": cause, "detail": str(result.get("reason") or cause)}
    else:
        result["cause"] = classify(result, tail or [], oom_kills, read_job_end(str(worker_dir / JOB_END_FILE)), oom_source)
    if nonce is not None:
        result["nonce"] = nonce
    if stacks is not None:
        result["stacks"] = stacks
        if cause in ("stalled", "deadline") or result["cause"]["kind"] == "deadline":
            result["cause"]["stacks"] = stacks
    write_json_atomic(worker_dir / EXIT_FILE, result)
    return result


def exit_record(
    returncode: int, reason: str, stopped_by: str | None, started: float, joined: bool
) -> dict[str, Any]:
    sig = -returncode if returncode < 0 else None
    return {
        "returncode": returncode if returncode >= 0 else 128 + (sig or 0),
        "signal": signal_name(sig) if sig else None,
        "reason": reason,
        "stopped_by": stopped_by,
        "started_at": started,
        "finished_at": time.time(),
        "joined": joined,
    }


class Refused(Exception):
    """A step of the supervision ended it before, or instead of, a job: its exit status (the
    step wrote exit.json, or nothing for a worker already launched)."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


@dataclasses.dataclass
class Plan:
    """What the supervisor checked and prepared before anything starts: its worker, the
    cluster seen from it, the launch's secrets, the job's environment and command line, and
    the state record it writes (armed, then started)."""

    args: argparse.Namespace
    worker_dir: Path
    started: float
    launched_mono: float
    own_port: int
    peers: list[tuple[int, str, int]]
    go_token: bytes
    announce_key: bytes
    env: dict[str, str]
    job_argv: list[str]
    has_wrapper: bool
    stacks_path: Path
    job_dir: str
    nonce: str
    record: dict[str, Any]
    # The sidecar evaluator's part: "evaluator" (this is it), "chief" (it pushes its
    # checkpoints to it) or "" (no part).
    sidecar: str = ""
    # The job started when armed and held before its script (``--preimport``), if any.
    held: Held | None = None


@dataclasses.dataclass
class Held:
    """A job started when armed and held by the wrapper before its script: its process,
    the keeper's pipe (as start_job makes it) and the write end of the wrapper's gate."""

    child: subprocess.Popen
    keeper_write: int
    gate_write: int


@dataclasses.dataclass
class Job:
    """The job this supervisor started: its process (the leader of its own group), the
    keeper of the group and the pipe that keeps it, its state record and the guard of the
    worker's records."""

    child: subprocess.Popen
    keeper: int | None
    keeper_write: int
    state: dict[str, Any]
    guard: RecordGuard
    log_path: Path
    oom_before: Any
    started: float

    @property
    def pgid(self) -> int:
        return self.child.pid


@dataclasses.dataclass
class Ending:
    """Why and when the supervisor stopped the job (``reason`` stays "exited" when it
    ended by itself), and why no stacks could be taken before a deadline stop."""

    reason: str = "exited"
    stopped_by: str | None = None
    stop_cause: str | None = None
    stopped_at: list[float] = dataclasses.field(default_factory=list)
    stacks_missing: list[str] = dataclasses.field(default_factory=list)
    training_ended: bool = False

    def stop(self, stopped_by: str, reason: str, cause: str | None = None) -> None:
        self.stopped_by, self.reason, self.stop_cause = stopped_by, reason, cause


def job_env(args: argparse.Namespace, worker_dir: Path, config_text: str) -> dict[str, str]:
    """The job's environment: job_env.json over the supervisor's, TF_CONFIG, unbuffered
    output, gRPC's keepalive and the runbook's side of the resume contract (which attempt
    this is, and a directory that outlives attempts). Never the launch's secrets."""
    env = job_environment(worker_dir, dict(os.environ))
    env["TF_CONFIG"] = config_text.strip()
    env["PYTHONUNBUFFERED"] = "1"
    env["TF_GRPC_DEFAULT_OPTIONS"] = grpc_default_options(env.get("TF_GRPC_DEFAULT_OPTIONS", ""))
    env["TF_RUNBOOK_ATTEMPT"] = str(args.attempt)
    if args.checkpoint_dir:
        env["TF_RUNBOOK_CHECKPOINT_DIR"] = args.checkpoint_dir
    return env


def plan(args: argparse.Namespace) -> Plan:
    """Read the launch's secrets (before anything else: they wait on a pipe), refuse a
    worker already launched or any argument that is wrong, and prepare the job."""
    secrets_, secrets_problem = take_secrets(args)
    worker_dir: Path = args.worker_dir.resolve()
    if (worker_dir / STATE_FILE).exists() or (worker_dir / EXIT_FILE).exists():
        # Never run twice in one worker directory: that would overwrite an earlier
        # attempt's records.
        print(f"{worker_dir}: this worker was already launched", file=sys.stderr)
        raise Refused(97)
    started = time.time()
    try:
        config_text: str | None = (worker_dir / CONFIG_FILE).read_text(encoding="utf-8")
    except OSError:
        config_text = None
    problems = ([secrets_problem] if secrets_problem else []) + validate(args, config_text, secrets_)
    if problems:
        reason = "refused to start: " + "; ".join(problems)
        print(f"{worker_dir}: {reason}", file=sys.stderr)
        finish(worker_dir, exit_record(2, reason, None, started, False), cause="startup")
        raise Refused(2)
    assert config_text is not None
    config = json.loads(config_text)
    own_port, peers = cluster_peers(config, args.evaluator)
    # The job runs under the wrapper shipped next to this file, which dumps its stacks on
    # the stacks signal; without the wrapper (an older deploy), as it is.
    argv = [args.python, str(args.script), *args.job_args]
    wrapper = os.path.join(_HERE, JOB_WRAPPER)
    has_wrapper = os.path.isfile(wrapper)
    stacks_path = worker_dir / STACKS_FILE
    job_argv = (
        [args.python, wrapper, str(stacks_path), str(stacks_signal()), str(worker_dir / JOB_END_FILE), str(args.script),
         *args.job_args]
        if has_wrapper
        else argv
    )
    deadline_at = started + args.job_timeout if args.job_timeout else None
    launch = {
        "python": args.python, "script": str(args.script), "job_args": list(args.job_args), "attempt": args.attempt,
        "checkpoint_dir": args.checkpoint_dir, "controller_timeout": args.controller_timeout,
        "heartbeat_file": args.heartbeat_file, "peer_timeout": args.peer_timeout, "deadline_at": deadline_at,
        "evaluator": sidecar_part(config, args.evaluator) == "evaluator", "required": args.evaluator_required,
    }  # fmt: skip
    # state.json: armed (no job yet) and then started, with the same launch.
    # Only this supervisor's exit.json carries its nonce: the wait ignores one the job wrote.
    nonce = secrets.token_hex(16)
    record: dict[str, Any] = {
        "nonce": nonce, "supervisor_pid": os.getpid(), "pid": None, "pgid": None, "keeper_pid": None, "started_at": None,
        "armed_at": None, "go_port": None, "argv": argv, "launch": launch, "joined_at": None,
        "stacks_signal": stacks_signal() if has_wrapper else None,
    }  # fmt: skip
    return Plan(
        args=args, worker_dir=worker_dir, started=started,
        # The job deadline counts from the launch (this process's start): time spent
        # armed, waiting for the go, comes out of it, as it would have for a job started
        # at once.
        launched_mono=time.monotonic(),
        own_port=own_port, peers=peers,
        # The secrets of the launch: never in any environment, the job's included.
        go_token=secrets_.get(SECRET_GO_TOKEN, "").encode("utf-8"),
        announce_key=secrets_.get(SECRET_ANNOUNCE_KEY, "").encode("utf-8"),
        env=job_env(args, worker_dir, config_text), job_argv=job_argv, has_wrapper=has_wrapper,
        stacks_path=stacks_path, job_dir=job_dir_of(args.script), nonce=nonce, record=record,
        sidecar=sidecar_part(config, args.evaluator),
    )  # fmt: skip


def sidecar_part(config: dict[str, Any], evaluator: str) -> str:
    """This worker's part in the sidecar evaluator's checkpoints: "evaluator", "chief"
    (the runbook's worker 0, whose checkpoints it evaluates) or ""."""
    if not evaluator:
        return ""
    if config["task"].get("type") == EVALUATOR:
        return "evaluator"
    return "chief" if task_position(config) == 0 else ""


def start_sidecar(run: Plan) -> Pusher | Receiver | None:
    """The chief's pusher or the evaluator's receiver (on its own port, free once the go
    came: the evaluator runs no TensorFlow server), started; None for any other worker or
    without a checkpoint directory. A receiver that cannot bind is the evaluator's
    failure to see checkpoints, said in its log, never the training's."""
    directory = Path(os.path.expanduser(run.args.checkpoint_dir)) if run.args.checkpoint_dir else None
    if not run.sidecar or directory is None:
        return None
    side: Pusher | Receiver
    if run.sidecar == "chief":
        side = Pusher(directory, parse_endpoint(run.args.evaluator), run.announce_key, run.args.run_id)
    else:
        try:
            server = listen_on(run.own_port, 25, 0.2)
        except OSError as exc:
            with open(run.worker_dir / LOG_FILE, "a", encoding="utf-8") as log:
                log.write(f"supervisor: cannot receive the chief's checkpoints on port {run.own_port}: {exc}\n")
            return None
        side = Receiver(server, directory, run.announce_key, run.args.run_id)
    side.start()
    return side


def sidecar_record(run: Plan, side: Pusher | Receiver | None) -> dict[str, Any]:
    """exit.json's account of the checkpoints pushed (the chief) or received (the
    evaluator, with whether the user required it: the verdict reads that)."""
    if isinstance(side, Pusher):
        return {"checkpoint_push": {"pushes": side.pushes, "last_error": side.last_error or None}}
    if run.sidecar == "evaluator":
        received = side.received if isinstance(side, Receiver) else 0
        return {"checkpoint_receive": {
            "received": received, "refused": side.refused[-5:] if isinstance(side, Receiver) else [],
            "training_ended": isinstance(side, Receiver) and side.ended is not None,
            "shared": isinstance(side, Receiver) and side.shared,
            "required": bool(run.args.evaluator_required),
        }}  # fmt: skip
    return {}


def end_sidecar(side: Pusher | Receiver | None, result: dict[str, Any]) -> None:
    """Once the job's exit is recorded: the chief pushes what is left and tells the
    evaluator the training ended; the evaluator stops receiving."""
    if isinstance(side, Pusher):
        side.finish(int(result["returncode"]))
    elif isinstance(side, Receiver):
        side.close()


def catch_stop_signals(worker_dir: Path) -> list[tuple[str, str, str | None]]:
    """The stops asked of this supervisor (SIGTERM, SIGINT, SIGHUP), each as who asked
    (tf_worker_stop's request, or "signal"), why, and the cause it names; filled by the
    signal handlers, read by every step that waits."""
    stop_reason: list[tuple[str, str, str | None]] = []

    def on_signal(signum: int, _frame: Any) -> None:
        stop_reason.append(stop_request(worker_dir) or ("signal", f"stopped by signal {signal_name(signum)}", None))

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, on_signal)
    return stop_reason


def arm(run: Plan, stop_reason: list[tuple[str, str, str | None]]) -> tuple[socket.socket | None, float]:
    """With ``--go-timeout``: hold the worker's TensorFlow port, record an armed state and
    wait for the launch's go; the go's connection (answered once the job started) and when
    the job starts. Without it, no go and the launch's time."""
    args, worker_dir = run.args, run.worker_dir
    if not args.go_timeout:
        return None, run.started
    try:
        listener = hold_port(run.own_port)
    except OSError as exc:
        reason = f"refused to start: port {run.own_port} (its TensorFlow port) is not free: {exc}"
        print(f"{worker_dir}: {reason}", file=sys.stderr)
        finish(worker_dir, exit_record(2, reason, None, run.started, False), cause="startup", nonce=run.nonce)
        raise Refused(2)
    if args.preimport and run.has_wrapper:
        run.held = hold_job(run)
    armed_at = time.time()
    run.record.update(armed_at=armed_at, go_port=run.own_port)
    write_json_atomic(worker_dir / STATE_FILE, run.record)
    with listener:
        go_conn, outcome = await_go(listener, run.go_token, args.go_timeout, lambda: bool(stop_reason))
    if go_conn is None:
        drop_held(run)
        if outcome == "stopped":
            stopped_by, reason, cause = stop_reason[0]
            result = exit_record(-signal.SIGTERM, f"{reason} (before the job started)", stopped_by, armed_at, False)
        else:
            reason = (
                f"no go from the launch within {args.go_timeout:g} s (tf_launch_go_timeout): the launch did "
                "not finish on every host, so the job was never started"
            )
            result, cause = exit_record(124, reason, "startup-deadline", armed_at, False), None
        finish(worker_dir, result, cause=cause, nonce=run.nonce)
        raise Refused(int(result["returncode"]))
    return go_conn, time.time()


def hold_job(run: Plan) -> Held | None:
    """Start the job now, armed, as start_job would at the go, but held by the wrapper
    before its script: the interpreter starts and imports ``--preimport``'s modules while
    the launch arms the other hosts, and the go only opens the gate. None (the job then
    starts at the go, as without ``--preimport``) when it cannot be started now."""
    keeper_read, keeper_write = os.pipe()
    gate_read, gate_write = os.pipe()
    env = {**run.env, JOB_GATE_ENV: str(gate_read), JOB_PREIMPORT_ENV: run.args.preimport}
    try:
        with open(run.worker_dir / LOG_FILE, "ab", buffering=0) as log:
            child = subprocess.Popen(
                run.job_argv, cwd=run.worker_dir, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                pass_fds=(gate_read,),
                preexec_fn=job_preexec(keeper_read, os.getpid()),  # noqa: PLW1509 - single-threaded
            )  # fmt: skip
    except OSError:
        for fd in (keeper_write, gate_write):
            os.close(fd)
        return None
    finally:
        os.close(keeper_read)
        os.close(gate_read)
    return Held(child, keeper_write, gate_write)


def drop_held(run: Plan) -> None:
    """End a held job that will never get its go: the gate closed (the wrapper exits), and
    the keeper's pipe with it (the keeper kills the job's whole group)."""
    held, run.held = run.held, None
    if held is None:
        return
    for fd in (held.gate_write, held.keeper_write):
        with contextlib.suppress(OSError):
            os.close(fd)
    with contextlib.suppress(subprocess.TimeoutExpired):
        held.child.wait(timeout=5)


def job_time_left(run: Plan) -> float:
    """The job deadline's seconds left once armed (0 for none): the time spent waiting for
    the go comes out of it, but never all of it."""
    args = run.args
    spent = time.monotonic() - run.launched_mono
    return max(args.job_timeout - spent, min(args.job_timeout, 1.0)) if args.job_timeout else 0.0


def start_job(run: Plan, started: float, go_conn: socket.socket | None) -> Job:
    """Start the job in its own session and process group, output to its log, kept by the
    keeper (whose pipe the supervisor holds for as long as it lives); record its state and
    answer the go."""
    args, worker_dir = run.args, run.worker_dir
    log_path = worker_dir / LOG_FILE
    oom_before = oom_kill_counts()
    # The armed record is the supervisor's: whatever changes it from here is the job's.
    guard = RecordGuard(worker_dir)
    guard.wrote(STATE_FILE)
    held, run.held = run.held, None
    if held is not None:
        # The job held since the arming: the go opens its gate (a job that ended meanwhile
        # is found ended by the watch, its log says why).
        with contextlib.suppress(OSError):
            os.write(held.gate_write, JOB_GATE_OPEN)
        os.close(held.gate_write)
        child, keeper_write = held.child, held.keeper_write
    else:
        child, keeper_write = spawn_job(run, started, go_conn)
    state: dict[str, Any] = {
        **run.record,
        "pid": child.pid,
        "pgid": child.pid,
        "keeper_pid": next((p for p in group_members(child.pid) if p != child.pid), None),
        "started_at": started,
    }
    guard.rewrite(STATE_FILE)
    write_json_atomic(worker_dir / STATE_FILE, state)
    guard.wrote(STATE_FILE)
    if go_conn is not None:
        answer_go(go_conn, GO_STARTED + str(child.pid).encode())
    return Job(child, state["keeper_pid"], keeper_write, state, guard, log_path, oom_before, started)


def spawn_job(run: Plan, started: float, go_conn: socket.socket | None) -> tuple[subprocess.Popen, int]:
    """The job's process, started now (start_job's, without a held job), and the write
    end of its keeper's pipe."""
    args, worker_dir = run.args, run.worker_dir
    keeper_read, keeper_write = os.pipe()
    with open(worker_dir / LOG_FILE, "ab", buffering=0) as log:
        try:
            child = subprocess.Popen(
                run.job_argv,
                cwd=worker_dir,
                env=run.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=job_preexec(keeper_read, os.getpid()),  # noqa: PLW1509 - single-threaded
            )
        except OSError as exc:
            log.write(f"supervisor: cannot start {args.python}: {exc}\n".encode())
            finish(worker_dir, exit_record(127, f"cannot start the job: {exc}", None, started, False), cause="startup", nonce=run.nonce)
            if go_conn is not None:
                answer_go(go_conn, GO_FAILED + f"cannot start the job: {exc}".encode("utf-8", "replace"))
            raise Refused(127) from exc
    os.close(keeper_read)
    return child, keeper_write


def take_stacks(run: Plan, job: Job, ending: Ending) -> None:
    """The job's stacks, before it is stopped for a deadline (exit.json's stacks). The
    stacks signal ends a process that does not catch it: a job that re-executed itself
    (``os.execv``) dropped the wrapper, and is not sent it."""
    if not run.has_wrapper or job.child.poll() is not None:
        return
    if signal_caught(job.child.pid, stacks_signal()) is False:
        ending.stacks_missing.append(
            "no stacks: the job runs without the wrapper (it does not catch the stacks signal; "
            "a job that re-executes itself drops it)"
        )
        return
    request_stacks(job.child.pid, str(run.stacks_path), STACKS_SECONDS)


def stop_from_outside(run: Plan, job: Job) -> None:
    """A SIGTERM from outside the runbook (a preemption, a host's shutdown): the job gets
    its grace to save. The group gets one SIGTERM: forwarded only when it did not get it
    too (then pending on the keeper, which blocks it)."""
    end = time.monotonic() + FORWARD_CHECK_SECONDS
    got_it = False
    while job.keeper and not got_it and time.monotonic() < end and job.child.poll() is None:
        got_it = bool(signal_pending(job.keeper, signal.SIGTERM))
        time.sleep(0.05)
    stop_group(job.pgid, job.child, run.args.grace, terminate=not got_it and job.child.poll() is None, keeper=job.keeper)


class JobWatch:
    """What the supervisor watches while the job runs: the log (the startup line, the timed
    lines), the job's own writes into the worker's records, the deadlines, the controller's
    heartbeat and the peers. One ``check`` per poll."""

    def __init__(self, run: Plan, job: Job, job_timeout: float, stop_reason: list[tuple[str, str, str | None]]) -> None:
        args = run.args
        self.run, self.job, self.job_timeout, self.stop_reason = run, job, job_timeout, stop_reason
        self.watcher = LogWatcher(job.log_path, args.startup_pattern)
        self.peer_watch = PeerWatch(run.peers, args.peer_timeout) if args.peer_timeout and run.peers else None
        self.clock = LineClock(job.log_path)
        self.t0 = time.monotonic()
        self.next_watch = self.t0 + WATCH_SECONDS
        self.next_progress, self.progress_lines = self.t0, 0
        self.sidecar: Pusher | Receiver | None = None

    def record(self, now: float, joined: bool) -> None:
        """state.json's news: when the worker joined, and where its training stands
        (tf_metrics.progress_of), for status.yml and the wait: the time each epoch ended
        is the supervisor's, not a reader's."""
        state, guard, path = self.job.state, self.job.guard, self.run.worker_dir / STATE_FILE
        if joined and state["joined_at"] is None:
            state["joined_at"] = time.time()
            guard.rewrite(STATE_FILE)
            write_json_atomic(path, state)
            guard.wrote(STATE_FILE)
        if now >= self.next_progress and len(self.clock.lines) != self.progress_lines:
            self.next_progress, self.progress_lines = now + PROGRESS_SECONDS, len(self.clock.lines)
            progress = progress_of([(at, line) for at, line in self.clock.lines])
            if progress is not None and progress != state.get("progress"):
                state["progress"] = progress
                guard.rewrite(STATE_FILE)
                write_json_atomic(path, state)
                guard.wrote(STATE_FILE)

    def check(self, ending: Ending) -> None:
        """One look at the job; sets ``ending`` when it must be stopped."""
        args, run, job = self.run.args, self.run, self.job
        now = time.monotonic()
        elapsed = now - self.t0
        joined = self.watcher.poll()
        self.clock.poll()
        # Looked at before the supervisor writes a record again: a rewrite would hide a
        # record the job wrote in between.
        collided = job.guard.foreign(now, bool(self.stop_reason))
        if collided is not None:
            ending.stop("supervisor", (
                f"the job wrote {collided} into its working directory, where the runbook keeps this "
                f"worker's records: write it under another name or in a subdirectory"
            ), "job-error")  # fmt: skip
            return
        self.record(now, joined)
        if self.training_over(now, ending):
            return
        if args.startup_timeout and not joined and elapsed > args.startup_timeout:
            ending.stop("startup-deadline", f"startup deadline of {args.startup_timeout:g} s passed before the worker joined the cluster")
        elif self.job_timeout and elapsed > self.job_timeout:
            ending.stop("job-deadline", f"job deadline of {args.job_timeout:g} s passed")
            take_stacks(run, job, ending)
        elif now >= self.next_watch:
            self.next_watch = now + WATCH_SECONDS
            self.watch_others(ending)

    def training_over(self, now: float, ending: Ending) -> bool:
        """The evaluator: the chief told it the training ended, and its grace to evaluate
        the last checkpoint passed; the runbook stops it, not a failure."""
        side, grace = self.sidecar, self.run.args.evaluator_grace
        if not isinstance(side, Receiver) or side.ended is None or now - side.ended[1] < grace:
            return False
        ending.stop("runbook", (
            f"the training ended (the chief's exit status {side.ended[0]}): the evaluator was stopped by the "
            f"runbook {grace:g} s later (tf_evaluator_grace)"
        ))  # fmt: skip
        ending.training_ended = True
        return True

    def watch_others(self, ending: Ending) -> None:
        """Every WATCH_SECONDS: the controller's heartbeat, then the peers."""
        args, run, job = self.run.args, self.run, self.job
        if args.controller_timeout:
            age = heartbeat_age(args.heartbeat_file, job.started)
            if age > args.controller_timeout:
                ending.stop("controller", (
                    f"lost the controller: its heartbeat was not renewed for {age:.0f} s "
                    f"(tf_controller_timeout {args.controller_timeout:g} s)"
                ))  # fmt: skip
        if ending.stopped_by is None and self.peer_watch is not None:
            # Given up once the job ended or a stop came: either is handled at once.
            probes = probe_peers(
                run.peers, 1.0, run.announce_key, args.run_id, lambda: job.child.poll() is not None or bool(self.stop_reason)
            )
            found = self.peer_watch.verdict(probes, time.monotonic())
            if found:
                ending.stop("peer", found)


def stop_grace(ending: Ending, grace: float) -> float:
    """The grace of the supervisor's own stop: ``--grace``, or at most PEER_STOP_GRACE for a
    stop because a peer failed (``stopped_by: peer``)."""
    return min(grace, PEER_STOP_GRACE) if ending.stopped_by == "peer" else grace


def watch_job(run: Plan, job: Job, watch: JobWatch, stop_reason: list[tuple[str, str, str | None]]) -> Ending:
    """Watch the job until it ends, or stop it: asked to (a signal, tf_worker_stop), or for
    a reason of its own (``JobWatch.check``); an error of the supervisor stops it too, as
    the job must not outlive a broken supervisor."""
    ending = Ending()
    child, grace = job.child, run.args.grace
    try:
        while child.poll() is None:
            if stop_reason:
                ending.stop(*stop_reason[0])
                ending.stopped_at.append(time.time())
                if ending.stopped_by == "signal":
                    stop_from_outside(run, job)
                else:
                    stop_group(job.pgid, child, grace, keeper=job.keeper)
                break
            watch.check(ending)
            if ending.stopped_by is not None:
                ending.stopped_at.append(time.time())
                stop_group(job.pgid, child, stop_grace(ending, grace), keeper=job.keeper)
                break
            # Returns as soon as the job ends (Popen polls every few ms while it waits), so
            # that its exit is recorded at once rather than up to a poll later.
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(POLL_SECONDS)
    except Exception as exc:  # noqa: BLE001 - the job must not outlive a broken supervisor
        ending.stopped_by, ending.reason = "supervisor", f"supervisor error: {type(exc).__name__}: {exc}"
        ending.stopped_at.append(time.time())
        stop_group(job.pgid, child, grace, keeper=job.keeper)
    return ending


def record_exit(run: Plan, job: Job, watch: JobWatch, ending: Ending, stop_reason: list[tuple[str, str, str | None]]) -> dict[str, Any]:
    """Once the job ended: no process of its group left, and exit.json written (with its
    cause, timed lines, OOM evidence and stacks), whatever happens."""
    returncode = job.child.wait()
    watch.clock.poll(final=True)
    if ending.reason == "exited" and stop_reason:
        # The job ended on the same signal the supervisor got, before the loop saw it.
        ending.stop(*stop_reason[0])
    # The job may have left children of its own in the group: none may outlive the run.
    if group_alive(job.pgid, job.keeper):
        stop_group(job.pgid, job.child, min(run.args.grace, 2.0), keeper=job.keeper)
    os.close(job.keeper_write)
    result = exit_record(returncode, ending.reason, ending.stopped_by, job.started, watch.watcher.poll())
    if ending.stopped_at:
        result["stopped_at"] = ending.stopped_at[0]
    if ending.training_ended:
        result["training_ended"] = True
    result.update(sidecar_record(run, watch.sidecar))
    worker_dir = run.worker_dir
    try:
        result["timed_lines"] = watch.clock.lines
        oom_kills, oom_source = oom_evidence(job.child.pid, job.oom_before, oom_kill_counts())
        stacks = read_stacks(worker_dir, run.job_dir)
        missing = ending.stacks_missing[0] if ending.stacks_missing else (read_json(worker_dir / STOP_FILE) or {}).get("stacks_missing")
        if stacks is None and isinstance(missing, str) and missing:
            # Why no stacks were taken (at the deadline here, at a stall by tf_worker_stop).
            stacks = {"file": None, "where": "unknown", "frames": [], "missing": missing[:300]}
        finish(worker_dir, result, ending.stop_cause, log_tail(job.log_path), oom_kills, stacks, run.nonce, oom_source)
    except Exception as exc:  # noqa: BLE001 - an exit.json whatever happens
        result.pop("timed_lines", None)
        result["supervisor_error"] = f"{type(exc).__name__}: {exc}"
        finish(worker_dir, result, ending.stop_cause, [], None, None, run.nonce)
    return result


def tell_peers(run: Plan, result: dict[str, Any], ending: Ending, stop_reason: list[tuple[str, str, str | None]]) -> None:
    """A job that failed on its own: tell the peers, which would otherwise wait for it (a
    preemption's save ends every worker by itself: nothing to tell)."""
    args = run.args
    preempted = result["cause"]["kind"] == "preempted"
    if run.peers and args.peer_timeout and result["returncode"] != 0 and ending.stopped_by is None and not preempted:
        message = announcement(run.announce_key, args.run_id, f"worker exit status {result['returncode']}")
        announce_failure(
            run.own_port, run.peers, message, ANNOUNCE_SECONDS, lambda: bool(stop_reason), run.announce_key, args.run_id
        )


def supervise(args: argparse.Namespace) -> int:
    """Supervise one worker: check everything, arm (or not), start the job, watch it until
    it ends or must stop, record its exit, and tell the peers of a failure. A step that
    ends the supervision early has already recorded why (``Refused``)."""
    try:
        run = plan(args)
        stop_reason = catch_stop_signals(run.worker_dir)
        go_conn, started = arm(run, stop_reason)
        job_timeout = job_time_left(run)
        job = start_job(run, started, go_conn)
    except Refused as refused:
        return refused.status
    watch = JobWatch(run, job, job_timeout, stop_reason)
    watch.sidecar = start_sidecar(run)
    ending = watch_job(run, job, watch, stop_reason)
    result = record_exit(run, job, watch, ending, stop_reason)
    tell_peers(run, result, ending, stop_reason)
    end_sidecar(watch.sidecar, result)
    return int(result["returncode"])


def main(argv: list[str] | None = None) -> int:
    return supervise(parse_args(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    raise SystemExit(main())
