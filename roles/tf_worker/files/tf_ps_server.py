#!/usr/bin/env python3
"""The runbook's ParameterServerStrategy server: what a ``ps`` or ``worker`` task runs
when the cluster has ps tasks (the inventory's tf_ps group).

In ParameterServerStrategy only the chief (the coordinator) runs the user's training
program; the ps and worker tasks start a ``tf.distribute.Server`` and serve until someone
ends them: they never exit by themselves. The runbook starts this entry for them rather
than the user's script with a flag, so that a project needs no server code and the
server's end is the runbook's own rule, written once:

- it prints ``worker=I task=TYPE:N server_started`` once its server listens (``I`` the
  runbook's index; the line is the server's startup pattern: the supervisor records it as
  joined);
- the run ends when the chief ends: the wait sees the chief exit 0, and the runbook then
  stops every server through its stop (tf_worker_stop, its stop request naming the cause
  ``stopped``). On that SIGTERM the server prints ``worker=I task=TYPE:N server_stopped
  by=runbook`` and exits 0: its exit record says it was stopped by the runbook at the
  run's end, not that it failed;
- the fallback, where no runbook stops it (a detached run, a lost controller): it watches
  the chief's port, where the coordinator's own server listens while it trains. Once seen
  listening, a port refused for ``--coordinator-grace`` seconds (longer than the wait
  takes to stop it) means the coordinator ended and nobody stopped this server: it prints
  ``server_stopped coordinator=gone``, writes ``{"exit": 0, "ended": "coordinator-gone"}``
  as its end record (tf_run.JOB_END_FILE, the cause ``coordinator-gone``) and exits 0, so
  that no server outlives its run.

A server that dies before the chief ends (killed, out of memory) exits non-zero: its
supervisor records the cause and tells its peers, which stops the attempt (see
docs/your-project.md, "ParameterServerStrategy").
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import time
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))
_SOURCE_UTILS = os.path.join(_HERE, "..", "..", "..", "plugins", "module_utils")
if not os.path.exists(os.path.join(_HERE, "tf_run.py")) and os.path.isdir(_SOURCE_UTILS):
    # In the source tree, the shared contract lives in plugins/module_utils/; on a host,
    # the deploy ships it next to this file.
    sys.path.insert(0, os.path.realpath(_SOURCE_UTILS))

from tf_causes import COORDINATOR_GONE_KIND, SERVER_STOPPED_KIND  # noqa: E402
from tf_run import JOB_END_FILE, SERVER_STARTED, SERVER_STOPPED, STOP_FILE, read_json, task_position, write_json_atomic  # noqa: E402

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# How often the chief's port is tried, and by default how long it must stay shut, once
# seen open, before the server ends by itself (the launch passes --coordinator-grace: the
# wait's poll interval and more, so that a runbook that is there stops it first).
POLL_SECONDS = 1.0
GONE_SECONDS = 60.0


def parse_endpoint(endpoint: str) -> tuple[str, int]:
    """``host:port``, ``[v6]:port`` -> (host, port)."""
    host, _, port = endpoint.rpartition(":")
    return host.strip("[]"), int(port)


def listening(host: str, port: int, timeout: float = 1.0) -> bool:
    """Whether something accepts a connection on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


class CoordinatorWatch:
    """Tells, from successive looks at the chief's port, when the coordinator ended: seen
    listening once, then shut for ``gone`` seconds in a row."""

    def __init__(self, gone: float = GONE_SECONDS) -> None:
        self.gone = gone
        self.seen = False
        self.shut_since: float | None = None

    def ended(self, open_now: bool, now: float) -> bool:
        if open_now:
            self.seen, self.shut_since = True, None
            return False
        if not self.seen:
            return False
        self.shut_since = now if self.shut_since is None else self.shut_since
        return now - self.shut_since >= self.gone


def stopped_at_the_end(worker_dir: str = ".") -> bool:
    """Whether the SIGTERM this server got is the runbook's stop at the run's end: the
    stop request (tf_run.STOP_FILE, in the worker directory, the job's working directory)
    names the cause ``stopped``. Any other SIGTERM ends it as a signal does."""
    request = read_json(os.path.join(worker_dir, STOP_FILE)) or {}
    return request.get("cause") == SERVER_STOPPED_KIND


def leave(line: str) -> None:
    """Write ``line`` and exit 0 at once: the server's threads never end by themselves.
    The SIGTERM handler calls it, and a signal may land while the main thread is inside a
    print: Python's buffered stdout is not reentrant (a print there raises RuntimeError and
    the server would exit 1, a failure), so what the buffers hold is flushed where that can
    be done and the line goes to the file descriptor itself."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (RuntimeError, OSError, ValueError):
            pass
    os.write(1, f"{line}\n".encode("utf-8", "replace"))
    os._exit(0)


def on_stop(me: str) -> Any:
    def handler(signum: int, _frame: Any) -> None:
        if stopped_at_the_end():
            leave(f"{me} {SERVER_STOPPED} by=runbook")
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    return handler


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="tf_ps_server.py")
    parser.add_argument("--coordinator-grace", type=float, default=GONE_SECONDS,
                        help="seconds the chief's port must stay shut before the server ends by itself")  # fmt: skip
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    config = json.loads(os.environ["TF_CONFIG"])
    task = config["task"]
    kind, number = str(task["type"]), int(task["index"])
    if kind not in ("ps", "worker") or not config["cluster"].get("chief"):
        raise SystemExit(f"tf_ps_server.py serves a ps or worker task of a cluster with a chief, not {kind}:{number}")
    me = f"worker={task_position(config)} task={kind}:{number}"
    signal.signal(signal.SIGTERM, on_stop(me))
    import tensorflow as tf  # noqa: PLC0415 - after the environment is set

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    # Started at once; kept referenced for as long as this process serves.
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=kind, task_index=number, protocol="grpc", start=True)
    print(f"{me} {SERVER_STARTED} target={server.target}", flush=True)
    chief_host, chief_port = parse_endpoint(str(config["cluster"]["chief"][0]))
    watch = CoordinatorWatch(args.coordinator_grace)
    while not watch.ended(listening(chief_host, chief_port), time.monotonic()):
        time.sleep(POLL_SECONDS)
    # No runbook stopped this server: it ends by itself, and says why in its end record.
    write_json_atomic(JOB_END_FILE, {"exit": 0, "ended": COORDINATOR_GONE_KIND})
    leave(f"{me} {SERVER_STOPPED} coordinator=gone")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
