# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Keep Python's garbage collector off the parsed playbook, once it is loaded.

ansible-playbook's main process holds the parsed playbook (every play, role, block and
task, about 80,000 objects for train.yml) for the whole run, and forks a worker process
for every task of every host. Python's cyclic garbage collector walks every object it
tracks at each full collection, in the main process and in each worker: in the main
process that took 30 to 40 ms per full collection here, and in a worker it writes to
objects inherited from the main process, so the kernel copies each page it touches.
``gc.freeze()`` (Python 3.7 and later, made for processes that fork without exec) moves
every object tracked so far to a permanent generation that collections skip. The parsed
playbook lives until the end of the run anyway; what is already unreachable when it is
frozen (the parse's leftovers) is kept instead of freed, a few megabytes at most.

This callback, enabled in the project's ansible.cfg, freezes them when the playbook
starts, after it is loaded and before the first play forks a worker. It changes nothing a
run does. On this 2-core machine the smoke with a trivial job took 0.11 to 0.14 s less
wall time and 0.14 to 0.18 s less controller CPU (medians of 6 and 8 interleaved runs,
2026-12-05; tests/bench/NOTES.md).
"""

from __future__ import annotations

DOCUMENTATION = """
name: tf_gc_freeze
type: aggregate
short_description: keep the garbage collector off the parsed playbook
description:
  - When the playbook starts (it is loaded, no worker is forked yet), moves every object
    Python's garbage collector tracks in ansible-playbook's main process to its permanent
    generation (C(gc.freeze)), which collections skip, in that process and in every worker
    forked from it. The parsed playbook lives for the whole run; the collector no longer
    walks it, and the workers no longer copy the pages it would touch.
  - Enabled by the project's ansible.cfg (C(callbacks_enabled)); a project that uses the
    collection enables it in its own configuration, or goes without it (only slower).
"""

import gc
from typing import Any

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "tf_runbook.multiworker.tf_gc_freeze"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_start(self, playbook: Any) -> None:
        # Each playbook of the command line: the next one's parse is frozen in turn.
        gc.freeze()
