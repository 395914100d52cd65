"""Write a run's report.html from its summary.json, on the controller.

The layout (chart and timeline geometry) is the ``tf_report_view`` filter of this role;
this action reads summary.json, applies it and renders the template with Jinja2 directly.
Rendering the same page through the template module costs seconds for a large run
(32 workers x 200 epochs), because Ansible wraps and inspects every value of a
one-megabyte summary; here it takes a fraction of a second. Its options and results are
documented in plugins/modules/tf_report.py (a documentation-only module).

The report never stops a run from ending: a summary it cannot lay out or a template it
cannot render gives a page that says why (the verdict and summary.json stand), and a
warning, not a failed task.
"""

from __future__ import annotations

import glob
import html
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import jinja2
from ansible.errors import AnsibleActionFail

from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_report_view import tf_report_view
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import (
    CONFIG_FILE,
    EXIT_FILE,
    JOB_END_FILE,
    JOB_ENV_FILE,
    LAUNCH_OUTPUT_FILE,
    LOG_FILE,
    REPORT_FILE,
    RETRY_PREFIX,
    STACKS_FILE,
    STATE_FILE,
    STOP_FILE,
    SUMMARY_FILE,
    WORKER_PREFIX,
    printable,
)
from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_controller_action import ControllerAction

# The options (documented in plugins/modules/tf_report.py, the documentation-only module).
ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "run_dir": {"type": "path"},
    "summary": {"type": "path"},
    "template": {"type": "path", "required": True},
    "dest": {"type": "path"},
    "marker": {"type": "str", "default": ""},
    "inventory": {"type": "list", "elements": "str", "default": []},
    "playbook": {"type": "str", "default": "train.yml"},
}


def report_paths(args: dict[str, Any]) -> tuple[str, str]:
    """The summary to read and the report to write: O(summary) and O(dest) where given,
    else the run directory's own, as the contract names them (tf_run.py)."""
    run_dir = args.get("run_dir")
    summary = args.get("summary") or (os.path.join(run_dir, SUMMARY_FILE) if run_dir else None)
    dest = args.get("dest") or (os.path.join(run_dir, REPORT_FILE) if run_dir else None)
    if not summary or not dest:
        missing = " and ".join(name for name, value in (("summary", summary), ("dest", dest)) if not value)
        raise AnsibleActionFail(f"tf_report needs run_dir, or {missing}")
    return summary, dest


# The culprit's last log lines shown in the report, read from at most the log's last bytes.
LOG_TAIL_LINES = 20
LOG_TAIL_BYTES = 64 * 1024


# How the fallback page shows a check's result.
RESULT_TEXT = {True: "ok", False: "FAIL"}


