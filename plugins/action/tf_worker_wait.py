# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Wait for one host's workers, print their progress, react to other hosts' failures, and
bring the host's files when all of its workers succeeded.

The module of the same name waits on the worker host for news and reports its workers.
This action runs on the controller and repeats it until the host's workers have exited,
one of them failed, the deadline passed, the run stalled, or another host reported a
failure: a per-host retry loop alone cannot see that a peer failed, and TensorFlow itself
would keep a worker waiting for a missing peer for up to an hour. What it decides on the
controller (the attempt's failure flag, the stall watchdog, the deadline on the
controller's clock, whether the files come now) is module_utils/tf_wait_control.py; what
it prints, module_utils/tf_status_lines.py.

The wait also collects: the module run that ends with every worker of the host exited 0
packs the host's collect bundle (option ``collect``), and this action fetches and unpacks
it under the run's controller directory, ``<host>/``, exactly as the collect's action does
(module_utils/tf_bundle.py), so that the collect phase costs no module run on such a host.
Only while the run is healthy: not for a detached wait, nor once another host has flagged
a failure (the collect fetches everything after a failure).

A ParameterServerStrategy run (option ``coordinator``) ends when its chief ends: the wait
of the chief's host records that the chief exited 0, and the wait of every host with
servers still running stops them through tf_worker_stop (stopped by the runbook, cause
``stopped``) and waits one more window for their exit records (tf_wait_control).

Its options are documented in plugins/modules/tf_worker_wait.py.
"""

from __future__ import annotations

import os
import tarfile
import time
from typing import Any

from ansible.errors import AnsibleConnectionFailure, AnsibleError
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_activity import frozen_entry, frozen_since
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_bundle import receive
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_causes import (
    evaluator_lost_text,
    host_lost_flag,
    only_optional_evaluator,
)
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_json_list import json_list
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import WORKER_PREFIX, printable
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_status_lines import (
    REPRINT_SECONDS,
    progress_lines,
    task_labels,
)
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_wait_control import (
    StallWatch,
    attempt_paths,
    bring_bundle,
    coordinator_ended,
    coordinator_path,
    deadline_passed,
    read_flag,
    server_stop_args,
    servers_left,
    write_flag,
)

display = Display()

# The options only this action reads (documented in plugins/modules/tf_worker_wait.py).
ACTION_ONLY = (
    "controller_dir", "attempt", "rounds", "until_joined", "deadline", "stall_timeout", "coordinator", "task_types",
    "evaluator_required",
)


class ActionModule(ActionBase):
    """Controller-side loop around the tf_worker_wait module."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(ACTION_ONLY + ("workers", "run_dir", "collect", "wait", "progress_pattern", "progress_marks"))

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        options = {name: args.pop(name, None) for name in ACTION_ONLY}
        host = task_vars.get("inventory_hostname", "?") if task_vars else "?"
        try:
            options["task_types"] = json_list(options["task_types"], "task_types", str)
        except ValueError as exc:
            return {**result, "failed": True, "msg": f"host {host}: {exc}"}
        controller_dir = os.path.expanduser(str(options["controller_dir"])) if options["controller_dir"] else ""
        flag_file, stall_dir = attempt_paths(controller_dir, options["attempt"]) if controller_dir else (None, None)
        rounds = int(options["rounds"] or 100000) if flag_file else 1
        until_joined = bool(options["until_joined"])
        if until_joined or not flag_file:
            # A detached wait leaves the run running; a single check ends nothing.
            args.pop("collect", None)
        # The deadline is a controller time: it never goes to the host, whose clock may
        # differ; the host only reports, and the deadline is judged here.
        deadline = options["deadline"] or 0
        stall_timeout = int(options["stall_timeout"] or 0)
        # tf_stall_timeout 0: no watchdog, no record.
        watching = bool(flag_file and stall_dir and stall_timeout > 0)
        watch = StallWatch(stall_dir, host, stall_timeout) if watching else None
        # A ParameterServerStrategy run attached to this wait: the chief's end ends it.
        attached = bool(flag_file and options["coordinator"] and not until_joined)
        ended_file = coordinator_path(controller_dir, options["attempt"]) if attached else None
        servers_stopped: dict[str, Any] | None = None
        tasks = task_labels(options["task_types"])
        started = time.monotonic()
        last_shown: list[Any] = []
        last_printed = time.monotonic()
        status: dict[str, Any] = {}
        # Per worker, since when (controller clock) its job is seen frozen.
        frozen: dict[str, dict[str, Any]] = {}
        # This worker process's parent is ansible-playbook's main process. A worker is a
        # session of its own, so a SIGKILL of ansible-playbook (the OOM killer, kill -9)
        # leaves it running: it must then stop renewing the controller heartbeat, or the
        # supervisors would never see the controller go (tf_controller_timeout).
        controller = os.getppid()
        for _round in range(rounds):
            if os.getppid() != controller:
                return {**result, **status, "failed": True, "controller_gone": True,
                        "msg": f"host {host}: the wait stopped: ansible-playbook (pid {controller}) ended, so "
                               "nothing renews the controller heartbeat any more"}
            try:
                status = self._execute_module(
                    module_name="tf_runbook.multiworker.tf_worker_wait",
                    module_args=args,
                    task_vars=task_vars,
                )
            except AnsibleConnectionFailure as exc:
                # A host that runs only the sidecar evaluator, not required: reported, and
                # the training goes on (no flag); any other lost host fails the attempt.
                indices = [w.get("index") for w in args.get("workers") or [] if isinstance(w, dict)]
                optional = only_optional_evaluator(options["task_types"], indices, options["evaluator_required"])
                flag = host_lost_flag(host, exc, optional)
                if flag_file and flag is not None:
                    write_flag(flag_file, flag)
                elif flag_file:
                    display.display(f"  {evaluator_lost_text(host)}")
                raise
            if status.get("failed"):
                return {**result, **status}
            now = time.time()
            args["progress_marks"] = status.get("progress_marks") or {}
            frozen = frozen_since(frozen, status.get("workers", []), now)
            for worker in status.get("workers", []):
                worker["frozen"] = frozen_entry(frozen, worker, now)
                if tasks.get(worker.get("index")):
                    worker["task"] = tasks[worker["index"]]
            status["deadline_passed"] = deadline_passed(deadline, now)
            # Print only news: the same epoch with other times is not news, but a long
            # epoch's times are shown again every REPRINT_SECONDS.
            lines, news = progress_lines(host, status, time.monotonic() - started if flag_file else None, now)
            if news != last_shown or time.monotonic() - last_printed >= REPRINT_SECONDS:
                for line in lines:
                    display.display(line)
                last_shown, last_printed = news, time.monotonic()
            if ended_file and not status.get("failed_workers") and coordinator_ended(status) and read_flag(flag_file) is None:
                write_flag(ended_file, {"host": host, "at": now})
            if not flag_file or self._ends_wait(status, until_joined):
                break
            if status.get("failed_workers"):
                write_flag(flag_file, {"host": host, "workers": status["failed_workers"], "reason": "worker failed"})
                break
            stall = watch.check(status.get("workers", []), now) if watch else None
            if stall is not None:
                stalled_for, detail = stall
                flag = {"host": host, "cause": "stalled", "reason": detail, "seconds": round(stalled_for), "workers": []}
                # Another host may have flagged first (a stall too, or a failure): then its
                # flag is read below, as any peer's.
                if write_flag(flag_file, flag):
                    status["stalled"] = {"seconds": round(stalled_for), "detail": detail}
                    display.display(f"  {host}: the run is stalled: {detail}")
                    break
            peer = read_flag(flag_file)
            if peer is not None and peer.get("host") != host:
                status["peer_failed"] = peer
                display.display(f"  {host}: stops waiting, {peer.get('host')} reported: {printable(peer.get('reason'))}")
                break
            if ended_file and servers_stopped is None and servers_left(status) and read_flag(ended_file) is not None:
                # Checked after the failure flag: a server that died before the chief
                # ended is a failure, never stopped as if the run had ended well.
                servers_stopped = self._stop_servers(str(args["run_dir"]), task_vars, host, servers_left(status))
        if servers_stopped is not None:
            status["servers_stopped"] = servers_stopped
        if flag_file and bring_bundle(status, read_flag(flag_file), until_joined):
            status.update(self._bring(status["bundle"], os.path.join(controller_dir, host), host))
        status.pop("bundle", None)
        result.update(status)
        result["changed"] = False
        return result

    def _stop_servers(self, run_dir: str, task_vars: dict[str, Any] | None, host: str, left: list[int]) -> dict[str, Any]:
        """Stop this host's servers once the coordinator ended, through the runbook's stop
        (tf_worker_stop); its result (the next window reads their exit records)."""
        workers = ", ".join(f"{WORKER_PREFIX}{i}" for i in left)
        display.display(f"  {host}: the coordinator ended: stopping the servers {workers}")
        stopped = self._execute_module(
            module_name="tf_runbook.multiworker.tf_worker_stop", module_args=server_stop_args(run_dir), task_vars=task_vars
        )
        if stopped.get("failed"):
            display.warning(f"host {host}: could not stop the servers: {stopped.get('msg')}")
        return {"workers": left, "failed": bool(stopped.get("failed")), "msg": stopped.get("msg")}

    @staticmethod
    def _ends_wait(status: dict[str, Any], until_joined: bool) -> bool:
        """Whether this host's wait is over with no failure to flag: every worker exited
        0, the deadline passed, or a detached run's workers all joined."""
        if status.get("failed_workers"):
            return False
        return bool(status.get("done") or status.get("deadline_passed") or (until_joined and status.get("joined")))

    def _bring(self, bundle: dict[str, Any], dest: str, host: str) -> dict[str, Any]:
        """Fetch and unpack the host's bundle under ``dest`` (nothing to fetch when no file
        matched): ``collected`` as the collect's action reports it; ``bundle_error`` when it
        could not be brought (the collect fetches the host's files then)."""
        try:
            updated = receive(self._connection.fetch_file, bundle, dest) if bundle.get("bundle") else []
        except (AnsibleError, OSError, tarfile.TarError) as exc:
            display.warning(f"host {host}: the wait could not bring its files ({exc}); the collect fetches them")
            return {"bundle_error": f"cannot bring the collect bundle {bundle.get('bundle')}: {exc}"}
        return {
            "collected": {
                "files": bundle.get("files", []), "left_out": bundle.get("left_out", []),
                "truncated": bundle.get("truncated", []), "updated": updated, "dest": dest,
            }
        }
