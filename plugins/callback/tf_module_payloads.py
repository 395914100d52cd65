# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Build the payloads of the modules a run sends to its hosts, in the background, as the
playbook starts.

Ansible packs a module with every module_util it imports (an AnsiballZ payload) the first
time a task of the playbook run sends it, and keeps it in the run's own temporary
directory for the rest of the run. Packing parses each module_util it finds: 0.10 to
0.15 s of the controller's CPU for each of this collection's modules, measured, and all on
the critical path, since the first task to send a module waits for it (at 64 hosts every
host of that task waits on the one that packs it). The preflight's probe, the launch and
the wait each pay it once per run.

This callback, enabled in the project's ansible.cfg, forks one process when the playbook
starts, while the first plays' controller tasks run: it packs the modules of
``modules`` in the order the run sends them, into the cache Ansible's own workers read
(the same function, ``modify_module``, and the same lock, so a worker that needs a module
still being packed waits for it instead of packing it twice). Nothing else changes: a
module that is not packed in time, or not at all (a failure here is silent), is packed by
the worker that sends it, as without this callback. When the playbook ends, a packer still
running is stopped and reaped.
"""

from __future__ import annotations

DOCUMENTATION = """
name: tf_module_payloads
type: aggregate
short_description: pack the run's modules in the background as the playbook starts
description:
  - When the playbook starts, a forked process builds the AnsiballZ payload of each module
    in O(modules), in order, into this ansible-playbook run's payload cache, while the
    first plays' controller tasks run. The workers that send these modules then find them
    packed. A module not packed in time is packed by its first task, as without this
    callback; a failure to pack is silent.
  - Enabled by the project's ansible.cfg (C(callbacks_enabled)); a project that uses the
    collection enables it in its own configuration, or goes without it (only slower).
options:
  modules:
    description:
      - The modules to pack, as fully qualified names, in the order the run first sends
        them. The default is the train playbook's (preflight host look, launch, go, wait).
    type: list
    elements: str
    default:
      - tf_runbook.multiworker.tf_preflight_host
      - tf_runbook.multiworker.tf_worker_launch
      - tf_runbook.multiworker.tf_worker_go
      - tf_runbook.multiworker.tf_worker_wait
    env:
      - name: TF_RUNBOOK_PAYLOAD_MODULES
    ini:
      - section: tf_module_payloads
        key: modules
"""

import atexit
import os
import signal
from typing import Any

from ansible import constants as C
from ansible.executor.module_common import modify_module
from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import module_loader
from ansible.template import Templar

# The interpreter named to the packer: the payload itself does not depend on it, and an
# explicit one keeps modify_module from asking for interpreter discovery on a host.
PACKING_VARS = {"ansible_python_interpreter": "/usr/bin/python3"}


def pack(names: list[str]) -> list[str]:
    """Pack each module of ``names`` into this run's payload cache (Ansible's
    ``modify_module``, as a worker calls it); the names packed, in order. A name that
    does not resolve to a Python module, or that fails to pack, is left out."""
    compression = C.config.get_config_value("DEFAULT_MODULE_COMPRESSION")
    templar = Templar(loader=None, variables=dict(PACKING_VARS))
    packed = []
    for name in names:
        try:
            found = module_loader.find_plugin_with_context(name, mod_type=".py")
            if not found.resolved or not found.plugin_resolved_path:
                continue
            modify_module(
                module_name=found.resolved_fqcn or name,
                module_path=found.plugin_resolved_path,
                module_args={},
                templar=templar,
                task_vars=dict(PACKING_VARS),
                module_compression=compression,
            )
        except Exception:  # noqa: BLE001 - the worker packs it instead, and says why if it cannot
            continue
        packed.append(name)
    return packed


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "tf_runbook.multiworker.tf_module_payloads"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._packer: int | None = None

    def v2_playbook_on_start(self, playbook: Any) -> None:
        if self._packer is not None:  # a second playbook of the same command line
            return
        names = [str(name) for name in self.get_option("modules") or []]
        if not names:
            return
        try:
            pid = os.fork()
        except OSError:
            return
        if pid == 0:  # the packer: never returns into Ansible
            try:
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                # Below the controller's own processes: it has about half a second
                # before the first module is sent, and needs a tenth of it per module.
                os.nice(10)
                pack(names)
            finally:
                os._exit(0)
        self._packer = pid
        atexit.register(self._end_packer)

    def _end_packer(self) -> None:
        """Stop a packer still at work (a playbook that ended within a second) and reap
        it, before Ansible removes the run's temporary directory."""
        if self._packer is None:
            return
        pid, self._packer = self._packer, None
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            os.waitpid(pid, 0)
        except OSError:
            pass
