# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible's linear strategy, woken by its results instead of polling for them.

While a task runs, the linear strategy's main loop looks for results every
``internal_poll_interval`` (1 ms by default), and each look asks every worker process
whether it died (one ``waitpid`` each). A runbook task can run for hours (the wait), on up
to 128 hosts at once: measured on this project's 2-core machine, the main process of a
playbook used 4 % of a core while a one-host task slept, and one such look over 128 live
workers cost 83 microseconds, 8 % of a core at 1000 looks a second. That CPU is taken
from the training on a one-host run, and grows with the hosts times the run's length on a
large one. This strategy sleeps until the result thread hands it a result (or a worker's
request to the controller, an ``add_host``), and looks for dead workers every
``DEAD_WORKER_CHECK_SECONDS``.

It also keeps the Jinja templates it compiles (plugin_utils/tf_template_cache.py): before
it forks a task's worker for its second host and each one after, it compiles what that
worker will compile, so that the task's workers inherit them compiled instead of each
compiling them again; measured on 16 namespace hosts, compiling had been about 40 % of
the workers' CPU. The filters and tests those templates call are found then too, once
(plugin_utils/tf_plugin_lookup_cache.py: Ansible searches a collection's plugin files for
a filter each time a new Jinja environment asks for it). Everything else is the linear
strategy's.
"""

from __future__ import annotations

DOCUMENTATION = """
name: tf_linear
short_description: the linear strategy, woken by results instead of polling every millisecond
description:
  - Runs a play exactly as Ansible's C(linear) strategy does (each task on every host before
    the next), but waits for task results without polling; the thread that receives them
    wakes the main loop, which otherwise sleeps, and checks for dead worker processes
    every 0.05 s rather than every C(internal_poll_interval) (1 ms).
  - Keeps the Jinja templates and conditionals it compiles, and compiles those of a task's
    arguments, conditionals and the variables they name once, before it forks the task's
    workers from its second host on; the workers inherit them instead of each compiling
    them again.
  - Keeps the collection filters and tests it finds, and finds those that the templates
    of a task call before it forks the task's workers from its second host on; the
    workers inherit them instead of each searching the collection's plugin files again.
  - The project's ansible.cfg selects it (C(strategy)); C(ANSIBLE_STRATEGY) or a play's
    C(strategy) keyword still choose another.
author: tf-runbook contributors (!UNKNOWN)
"""

import queue
import threading
from collections import deque
from typing import Any

from ansible import constants as C
from ansible.errors import AnsibleError
from ansible.plugins.strategy.linear import StrategyModule as LinearStrategyModule
from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils import tf_plugin_lookup_cache, tf_template_cache

# How often, at the least, the main loop wakes while a task runs: to see a worker process
# that died without a result, as the linear strategy's every loop does.
DEAD_WORKER_CHECK_SECONDS = 0.05

# Meta actions whose run reads no variable but those of its own conditional, which
# _execute_meta computes itself (reset_connection computes all of a host's, and is left out;
# refresh_inventory, which reads none, too, being rare).
META_WITHOUT_VARIABLES = frozenset({"noop", "flush_handlers", "role_complete", "end_role", "end_host", "end_play",
                                    "end_batch", "clear_facts", "clear_host_errors"})


def reads_no_variables(task: Any) -> bool:
    """Whether the linear strategy's main loop needs none of a host's variables for
    ``task``: a meta task (its action written as such, not templated) of
    META_WITHOUT_VARIABLES, whose any_errors_fatal is not a template either. The loop only
    templates those two with them, then runs the meta task (_execute_meta)."""
    try:
        return (task.action in C._ACTION_META and task._get_meta() in META_WITHOUT_VARIABLES
                and not isinstance(task.any_errors_fatal, str))
    except Exception:  # noqa: BLE001 - anything unexpected gets the variables, as before
        return False


class _Announcing(deque):
    """The strategy's result list: each result the result thread appends wakes the main loop."""

    def __init__(self, news: threading.Event) -> None:
        super().__init__()
        self._news = news

    def append(self, x: Any) -> None:
        super().append(x)
        self._news.set()


class _AnnouncingQueue(queue.Queue):
    """The queue of the workers' requests to the controller (add_host, group_by): each one
    wakes the main loop, which serves it while the worker waits."""

    def __init__(self, news: threading.Event) -> None:
        super().__init__()
        self._news = news

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        super().put(item, block, timeout)
        self._news.set()


class _LoopVariables:
    """The variable manager, as the strategy's main loop sees it: where the loop asks for a
    host's variables to run a meta task that reads none (``reads_no_variables``), it gets an
    empty dict; everywhere else, and inside the meta task's own run (its conditional), the
    manager's. Every other attribute is the manager's own."""

    def __init__(self, manager: Any, strategy: Any) -> None:
        object.__setattr__(self, "_tf_manager", manager)
        object.__setattr__(self, "_tf_strategy", strategy)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tf_manager, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._tf_manager, name, value)

    def get_vars(self, *args: Any, **kwargs: Any) -> Any:
        task = kwargs.get("task")
        if task is not None and not self._tf_strategy._tf_in_meta and reads_no_variables(task):
            return {}
        return self._tf_manager.get_vars(*args, **kwargs)


class StrategyModule(LinearStrategyModule):
    def __init__(self, tqm: Any) -> None:
        super().__init__(tqm)
        # Replaced before any task is queued: no result nor request can be pending yet.
        self._tf_news = threading.Event()
        self._results = _Announcing(self._tf_news)
        self._rpc_queue = _AnnouncingQueue(self._tf_news)
        self._tf_templates_kept = tf_template_cache.install()
        self._tf_plugins_kept = tf_plugin_lookup_cache.install()
        # The main loop makes every host's variables for every task, meta tasks included,
        # and a meta task reads none of them (its conditional makes its own): measured on
        # 16 hosts, 597 of the 995 makings of a run, 1.2 ms each.
        self._tf_in_meta = 0
        if self._variable_manager is not None:
            self._variable_manager = _LoopVariables(self._variable_manager, self)

    def _execute_meta(self, task: Any, play_context: Any, iterator: Any, target_host: Any) -> Any:
        """As the linear strategy's; the variables it asks for are the host's own."""
        self._tf_in_meta += 1
        try:
            return super()._execute_meta(task, play_context, iterator, target_host)
        finally:
            self._tf_in_meta -= 1

    def _queue_task(self, host: Any, task: Any, task_vars: Any, play_context: Any) -> None:
        """As the linear strategy's, after compiling in this process what the task's worker
        will compile, so that the worker forked for each host finds it compiled."""
        if self._tf_templates_kept:
            names: set[str] = set()
            tf_template_cache.warm(self._loader, task, task_vars, names)
            if self._tf_plugins_kept:
                tf_plugin_lookup_cache.prefetch(names)
        super()._queue_task(host, task, task_vars, play_context)

    def _wait_on_pending_results(self, iterator: Any) -> list:
        """The results of the tasks queued, once none is pending: as the linear strategy's,
        but asleep until a result or a request arrives (or DEAD_WORKER_CHECK_SECONDS)."""
        results: list = []
        while self._pending_results > 0 and not self._tqm._terminated:
            if self._tqm.has_dead_workers():
                raise AnsibleError("A worker was found in a dead state")
            # Cleared before the results are read: one that arrives after the read sets it again.
            self._tf_news.clear()
            results.extend(self._process_pending_results(iterator))
            if self._pending_results > 0:
                self._tf_news.wait(DEAD_WORKER_CHECK_SECONDS)
        return results