def log_tail(path: str, lines: int = LOG_TAIL_LINES, limit: int = LOG_TAIL_BYTES) -> list[str]:
    """The last non-blank lines of a log (read from its last ``limit`` bytes, so a log of
    any size costs the same), control characters shown as escapes; [] when unreadable."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(size - limit, 0))
            chunk = handle.read(limit)
    except OSError:
        return []
    text = chunk.decode("utf-8", errors="replace").splitlines()
    if size > limit and text:
        text = text[1:]  # the first line read is cut
    return [printable(line) for line in text if line.strip()][-lines:]


def culprit_log_tails(summary: dict[str, Any], run_dir: str) -> dict[str, list[str]]:
    """Each attempt's culprit's log (its path under ``run_dir``, as the timeline names
    it) -> its last lines. A path that leads out of the run directory is not read."""
    root = os.path.realpath(run_dir)
    tails: dict[str, list[str]] = {}
    for attempt in summary.get("timeline") or []:
        for row in (attempt.get("workers") or []) if isinstance(attempt, dict) else []:
            log = row.get("log") if isinstance(row, dict) and row.get("culprit") else None
            if not isinstance(log, str) or not log:
                continue
            path = os.path.realpath(os.path.join(root, log))
            if os.path.commonpath([root, path]) == root:
                tails[log] = log_tail(path)
    return tails


# What the collect brings of a worker that is the runbook's own record, not the job's
# output (the contract's names).
RECORD_NAMES = frozenset(
    (STATE_FILE, EXIT_FILE, LOG_FILE, CONFIG_FILE, JOB_ENV_FILE, STOP_FILE, LAUNCH_OUTPUT_FILE, STACKS_FILE, JOB_END_FILE)
)


def collected_artifacts(run_dir: str, marker: str = "", limit: int = 1000) -> list[str]:
    """What the collect brought of the job's own output (tf_collect_artifacts, and any
    other file of tf_collect_files that is no record of the runbook's, nor the chief's
    ``marker``), as paths under ``run_dir``: the entries of every host's worker
    directories of every attempt (``<host>/worker-<i>/``, ``<host>/retry-<n>/worker-<i>/``:
    a resumed run's model is under its last attempt's). At most ``limit``; a link is left
    out."""
    root = os.path.realpath(run_dir)
    worker_dirs = sorted(
        glob.glob(os.path.join(glob.escape(root), "*", f"{WORKER_PREFIX}*"))
        + glob.glob(os.path.join(glob.escape(root), "*", f"{RETRY_PREFIX}*", f"{WORKER_PREFIX}*"))
    )
    found: list[str] = []
    for worker_dir in worker_dirs:
        if os.path.islink(worker_dir) or not os.path.isdir(worker_dir):
            continue
        for name in sorted(os.listdir(worker_dir)):
            path = os.path.join(worker_dir, name)
            if name in RECORD_NAMES or name == marker or os.path.islink(path) or len(found) >= limit:
                continue
            found.append(os.path.relpath(path, root))
    return found


def bytecode_cache() -> jinja2.BytecodeCache | None:
    """Jinja2's own cache of compiled templates, in its default place (a directory of this
    user's alone, mode 0700, under the system's temporary directory; None where there is
    none): compiling the report template took 0.045 s of every run's end, rendering it
    almost nothing. A template is compiled again whenever its text changes (the cache is
    keyed by a checksum of the text)."""
    try:
        return jinja2.FileSystemBytecodeCache()
    except (OSError, RuntimeError):
        return None


def render_report(summary: dict[str, Any], template_text: str, log_tails: dict[str, list[str]] | None = None,
                  artifacts: list[str] | None = None, resume: dict[str, Any] | None = None) -> str:  # fmt: skip
    """The report page for ``summary`` (the template module's settings: trim_blocks)."""
    env = jinja2.Environment(loader=jinja2.DictLoader({"report": template_text}), bytecode_cache=bytecode_cache(),
                             trim_blocks=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    template = env.get_template("report")
    return template.render(__tf_verdict_report=tf_report_view(summary, log_tails, artifacts, resume))


def fallback_page(summary: Any, error: str) -> str:
    """A page that says why the report could not be drawn, with the verdict it stands
    beside; built from escaped strings alone, so that it cannot fail in turn."""
    record = summary if isinstance(summary, dict) else {}

    def text(value: Any) -> str:
        return html.escape(printable(value), quote=True)

    run_id, status = text(record.get("run_id", "?")), text(str(record.get("status", "unknown")).upper())
    reason = f'<div class="reason" id="reason">{text(record["reason"])}</div>\n' if record.get("reason") else ""
    checks = [c for c in record.get("checks") or [] if isinstance(c, dict)]
    rows = "".join(
        f'<tr class="check"><td>{RESULT_TEXT.get(c.get("ok"), "--")}</td>'
        f"<td><code>{text(c.get('name'))}</code></td><td>{text(c.get('detail'))}</td></tr>\n"
        for c in checks
    )
    table = f'<table id="checks">\n{rows}</table>\n' if rows else ""
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<title>{run_id}: {status} - tf-runbook report (not drawn)</title>\n</head>\n<body>\n"
        f'<h1>Run <code>{run_id}</code> <span class="badge" id="status">{status}</span></h1>\n'
        f"{reason}"
        f'<p id="not-drawn">The report could not be drawn: <code>{text(error)}</code>. The verdict stands: '
        'its status above and every check and worker are in <a href="summary.json">summary.json</a>.</p>\n'
        f"{table}</body>\n</html>\n"
    )


def draw(summary: dict[str, Any], template_text: str, run_dir: str, options: dict[str, Any] | None = None) -> tuple[str, str | None]:
    """The page and None, or the fallback page and why the report could not be drawn.
    ``options``: the task's ``marker``, ``inventory`` and ``playbook``."""
    given = options or {}
    try:
        artifacts = collected_artifacts(run_dir, str(given.get("marker") or ""))
        resume = {"inventory": given.get("inventory") or [], "playbook": given.get("playbook")}
        return render_report(summary, template_text, culprit_log_tails(summary, run_dir), artifacts, resume), None
    except Exception as exc:  # noqa: BLE001 - whatever the summary holds, the play goes on
        error = f"{type(exc).__name__}: {exc}"
        return fallback_page(summary, error), error


def write_report(summary_path: str, template_path: str, dest: str, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Render and write the report atomically (0600); return its path, size, time, and
    ``error`` where only the page saying why could be written."""
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
    page, error = draw(summary, template_text, os.path.dirname(os.path.abspath(summary_path)), options)
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
    result: dict[str, Any] = {"path": dest, "bytes": len(page.encode()), "seconds": round(time.perf_counter() - started, 3)}
    if error is not None:
        result["error"] = error
    return result


class ActionModule(ControllerAction):
    ARGUMENT_SPEC = ARGUMENT_SPEC

    def work(self, args: dict[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        summary, dest = report_paths(args)
        template = self._find_needle("templates", args["template"])
        if self._task.check_mode:
            return {"changed": True, "path": dest, "msg": "check mode: the report would be written"}
        result = {**write_report(summary, template, dest, args), "changed": True}
        if "error" in result:
            result["warnings"] = [
                f"the report could not be drawn ({result['error']}); {dest} says so, and the verdict "
                f"and {summary} stand"
            ]
        return result
