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
- it watches the chief's port: the coordinator's own server listens there while it
  trains. Once seen listening, a port refused for ``GONE_SECONDS`` means the coordinator
  ended; the server then prints ``worker=I task=TYPE:N server_stopped
  coordinator=ended`` and exits 0. The run ends when the chief ends, and the servers'
  exit records say they were stopped at its end, not that they failed.

A server that dies before the chief ends (killed, out of memory) exits non-zero: its
supervisor records the cause and tells its peers, which stops the attempt (see
docs/your-project.md, "ParameterServerStrategy").
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
_SOURCE_UTILS = os.path.join(_HERE, "..", "..", "..", "plugins", "module_utils")
if not os.path.exists(os.path.join(_HERE, "tf_run.py")) and os.path.isdir(_SOURCE_UTILS):
    # In the source tree, the shared contract lives in plugins/module_utils/; on a host,
    # the deploy ships it next to this file.
    sys.path.insert(0, os.path.realpath(_SOURCE_UTILS))

from tf_run import SERVER_STARTED, SERVER_STOPPED, task_position  # noqa: E402

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# How often the chief's port is tried, and how long it must stay shut, once seen open,
# for the coordinator to count as ended.
POLL_SECONDS = 1.0
GONE_SECONDS = 3.0


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


def main() -> int:
    config = json.loads(os.environ["TF_CONFIG"])
    task = config["task"]
    kind, number = str(task["type"]), int(task["index"])
    if kind not in ("ps", "worker") or not config["cluster"].get("chief"):
        raise SystemExit(f"tf_ps_server.py serves a ps or worker task of a cluster with a chief, not {kind}:{number}")
    me = f"worker={task_position(config)} task={kind}:{number}"
    import tensorflow as tf  # noqa: PLC0415 - after the environment is set

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    # Started at once; kept referenced for as long as this process serves.
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=kind, task_index=number, protocol="grpc", start=True)
    print(f"{me} {SERVER_STARTED} target={server.target}", flush=True)
    chief_host, chief_port = parse_endpoint(str(config["cluster"]["chief"][0]))
    watch = CoordinatorWatch()
    while not watch.ended(listening(chief_host, chief_port), time.monotonic()):
        time.sleep(POLL_SECONDS)
    print(f"{me} {SERVER_STOPPED} coordinator=ended", flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    # The server's threads never end by themselves: leave without waiting for them.
    os._exit(0)


if __name__ == "__main__":
    raise SystemExit(main())
