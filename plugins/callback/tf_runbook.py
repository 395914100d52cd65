# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible's default screen output, with a failed task's message said once.

ansible-core 2.19 and later print a task that fails by raising (an action plugin's
refusal, ``fail``, a template error) twice: an ``[ERROR]:`` block with the message, its
origin and a snippet of the task file, then the ``fatal: [host]: FAILED! =>`` result that
holds the same message again, as JSON on one line. A refusal of several problems was then
two unreadable lines of ``; ``-joined text with escaped quotes. This callback prints such a
failure as the ``fatal:`` line followed by the message as it was written (its own lines
kept), and keeps everything else as the default callback does. With ``-v`` and more, the
``[ERROR]`` block and the complete result come back, for whoever debugs the runbook.
"""

from __future__ import annotations

DOCUMENTATION = """
name: tf_runbook
type: stdout
short_description: the default output, with each failed task's message said once
description:
  - Ansible's default output (C(ansible.builtin.default)), with its options and the same
    lines for everything but a failed task whose result is only a message (a refusal, a
    C(fail) task, a template error), which is printed once, as the C(fatal) line
    followed by the message as written, instead of an C([ERROR]) block and then the
    same message again as one line of JSON.
  - With C(-v) or more, such a failure is printed as the default callback prints it.
  - Set by the project's ansible.cfg (C(stdout_callback)).
extends_documentation_fragment:
  - ansible.builtin.default_callback
  - ansible.builtin.result_format_callback
requirements:
  - set as stdout in configuration
"""

from typing import Any

from ansible import constants as C
from ansible.plugins.callback.default import CallbackModule as DefaultCallbackModule

# What a failed command or assertion shows beside its message, at any verbosity: the
# rest of a result (a role check's bookkeeping, the checked hosts, a module's echo of its
# arguments) is shown with -v.
EVIDENCE_KEYS = ("cmd", "rc", "stdout", "stderr", "module_stdout", "module_stderr", "assertion", "evaluated_to")


def failure_text(host_label: str, result: dict[str, Any]) -> str | None:
    """The lines of a failed result: the ``fatal:`` line with the message as written (its
    own lines kept), then each evidence key that holds something, indented; None when
    the result has no message (the default output then shows it whole)."""
    message = result.get("msg")
    if not isinstance(message, str) or not message.strip():
        return None
    # The message as written, its own lines unindented: one per problem, each naming its
    # host, ready to be read or searched.
    text = f"fatal: [{host_label}]: FAILED! => {message.rstrip()}"
    for key in EVIDENCE_KEYS:
        value = result.get(key)
        if value in (None, "", []):
            continue
        shown = " ".join(str(part) for part in value) if key == "cmd" and isinstance(value, list) else str(value)
        shown_lines = shown.rstrip("\n").splitlines() or [""]
        text += f"\n  {key}: {shown_lines[0]}" + "".join(f"\n    {line}" for line in shown_lines[1:])
    return text


class CallbackModule(DefaultCallbackModule):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "tf_runbook.multiworker.tf_runbook"

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        text = failure_text(self.host_label(result), result.result)
        if text is None or self._display.verbosity > 0 or (result.task.loop and "results" in result.result):
            super().v2_runner_on_failed(result, ignore_errors)
            return
        if self._last_task_banner != result.task._uuid:
            self._print_task_banner(result.task)
        # The exception's text is the message; its warnings still show.
        self._handle_warnings(result.result)
        result.result.pop("exception", None)
        if self.get_option("show_task_path_on_failure"):
            self._print_task_path(result.task)
        self._display.display(text, color=C.COLOR_ERROR, stderr=self.get_option("display_failed_stderr"))
        if ignore_errors:
            self._display.display("...ignoring", color=C.COLOR_SKIP)
