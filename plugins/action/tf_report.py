"""Write a run's report.html from its summary.json, on the controller.

The layout (chart and timeline geometry) is the ``tf_report_view`` filter of this role;
this action reads summary.json, applies it and renders the template with Jinja2 directly.
Rendering the same page through the template module costs seconds for a large run
(32 workers x 200 epochs), because Ansible wraps and inspects every value of a
one-megabyte summary; here it takes a fraction of a second. Its options and results are
documented in plugins/modules/tf_report.py (a documentation-only module).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import jinja2
from ansible.errors import AnsibleActionFail

from ansible_collections.tf_runbook.multiworker.plugins.filter.tf_report import tf_report_view
from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_controller_action import ControllerAction

# The options (documented in plugins/modules/tf_report.py, the documentation-only module).
ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "summary": {"type": "path", "required": True},
    "template": {"type": "path", "required": True},
    "dest": {"type": "path", "required": True},
}


def render_report(summary: dict[str, Any], template_text: str) -> str:
    """The report page for ``summary`` (the template module's settings: trim_blocks)."""
    env = jinja2.Environment(trim_blocks=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    template = env.from_string(template_text)
    return template.render(__tf_verdict_report=tf_report_view(summary))


def write_report(summary_path: str, template_path: str, dest: str) -> dict[str, Any]:
    """Render and write the report atomically (0600); return its path, size and time."""
    started = time.perf_counter()
    try:
        with open(summary_path, encoding="utf-8") as handle:
            summary = json.load(handle)
    except (OSError, ValueError) as exc:
        raise AnsibleActionFail(f"tf_report: cannot read the run's summary {summary_path}: {exc}") from exc
    try:
        template_text = Path(template_path).read_text(encoding="utf-8")
    except OSError as exc:
        raise AnsibleActionFail(f"tf_report: cannot read the report template {template_path}: {exc}") from exc
    page = render_report(summary, template_text)
    directory = os.path.dirname(os.path.abspath(dest))
    fd, tmp = tempfile.mkstemp(prefix=".report.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(page)
        os.chmod(tmp, 0o600)
        os.replace(tmp, dest)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return {"path": dest, "bytes": len(page.encode()), "seconds": round(time.perf_counter() - started, 3)}


class ActionModule(ControllerAction):
    ARGUMENT_SPEC = ARGUMENT_SPEC

    def work(self, args: dict[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        template = self._find_needle("templates", args["template"])
        if self._task.check_mode:
            return {"changed": True, "path": args["dest"], "msg": "check mode: the report would be written"}
        return {**write_report(args["summary"], template, args["dest"]), "changed": True}
