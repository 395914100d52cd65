# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

# A documentation-only module, as ansible.builtin.template is: the work is the action plugin
# plugins/action/tf_report.py, which runs on the controller and never calls a module.

from __future__ import annotations

DOCUMENTATION = r"""
module: tf_report
short_description: Render a run's report.html from its summary.json
version_added: "0.1.0"
author: tf-runbook contributors (!UNKNOWN)
description:
  - Reads O(summary) (written by the M(tf_runbook.multiworker.tf_verdict) module), lays it
    out with the C(tf_runbook.multiworker.tf_report_view) filter and renders O(template)
    into O(dest), atomically, mode 0600. With O(run_dir), those are the run directory's
    C(summary.json) and C(report.html).
  - Runs on the controller only (an action plugin); the hosts are not contacted.
  - Much faster than M(ansible.builtin.template) for a large run, because the summary is
    rendered with Jinja2 directly rather than through Ansible's templating.
  - The page shows the verdict and its checks, a chart per metric, and per attempt a
    timeline with each worker's cause, the culprit's last log lines (read from the end of
    its log under the run directory, never from outside it), a stall with each worker's
    captured stack, and which attempt each epoch was judged from; fields an older
    summary lacks are left out.
  - Never fails on what the summary holds; where it cannot be drawn, O(dest) is a page
    that says why (the verdict and summary.json stand), RV(error) says it and the task
    warns. A summary or a template that cannot be read fails the task.
  - In check mode nothing is written.
extends_documentation_fragment:
  - tf_runbook.multiworker.attributes
options:
  run_dir:
    description:
      - The run's directory on the controller, C(runs/<run_id>). O(summary) defaults to
        its C(summary.json) and O(dest) to its C(report.html).
      - Either O(run_dir), or both O(summary) and O(dest).
    type: path
  summary:
    description: Path of the run's summary.json on the controller.
    type: path
  template:
    description: The report's Jinja template, looked up as M(ansible.builtin.template)
      looks up its source (the role's C(templates/) first); it gets the layout as
      C(__tf_verdict_report).
    type: path
    required: true
  dest:
    description: Path of the report to write on the controller.
    type: path
  marker:
    description: The chief's completion marker (tf_verdict_marker), which the report does
      not list among the collected artifacts. Those are what the collect brought into the
      run's worker directories of every attempt (C(<host>/worker-<i>/),
      C(<host>/retry-<n>/worker-<i>/)) apart from the runbook's own records.
    type: str
    default: ""
  inventory:
    description: The inventory sources of the playbook run (C(ansible_inventory_sources)),
      named by the resume command a failed run's report shows.
    type: list
    elements: str
    default: []
  playbook:
    description: The runbook's C(train.yml), named by the resume command a failed run's
      report shows.
    type: str
    default: train.yml
attributes:
  check_mode:
    support: full
    details: In check mode nothing is written.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Write the run's report into its directory, from its summary
  tf_runbook.multiworker.tf_report:
    run_dir: runs/mnist-20260101-1200
    template: report.html.j2
  run_once: true

- name: Write the run's report next to its summary
  tf_runbook.multiworker.tf_report:
    summary: runs/mnist-20260101-1200/summary.json
    template: report.html.j2
    dest: runs/mnist-20260101-1200/report.html
  run_once: true
"""

RETURN = r"""
path:
  description: The report written (in check mode, the one that would be).
  type: str
  returned: always
  sample: runs/mnist-20260101-1200/report.html
bytes:
  description: Its size.
  type: int
  returned: success, not in check mode
seconds:
  description: Time spent laying out and rendering it.
  type: float
  returned: success, not in check mode
error:
  description: Why the report could not be drawn; O(dest) is then a page that says so.
  type: str
  returned: when the report could not be drawn
  sample: "KeyError: 'index'"
"""
