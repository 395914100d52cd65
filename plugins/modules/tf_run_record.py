# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

# A documentation-only module: the work is the action plugin plugins/action/tf_run_record.py,
# which runs on the controller and never calls a module.

from __future__ import annotations

DOCUMENTATION = r"""
module: tf_run_record
short_description: Write one of a run's records on the controller, without a module process
version_added: "0.1.0"
author: tf-runbook contributors (!UNKNOWN)
extends_documentation_fragment:
  - tf_runbook.multiworker.attributes
description:
  - Writes O(content) as JSON (indented by 4, keys sorted, as C(to_nice_json) writes it) into O(path) on the
    controller, mode 0600, whole or not at all (a temporary file in the same directory, renamed over O(path)),
    then removes every file of O(remove) (a missing one is no error).
  - Runs in the task's own worker process on the controller (an action), not as a module started there. The
    restart path's records (the decision, what the checkpoint copy moved) cost a module run each before
    (see docs/architecture.md, Cost rules, 4).
  - In check mode nothing is written or removed.
options:
  path:
    description: The record's path on the controller; its directory must exist. Empty to only remove.
    type: path
    default: ""
  content:
    description: What the record holds (any JSON value). Required with O(path).
    type: raw
  remove:
    description: Files to remove on the controller after the record is written.
    type: list
    elements: path
    default: []
notes:
  - Runs on the controller only; the task's host is never contacted.
attributes:
  check_mode:
    support: full
    details: In check mode nothing is written or removed.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Record the decision
  tf_runbook.multiworker.tf_run_record:
    path: "{{ tf_runs_dir }}/{{ tf_run_id }}/attempt-1.json"
    content: "{{ decision }}"
  run_once: true

- name: Remove the chief's archive from the controller
  tf_runbook.multiworker.tf_run_record:
    remove: ["{{ tf_runs_dir }}/{{ tf_run_id }}/.checkpoint-1.tar"]
  run_once: true
"""

RETURN = r"""
path:
  description: The record written (empty when none).
  type: str
  returned: always
  sample: runs/20260101T120000Z-abc123/attempt-1.json
removed:
  description: The files of O(remove) that were there and were removed.
  type: list
  elements: str
  returned: always
  sample: [runs/20260101T120000Z-abc123/.checkpoint-1.tar]
"""
