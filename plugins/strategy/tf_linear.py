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
the workers' CPU. Everything else is the linear strategy's.
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
  - The project's ansible.cfg selects it (C(strategy)); C(ANSIBLE_STRATEGY) or a play's
    C(strategy) keyword still choose another.
author: tf-runbook contributors (!UNKNOWN)
"""

import queue
import threading
from collections import deque
from typing import Any

from ansible.errors import AnsibleError
from ansible.plugins.strategy.linear import StrategyModule as LinearStrategyModule
from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils import tf_template_cache

# How often, at the least, the main loop wakes while a task runs: to see a worker process
# that died without a result, as the linear strategy's every loop does.
DEAD_WORKER_CHECK_SECONDS = 0.05


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


class StrategyModule(LinearStrategyModule):
    def __init__(self, tqm: Any) -> None:
        super().__init__(tqm)
        # Replaced before any task is queued: no result nor request can be pending yet.
        self._tf_news = threading.Event()
        self._results = _Announcing(self._tf_news)
        self._rpc_queue = _AnnouncingQueue(self._tf_news)
        self._tf_templates_kept = tf_template_cache.install()

    def _queue_task(self, host: Any, task: Any, task_vars: Any, play_context: Any) -> None:
        """As the linear strategy's, after compiling in this process what the task's worker
        will compile, so that the worker forked for each host finds it compiled."""
        if self._tf_templates_kept:
            tf_template_cache.warm(self._loader, task, task_vars)
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
