"""Write one of the run's records on the controller, in the task's own process (issue 42).

The restart path's records (the decision, ``attempt-N.json``; what the checkpoint copy
moved) and the removal of the copy's archive were each a module started on the
controller (``ansible.builtin.copy``, ``ansible.builtin.file`` delegated to localhost):
about half a second of the controller's CPU and of the restart's wall each (see
docs/architecture.md, Cost rules, 4). This action does the same in the worker process
that runs the task: the record written whole (a temporary file renamed over it) with
mode 0600, and the paths of ``remove`` removed. Its options and results are documented
in plugins/modules/tf_run_record.py (a documentation-only module).
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_controller_action import ControllerAction

# The options (documented in plugins/modules/tf_run_record.py, the documentation-only module).
ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "path": {"type": "path", "default": ""},
    "content": {"type": "raw"},
    "remove": {"type": "list", "elements": "path", "default": []},
}


def write_record(path: str, content: Any) -> None:
    """``content`` as JSON into ``path`` (as ``to_nice_json`` writes it, and a newline),
    mode 0600, whole or not at all; its directory must exist."""
    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):
        raise AnsibleActionFail(f"cannot write the record {path}: its directory {directory} does not exist")
    text = json.dumps(content, indent=4, sort_keys=True, separators=(",", ": "), ensure_ascii=False) + "\n"
    temporary = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    try:
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, 0o600)
        os.replace(temporary, path)
    except (OSError, TypeError, ValueError) as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise AnsibleActionFail(f"cannot write the record {path}: {exc}") from exc


def remove_paths(paths: list[str]) -> list[str]:
    """Remove each file of ``paths`` (a missing one is no error); those removed."""
    removed = []
    for path in paths:
        try:
            os.unlink(path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise AnsibleActionFail(f"cannot remove {path} on the controller: {exc}") from exc
        removed.append(path)
    return removed


def record(path: str, content: Any, remove: list[str], check: bool = False) -> dict[str, Any]:
    """The action's work: write ``content`` into ``path`` (when given), then remove
    ``remove``; nothing is written or removed in check mode."""
    if path and content is None:
        raise AnsibleActionFail(f"the record {path} has no content")
    if check:
        return {"changed": bool(path or remove), "path": path, "removed": []}
    if path:
        write_record(path, content)
    removed = remove_paths(remove)
    return {"changed": bool(path or removed), "path": path, "removed": removed}


class ActionModule(ControllerAction):
    ARGUMENT_SPEC = ARGUMENT_SPEC

    def work(self, args: dict[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        return record(args["path"] or "", args.get("content"), args["remove"] or [],
                      check=bool(self._task.check_mode))
