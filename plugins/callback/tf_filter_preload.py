# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Load the collection's filter files once, in ansible-playbook's main process.

The controller forks a worker process per host for each task, and the first filter of the
collection a worker uses makes it import every filter file of the collection (Ansible looks
a collection's filter up by loading its files in turn): at 32 hosts that was 0.05 to
0.07 s of the controller's CPU per host and task, measured. Loaded in the main process
before the first play forks a worker, they are inherited by every worker instead. This
replaces a never-true ``meta: end_play`` whose condition named a filter of the last file,
which did the same from the preflight playbook and needed a paragraph to be read.
"""

from __future__ import annotations

DOCUMENTATION = """
name: tf_filter_preload
type: aggregate
short_description: load the collection's filter files before the first worker forks
description:
  - When the playbook starts, looks up a filter name that no filter of the collection has,
    so that Ansible loads every filter file of C(tf_runbook.multiworker) in the main process
    (as it would in each worker at its first filter); every worker forked later inherits
    them instead of loading them again.
  - Enabled by the project's ansible.cfg (C(callbacks_enabled)), before C(tf_gc_freeze)
    so that the loaded filters are frozen too; a project that uses the collection enables
    it in its own configuration, or goes without it (only slower).
"""

from typing import Any

from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import filter_loader

COLLECTION = "tf_runbook.multiworker"
# No filter has this name: looking it up loads every filter file of the collection.
NO_SUCH_FILTER = f"{COLLECTION}.__load_every_filter_file__"


def load_filters() -> None:
    """Load every filter file of the collection into the plugin loader's cache."""
    filter_loader.get(NO_SUCH_FILTER)


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "tf_runbook.multiworker.tf_filter_preload"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_start(self, playbook: Any) -> None:
        load_filters()
