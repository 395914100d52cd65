# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

# A documentation-only module: the work is the action plugin plugins/action/tf_run_claim.py,
# which runs on the controller and never calls a module.

from __future__ import annotations

DOCUMENTATION = r"""
module: tf_run_claim
short_description: Claim a run's private directory on the controller
version_added: "0.1.0"
author: tf-runbook contributors (!UNKNOWN)
description:
  - Creates O(runs_dir) (mode 0700, which is also set when it exists) and
    O(runs_dir)/O(run_id) (mode 0700), so that the run id cannot be used again from this
    controller.
  - A run directory that exists already is left as it is.
  - Runs on the controller only (an action plugin); the hosts are not contacted. In check
    mode nothing is created.
options:
  runs_dir:
    description: The directory of every run's files on the controller (C(tf_runs_dir)).
    type: path
    required: true
  run_id:
    description: The run id, a single path component.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Claim the run's private directory on the controller
  tf_runbook.multiworker.tf_run_claim:
    runs_dir: runs
    run_id: 20260101T120000Z-abc123
  run_once: true
"""

RETURN = r"""
path:
  description: The run's directory.
  type: str
  returned: always
  sample: runs/20260101T120000Z-abc123
"""
