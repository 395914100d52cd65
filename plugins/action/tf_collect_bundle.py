"""Collect one host's files of a run with a single transfer.

The module of the same name packs the run's worker files on the host; this action fetches
the archive and unpacks it on the controller under ``dest``, keeping each file's path
below the run directory. Fetching file by file costs a round trip (and a module run) per
file and host; this costs one per host. The fetch and the unpack are module_utils/tf_bundle.py's
``receive``, which the wait's action (tf_worker_status) uses too when its last status run
brings the bundle. Its options and results are documented in the module
(plugins/modules/tf_collect_bundle.py).
"""

from __future__ import annotations

import os
from typing import Any

from ansible.plugins.action import ActionBase

from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_bundle import receive


class ActionModule(ActionBase):
    """Pack on the host, fetch once, unpack on the controller."""

    _requires_connection = True

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        dest = args.get("dest")
        if not dest:
            return {**result, "failed": True, "msg": "dest is required"}
        packed = self._execute_module(module_name="tf_runbook.multiworker.tf_collect_bundle", module_args=args, task_vars=task_vars)
        if packed.get("failed"):
            return {**result, **packed}
        files = packed.get("files", [])
        left_out = packed.get("left_out", [])
        truncated = packed.get("truncated", [])
        if self._task.check_mode:
            # A dry run fetches nothing and writes nothing under dest: it names what it would fetch.
            preview = "".join(f"{os.path.join(dest, name)}\n" for name in files)
            return {**result, "changed": bool(files), "files": files, "left_out": left_out, "truncated": truncated,
                    "dest": dest,
                    **({"diff": {"before": "", "after": preview, "after_header": dest}} if self._task.diff else {})}
        if not packed.get("bundle"):
            return {**result, "changed": False, "files": files, "left_out": left_out, "truncated": truncated,
                    "dest": dest}
        changed = receive(self._connection.fetch_file, packed, dest)
        return {
            **result, "changed": bool(changed), "files": files, "left_out": left_out, "truncated": truncated,
            "updated": changed, "dest": dest,
        }
