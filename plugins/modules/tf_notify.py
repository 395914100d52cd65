# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

# A documentation-only module: the work is the action plugin plugins/action/tf_notify.py,
# which runs on the controller and never calls a module.

from __future__ import annotations

DOCUMENTATION = r"""
module: tf_notify
short_description: Run the operator's notify command for an event of a run, on the controller
version_added: "0.1.0"
author: tf-runbook contributors (!UNKNOWN)
description:
  - Runs O(command) on the controller with three arguments appended, the event (O(event)), the run id
    (O(run_id)) and the path of the run's C(summary.json) in O(run_dir) (the run's directory while there is
    no summary yet), and with the same values in its environment, C(TF_RUNBOOK_EVENT), C(TF_RUNBOOK_RUN_ID),
    C(TF_RUNBOOK_SUMMARY), and C(TF_RUNBOOK_RUN_DIR) the run's directory.
  - Never holds or fails the run. The command runs in a session of its own with its standard input and output
    closed, for at most O(timeout) seconds; then it is killed with whatever it started in its session. A command
    that cannot be started, exits non-zero or is killed gives one warning line (with its last line of standard
    error) and the task is still ok.
  - Runs on the controller only (an action plugin); the hosts are not contacted. Nothing is run in check mode,
    nor with an empty O(command).
extends_documentation_fragment:
  - tf_runbook.multiworker.attributes
options:
  command:
    description: The command, as an argv list (C(tf_notify_command)); no shell reads it. Empty runs nothing.
    type: list
    elements: str
    required: true
  event:
    description: What happened to the run.
    type: str
    required: true
    choices: [started, restarted, stalled, stopped, succeeded, failed]
  run_id:
    description: The run id.
    type: str
    required: true
  run_dir:
    description: The run's directory on the controller (C(tf_runs_dir)/C(tf_run_id)).
    type: path
    required: true
  timeout:
    description: Seconds the command may take (C(tf_notify_timeout)); at least 1.
    type: int
    default: 10
attributes:
  check_mode:
    support: full
    details: In check mode the command is not run.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Tell the notify command that the run succeeded
  tf_runbook.multiworker.tf_notify:
    command: [/usr/local/bin/notify-team, "#training"]
    event: succeeded
    run_id: 20260101T120000Z-abc123
    run_dir: runs/20260101T120000Z-abc123
    timeout: 10
  run_once: true
"""

RETURN = r"""
notified:
  description: The command ran and exited 0.
  type: bool
  returned: always
event:
  description: O(event).
  type: str
  returned: when the command was run
  sample: succeeded
path:
  description: The path handed to the command, the run's C(summary.json) or its directory.
  type: str
  returned: when the command was run
  sample: runs/20260101T120000Z-abc123/summary.json
msg:
  description: What happened, in one line; also a warning when the command failed or was killed.
  type: str
  returned: always
  sample: "Run 20260101T120000Z-abc123: tf_notify_command for failed exited 1: curl: (6) Could not resolve host"
"""
