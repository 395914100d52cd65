#!/usr/bin/python
# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Start every armed worker of the run at once, from one host (issue 13)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: tf_worker_go
short_description: Send every armed worker of a run its go, all at once, from one host
version_added: "0.1.0"
author: tf-runbook contributors (!UNKNOWN)
description:
  - Second half of an armed launch. M(tf_runbook.multiworker.tf_worker_launch) with a
    C(go_token) starts each worker's supervisor armed, holding the worker's TensorFlow
    port; this module, run once on one host of the cluster (the chief's), connects to
    every worker's port at once, sends the go with the token, and reads each answer. A
    supervisor starts its job the moment it reads the go, so the workers start within
    the time it takes to open the connections, instead of one host after another as
    Ansible hands a task to each host in turn.
  - The host it runs on must reach every worker's port, which the workers need anyway
    (the preflight's reachability probe checks it).
  - A connection that is refused is tried again until O(timeout) (a supervisor still
    arming); a worker that cannot be reached, or whose supervisor answers that it could
    not start its job, gets an C(error) naming the worker, its endpoint and the reason,
    shown as a warning and listed in C(failed_workers). The task itself does not fail;
    the wait reports those workers as failed and stops the rest.
  - In check mode, reports what it would send and sends nothing.
extends_documentation_fragment:
  - tf_runbook.multiworker.attributes
options:
  workers:
    description: The workers to start, each with its C(index), C(address), C(port) and
      C(host) (the cluster spec's C(workers); other keys are ignored).
    type: list
    elements: dict
    required: true
  token:
    description: The run's secret for this launch, the one given to M(tf_runbook.multiworker.tf_worker_launch).
    type: str
    required: true
  timeout:
    description: Seconds each worker gets to accept the go and answer it.
    type: float
    default: 10
attributes:
  check_mode:
    support: full
    details: Reports what would be sent; sends nothing.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Start every worker of the run together
  tf_runbook.multiworker.tf_worker_go:
    workers: "{{ tf_cluster_spec.workers }}"
    token: "{{ tf_launch_go_token }}"
  run_once: true
  delegate_to: "{{ tf_cluster_spec.chief }}"
  register: went
"""

RETURN = r"""
workers:
  description: One entry per worker, in index order, with C(index), C(host),
    C(endpoint), C(started) (its supervisor started the job), C(pid) (the job's, or
    null), C(sent_at) and C(answered_at) (epoch seconds on this host, null when not
    reached) and C(error) (null, or why it did not start).
  type: list
  elements: dict
  returned: always
  sample:
    - index: 1
      host: node2
      endpoint: 10.0.0.2:2222
      started: true
      pid: 4242
      sent_at: 1796000000.123
      answered_at: 1796000000.131
      error: null
failed_workers:
  description: Indices of the workers that did not start.
  type: list
  elements: int
  returned: always
  sample: []
"""

import socket
import threading
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import (
    GO_FAILED,
    GO_LINE_BYTES,
    GO_MAGIC,
    GO_STARTED,
    printable,
)

RETRY_SECONDS = 0.1


def endpoint_of(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def read_answer(conn: socket.socket, end: float) -> bytes:
    """The supervisor's answer line (without its newline); empty when it closed or said
    nothing before ``end`` (a monotonic time)."""
    data = b""
    while b"\n" not in data and len(data) < GO_LINE_BYTES:
        left = end - time.monotonic()
        if left <= 0:
            break
        conn.settimeout(left)
        try:
            chunk = conn.recv(GO_LINE_BYTES - len(data))
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    return data.split(b"\n", 1)[0]


def not_started(worker: dict, error: str | None = None) -> dict:
    """A worker's result entry before (or without) its go: not started, with ``error``."""
    return {
        "index": int(worker["index"]), "host": str(worker.get("host", "")),
        "endpoint": endpoint_of(str(worker["address"]), int(worker["port"])),
        "started": False, "pid": None, "sent_at": None, "answered_at": None, "error": error,
    }  # fmt: skip


def go(worker: dict, token: str, timeout: float) -> dict:
    """Send one worker its go and read its answer: the worker's result entry."""
    address, port = str(worker["address"]), int(worker["port"])
    result = not_started(worker)
    end = time.monotonic() + timeout
    error = "no attempt was made"
    while True:
        try:
            conn = socket.create_connection((address, port), timeout=max(0.05, end - time.monotonic()))
        except ConnectionRefusedError as exc:
            error = f"connection refused ({exc.strerror or exc}): no armed supervisor listens there"
            if time.monotonic() + RETRY_SECONDS < end:
                time.sleep(RETRY_SECONDS)
                continue
            break
        except OSError as exc:
            error = f"cannot connect: {exc.strerror or exc}"
            break
        try:
            result["sent_at"] = time.time()
            conn.sendall(GO_MAGIC + token.encode("utf-8") + b"\n")
            answer = read_answer(conn, end)
            error = (
                f"no answer within {timeout:g} s: the supervisor there did not take this run's go"
                if time.monotonic() >= end
                else "the connection was closed without an answer: the supervisor there did not take this "
                "run's go (another run's, or not armed)"
            )
        except OSError as exc:
            answer, error = b"", f"the go could not be sent: {exc.strerror or exc}"
        finally:
            conn.close()
        result["answered_at"] = time.time() if answer else None
        if answer.startswith(GO_STARTED):
            pid = answer[len(GO_STARTED) :].strip()
            result.update(started=True, pid=int(pid) if pid.isdigit() else None)
            return result
        if answer.startswith(GO_FAILED):
            error = "its supervisor could not start the job: " + answer[len(GO_FAILED) :].decode("utf-8", "replace")
        elif answer:
            error = "it answered something other than a supervisor: " + answer[:80].decode("utf-8", "replace")
        break
    result["error"] = printable(error)
    return result


def go_all(workers: list[dict], token: str, timeout: float) -> list[dict]:
    """Every worker's go, sent from threads started together; results in index order."""
    results: list[dict | None] = [None] * len(workers)

    def one(i: int) -> None:
        try:
            results[i] = go(workers[i], token, timeout)
        except Exception as exc:  # noqa: BLE001 - every worker must get a result
            results[i] = not_started(workers[i], printable(f"the go failed: {type(exc).__name__}: {exc}"))

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(workers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sorted((r for r in results if r is not None), key=lambda r: r["index"])


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "workers": {"type": "list", "elements": "dict", "required": True},
            "token": {"type": "str", "required": True, "no_log": True},
            "timeout": {"type": "float", "default": 10},
        },
        supports_check_mode=True,
    )
    params = module.params
    try:
        workers = [
            {"index": int(w["index"]), "address": str(w["address"]), "port": int(w["port"]), "host": w.get("host", "")}
            for w in params["workers"]
        ]
    except (KeyError, TypeError, ValueError) as exc:
        module.fail_json(msg=f"cannot send the go: a worker lacks its index, address or port: {exc}")
    if not params["token"]:
        module.fail_json(msg="cannot send the go: the token is empty")
    if module.check_mode:
        module.exit_json(
            changed=False,
            workers=[{**w, **not_started(w)} for w in workers],
            failed_workers=[],
            msg=f"would send the go to {len(workers)} worker(s)",
        )  # fmt: skip
    results = go_all(workers, params["token"], max(0.1, params["timeout"]))
    for result in results:
        if result["error"]:
            module.warn(f"host {result['host']}: worker {result['index']} ({result['endpoint']}): {result['error']}")
    module.exit_json(
        changed=any(r["started"] for r in results),
        workers=results,
        failed_workers=[r["index"] for r in results if not r["started"]],
    )


if __name__ == "__main__":
    main()
