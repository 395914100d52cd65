#!/usr/bin/python
# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read once the workers of a run's latest attempt on this host."""

from __future__ import annotations

DOCUMENTATION = r"""
module: tf_worker_status
short_description: Read once the workers of a run's latest attempt on this host
version_added: "0.1.0"
author: tf-runbook contributors (!UNKNOWN)
description:
  - Finds the workers of the latest attempt of the run in O(run_dir) (C(retry-<k>/worker-<i>/),
    else C(worker-<i>/)) and reads each one's records once, as the wait does
    (M(tf_runbook.multiworker.tf_worker_wait); one implementation,
    C(module_utils/tf_worker_records.py)). Writes nothing, renews no heartbeat.
  - One reading serves three tasks, which differ only in what the action of the same name
    prints on the controller. The status (C(playbooks/status.yml)) and the reattach's finder
    (C(playbooks/wait.yml), from another controller) print each worker's progress and use
    RV(workers_found) and RV(launch); the logs (C(playbooks/logs.yml)) give O(logs) and
    print the last lines of each chosen worker's log instead.
extends_documentation_fragment:
  - tf_runbook.multiworker.attributes
  - tf_runbook.multiworker.progress
options:
  run_dir:
    description: The run's directory on this host (C(~) allowed).
    type: path
    required: true
  logs:
    description:
      - Print each chosen worker's last log lines, each prefixed C([<index> <host>]) and
        escaped, instead of its progress. Omitted for the progress.
    type: dict
    suboptions:
      lines:
        description: How many of each log's last lines to print.
        type: int
        required: true
      filter:
        description:
          - Leave TensorFlow's C++ log lines (C(I0000 00:00:1733... 12345 file.cc:123] ...),
            C(W...), C(E...), and absl's warning that it logs to stderr before it was set up;
            C(tf_logs.CPP_LOG_LINE)) out, print the last O(logs.lines) other lines, and say
            how many were left out (C(log_hidden)).
        type: bool
        default: false
      workers:
        description: Used by the action on the controller. The indices of the workers to
          print; all when not given.
        type: list
        elements: int
attributes:
  action:
    description: The action of the same name runs on the controller, calls the module on
      the host once and prints its workers.
    support: full
  check_mode:
    support: full
    details: Reads only.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Show this host's workers of a run
  tf_runbook.multiworker.tf_worker_status:
    run_dir: ~/tf-runbook/runs/20250114T100200Z-abc123
  register: found

- name: Show the last 20 lines of worker 1's log, without TensorFlow's C++ lines
  tf_runbook.multiworker.tf_worker_status:
    run_dir: ~/tf-runbook/runs/20250114T100200Z-abc123
    logs:
      lines: 20
      filter: true
      workers: [1]
"""

RETURN = r"""
workers:
  description:
    - One entry per worker found, as RV(tf_runbook.multiworker.tf_worker_wait#module:workers)
      describes it, the action's C(frozen) included; with O(logs), C(log_tail) holds the
      last O(logs.lines) lines and C(log_hidden) how many C++ log lines O(logs.filter) left out.
    - Where the cluster has task types (the inventory's tf_chief, tf_ps, tf_evaluator), C(task)
      names the worker's task (C(chief:0), C(worker:1), C(ps:0), C(evaluator:0)), read from the
      TF_CONFIG in its directory; the status lines show it.
  type: list
  elements: dict
  returned: always
workers_found:
  description: The workers found in O(run_dir) (C(index), C(dir)).
  type: list
  elements: dict
  returned: always
launch:
  description: The attempt, deadline and what the supervisors were started with (from the
    first worker's C(state.json)). The action adds C(deadline_at_controller), the host's
    C(deadline_at) on the controller's clock.
  type: dict
  returned: always
run_dir:
  description: The run's directory, absolute.
  type: str
  returned: always
now:
  description: The host's clock (epoch seconds) at the reading, with which the action puts
    the host's times (C(launch.deadline_at)) on the controller's clock.
  type: float
  returned: always
clock_offset:
  description: Controller's clock minus the host's, in seconds, measured by the action.
  type: float
  returned: always
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_worker_records import (
    TAIL_LINES,
    find_workers,
    progress_or_error,
    snapshot,
    with_activity,
    with_tasks,
)

ARGUMENT_SPEC = {
    "run_dir": {"type": "path", "required": True},
    "progress_pattern": {"type": "str", "default": ""},
    "logs": {
        "type": "dict",
        "options": {
            "lines": {"type": "int", "required": True},
            "filter": {"type": "bool", "default": False},
            # Read by the action of the same name on the controller.
            "workers": {"type": "list", "elements": "int"},
        },
    },
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    progress, error = progress_or_error(params["progress_pattern"])
    if error:
        module.fail_json(msg=error)
    logs = params["logs"] or {}
    run_dir = os.path.abspath(params["run_dir"])
    workers, launch = find_workers(run_dir)
    current = with_tasks(with_activity(snapshot(workers, progress, logs.get("lines") or TAIL_LINES, {}, bool(logs.get("filter")))))
    module.exit_json(changed=False, workers=current, workers_found=workers, launch=launch, run_dir=run_dir, now=time.time())


if __name__ == "__main__":
    main()
