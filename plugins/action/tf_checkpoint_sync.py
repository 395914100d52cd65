"""Bring the chief's checkpoint through the controller: pack and fetch, send and unpack.

The module of the same name does each step's work on the host; this action moves the
archive: with ``mode: pack`` it gives the module the space free where the archive lands on
the controller (``dest``'s directory), so that every refusal comes before anything is
packed, and fetches the archive the module made beside the chief's checkpoint directory;
with ``mode: unpack`` it sends the controller's ``src`` beside the host's checkpoint
directory first (the same filesystem as the files it stages, whose space the look
measured; not the remote user's Ansible tmp). The archive on a host is removed at the
task's end, whatever happened. Its options and results are documented in the module
(plugins/modules/tf_checkpoint_sync.py).
"""

from __future__ import annotations

import os
import uuid
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_checkpoint_copy import free_bytes
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import CHECKPOINT_ARCHIVE_PREFIX

MODULE = "tf_runbook.multiworker.tf_checkpoint_sync"


def private_file(path: str) -> None:
    """Make ``path``'s directory (0700) and leave no wider mode on the file."""
    os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
    if os.path.exists(path):
        os.chmod(path, 0o600)


class ActionModule(ActionBase):
    """The module's step, with the archive's transfer around it."""

    _requires_connection = True

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        args.setdefault("host", str((task_vars or {}).get("inventory_hostname", "")))
        mode = args.get("mode")
        if mode not in ("pack", "unpack") or self._task.check_mode:
            return {**result, **self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars)}
        remote_tmp = self._make_tmp_path()
        try:
            if mode == "pack":
                return {**result, **self._pack(args, task_vars or {}, remote_tmp)}
            return {**result, **self._unpack(args, task_vars or {}, remote_tmp)}
        finally:
            self._remove_tmp_path(remote_tmp, force=True)

    def _pack(self, args: dict[str, Any], task_vars: dict[str, Any], remote_tmp: str) -> dict[str, Any]:
        dest = args.pop("dest", None)
        if not dest and args.get("copy", True):
            raise AnsibleActionFail("tf_checkpoint_sync: mode pack needs dest, the archive's path on the controller")
        self._fixup_perms2((remote_tmp,))
        landing = os.path.dirname(os.path.abspath(dest)) if dest else ""
        args = {**args, "controller_dir": landing, "controller_free": free_bytes(landing) if landing else -1}
        packed = self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars)
        if packed.get("failed") or not packed.get("archive"):
            return packed
        try:
            private_file(dest)
            self._connection.fetch_file(packed["archive"], dest)
            os.chmod(dest, 0o600)
        finally:
            self._remove_remote(packed["archive"])
        return {**packed, "archive": dest}

    def _unpack(self, args: dict[str, Any], task_vars: dict[str, Any], remote_tmp: str) -> dict[str, Any]:
        src = args.get("src")
        if not src or not os.path.isfile(src):
            raise AnsibleActionFail(f"tf_checkpoint_sync: the archive {src!r} is not a file on the controller")
        remote = self._connection._shell.join_path(args["dir"], f"{CHECKPOINT_ARCHIVE_PREFIX}{uuid.uuid4().hex}.tar")
        self._fixup_perms2((remote_tmp,))
        try:
            self._transfer_file(src, remote)
            return self._execute_module(module_name=MODULE, module_args={**args, "archive": remote},
                                        task_vars=task_vars)  # fmt: skip
        finally:
            self._remove_remote(remote)

    def _remove_remote(self, path: str) -> None:
        """Remove the archive on the host (beside its checkpoint directory), as the user the
        module ran as: one shell command, as ActionBase removes its tmp, not a module run."""
        removed = self._low_level_execute_command(self._connection._shell.remove(path), sudoable=True)
        if removed.get("rc") != 0:
            raise AnsibleActionFail(f"tf_checkpoint_sync: cannot remove the archive {path}: {removed.get('stderr')}")
