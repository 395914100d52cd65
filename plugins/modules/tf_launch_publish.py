# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

# A documentation-only module: the work is the action plugin
# plugins/action/tf_launch_publish.py, which runs on the controller only.

from __future__ import annotations

DOCUMENTATION = r"""
module: tf_launch_publish
short_description: Publish a reattached run's facts on its host, as the launch does
version_added: "0.1.0"
author: tf-runbook contributors (!UNKNOWN)
description:
  - Takes what the reattach's finder (M(tf_runbook.multiworker.tf_worker_status) with
    C(run_dir)) read on the host and returns, as C(ansible_facts), the facts the launch
    (M(tf_runbook.multiworker.tf_worker_launch)) publishes, under the same names, from the
    same code (C(run_facts) of C(module_utils/tf_run_files.py)), plus the run's attempt and
    deadline.
  - Runs on the controller only; no module run on the host.
extends_documentation_fragment:
  - tf_runbook.multiworker.attributes
options:
  found:
    description: The finder's result on this host (C(run_dir), C(workers_found), C(launch)).
    type: dict
    required: true
  run:
    description: One host's C(launch) record (C(attempt), C(deadline_at_controller)), so
      that every host publishes one attempt and deadline for the run; empty for this
      host's own.
    type: dict
    default: {}
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Publish the run as the launch would have
  tf_runbook.multiworker.tf_launch_publish:
    found: "{{ found }}"
    run: "{{ hostvars[ansible_play_hosts[0]].found.launch }}"
"""

RETURN = r"""
ansible_facts:
  description: C(tf_worker_run_dir), C(tf_worker_job_dir), C(tf_worker_checkpoint_dir),
    C(tf_worker_dirs), C(tf_worker_interpreter), C(tf_launch_jobs) (the workers found),
    C(tf_run_attempt) and C(tf_launch_deadline) (epoch seconds on the controller's clock,
    0 for none).
  type: dict
  returned: success
"""
