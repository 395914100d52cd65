# The bench's callback: enabled only by tests/bench/bench.py (ANSIBLE_CALLBACK_PLUGINS,
# ANSIBLE_CALLBACKS_ENABLED), never by the runbook's configuration.
"""Notes the controller's CPU at each play start, every task result and every module run per host."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: tf_bench
type: aggregate
short_description: benchmark probes of tests/bench/bench.py
description:
  - At each play and task start, the play's file and name (the task's name) and the CPU
    the controller's cgroup has used so far (C(TF_BENCH_CPU_STAT), a cgroup v2 cpu.stat); every task result with its
    host, action and kind; every module an action sends to a host (its host, module and
    task action); written as JSON lines to C(TF_BENCH_EVENTS).
"""


def _usage_usec(path: str) -> int | None:
    try:
        with open(path, encoding="ascii") as stat:
            for line in stat:
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value)
    except OSError:
        return None
    return None


def _count_module_runs(path: str, cls: Any = None) -> None:
    """Note every module an action plugin sends to a host (`ActionBase._execute_module`).

    A task's action may run no module (set_fact, a controller-only action), one, or several
    (an action plugin that polls or fetches): this counts what the hosts ran. The strategy's
    worker processes are forked after the callback loads, so they inherit the wrapper; each
    writes its record with one O_APPEND write, no buffer shared with the parent. `cls`:
    another class that overrides the method (Mitogen's action mixin), else ActionBase.
    """
    if cls is None:
        from ansible.plugins.action import ActionBase as cls
    if getattr(cls.__dict__.get("_execute_module"), "_tf_bench", False) or "_execute_module" not in cls.__dict__:
        return
    original = cls._execute_module

    def execute_module(self: Any, module_name: str | None = None, module_args: Any = None, tmp: Any = None,
                       task_vars: Any = None, *args: Any, **kwargs: Any) -> Any:
        host = (task_vars or {}).get("inventory_hostname") or getattr(self._play_context, "remote_addr", "?")
        record = {"event": "module", "host": host, "module": module_name or self._task.action,
                  "task_action": self._task.action, "t": time.time()}
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, (json.dumps(record) + "\n").encode())
            finally:
                os.close(fd)
        except OSError:
            pass
        return original(self, module_name, module_args, tmp, task_vars, *args, **kwargs)

    execute_module._tf_bench = True  # type: ignore[attr-defined]
    cls._execute_module = execute_module


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "tf_bench"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._stat = os.environ.get("TF_BENCH_CPU_STAT", "")
        path = os.environ.get("TF_BENCH_EVENTS")
        self._out = open(path, "a", encoding="utf-8") if path else None  # noqa: SIM115 - open for the run
        self._path = path
        if path:
            _count_module_runs(path)

    def _emit(self, record: dict[str, Any], flush: bool = False) -> None:
        if self._out is None:
            return
        self._out.write(json.dumps(record) + "\n")
        if flush:
            self._out.flush()

    def _mark(self, event: str, **fields: Any) -> None:
        self._emit({"event": event, "t": time.time(), "cpu_usec": _usage_usec(self._stat), **fields}, flush=True)

    def v2_playbook_on_play_start(self, play: Any) -> None:
        # Mitogen's strategy (loaded after this callback) mixes its own _execute_module into
        # every action: count those too, before the play forks its workers.
        mixins = sys.modules.get("ansible_mitogen.mixins")
        if self._path and mixins is not None and hasattr(mixins, "ActionModuleMixin"):
            _count_module_runs(self._path, mixins.ActionModuleMixin)
        path = play.get_path() or ""
        self._mark("play", file=path.rsplit(":", 1)[0], name=play.get_name())

    def v2_playbook_on_task_start(self, task: Any, is_conditional: bool) -> None:
        self._mark("task", name=task.get_name(), action=task.action)

    def v2_playbook_on_handler_task_start(self, task: Any) -> None:
        self._mark("task", name=task.get_name(), action=task.action)

    def v2_playbook_on_stats(self, stats: Any) -> None:
        self._mark("stats")

    def _result(self, kind: str, result: Any, item: bool = False) -> None:
        task = result._task
        loop = not item and isinstance(result._result, dict) and isinstance(result._result.get("results"), list)
        delegated = (result._result.get("_ansible_delegated_vars") or {}).get("ansible_host") if isinstance(result._result, dict) else None
        self._emit({"event": "result", "kind": kind, "host": result._host.get_name(), "action": task.action,
                    "item": item, "loop": loop, "delegated": delegated, "t": time.time()})

    def v2_runner_on_start(self, host: Any, task: Any) -> None:
        # Sent by the strategy as it hands the task to a worker process for this host: the
        # spread of these over a task's hosts is the controller's dispatch alone.
        self._emit({"event": "start", "host": host.get_name(), "action": task.action, "t": time.time()})

    def v2_runner_on_ok(self, result: Any) -> None:
        self._result("ok", result)

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        self._result("failed", result)

    def v2_runner_on_unreachable(self, result: Any) -> None:
        self._result("unreachable", result)

    def v2_runner_on_skipped(self, result: Any) -> None:
        self._result("skipped", result)

    def v2_runner_item_on_ok(self, result: Any) -> None:
        self._result("ok", result, item=True)

    def v2_runner_item_on_failed(self, result: Any) -> None:
        self._result("failed", result, item=True)

    def v2_runner_item_on_skipped(self, result: Any) -> None:
        self._result("skipped", result, item=True)

    def v2_runner_retry(self, result: Any) -> None:
        self._result("retry", result)

    def v2_runner_on_async_poll(self, result: Any) -> None:
        self._result("poll", result)
