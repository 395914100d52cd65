#!/usr/bin/python
# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pack one host's files of a run into a single archive, so that collecting a run costs one
transfer per host instead of one per file (see the action plugin of the same name)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: tf_collect_bundle
short_description: Pack a run's worker files on a host into one archive
version_added: "0.1.0"
author: tf-runbook contributors (!UNKNOWN)
description:
  - Looks in the run's C(worker-<i>) and C(retry-<k>/worker-<i>) directories for files
    matching O(patterns) and writes them, with their path below the run directory, to
    C(<run dir>/.collect.tar.gz), replacing an earlier bundle. Nothing else is touched.
  - The action plugin of the same name then fetches that archive in one transfer and
    unpacks it under O(dest) on the controller (directories 0700, files 0600), writing only
    the files whose content changed; each file is streamed to disk, never held whole in
    the controller's memory.
  - A worker's C(job_env.json) (the environment handed to the job) is never collected.
  - The wait's last status run of a successful attempt packs and brings the same bundle
    (M(tf_runbook.multiworker.tf_worker_status), its option C(collect)),
    with the same rules (one implementation, C(module_utils/tf_bundle.py)); the collect role then
    runs this module only on the hosts whose files did not come with the wait.
  - Releases the ports this run had reserved on the host (C(tf_worker_port auto),
    RV(ports_released)), except those still listened on, since the run ended.
  - In check mode nothing is packed, fetched or written; the files that would be fetched
    are returned (and shown in diff mode).
extends_documentation_fragment:
  - tf_runbook.multiworker.attributes
options:
  base_dir:
    description: Where the host keeps its runs (C(~) is the remote user's home).
    type: path
    required: true
  run_id:
    description: The run to collect; a host without it returns no files.
    type: str
    required: true
  patterns:
    description: Glob patterns matched against the names of the files directly in each
      worker directory (C(*.log), C(exit.json)).
    type: list
    elements: str
    required: true
  artifacts:
    description: Glob patterns relative to each worker directory (C(model/*), C(tb)); a
      pattern that names a directory takes everything below it.
    type: list
    elements: str
    default: []
  max_mb:
    description: Most this host sends, in MB, records and logs included. The worker files
      matching O(patterns) come first, then artifacts in path order while they fit. Of the
      first, the records (any file but a text log) come whole, smallest first, while they
      fit; a record that does not fit in what the smaller ones left is not sent. The text
      logs (C(*.log), C(*.txt), C(*.out), C(*.err)) share what the records left, smallest
      first, each whole when it fits in an equal share. A log over its share is sent as its
      head and its tail within the share, cut at line ends, with a marker line between that
      says how many bytes were cut; it is listed in RV(truncated). A log whose share is
      under 4 KiB is not sent. Every file not sent is listed in RV(left_out). With 0 there
      is no cap (each record up to 64 KiB comes whole, each log whole or cut to 64 KiB), so
      that the supervisor's records and the ends of the logs still come. The role passes
      C(tf_collect_max_mb).
    type: int
    required: true
  dest:
    description: Controller directory that receives the files (created when missing);
      read by the action plugin, the module on the host ignores it.
    type: path
    required: true
attributes:
  check_mode:
    support: full
    details: In check mode nothing is packed, fetched or written.
  diff_mode:
    support: partial
    details: In check mode, the files that would be fetched are shown as the archive's listing.
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Fetch every worker's logs and records of the run, and its saved model, in one transfer
  tf_runbook.multiworker.tf_collect_bundle:
    base_dir: ~/tf-runs
    run_id: mnist-20260101-1200
    patterns: ["*.log", "*.json"]
    artifacts: ["model/*"]
    max_mb: 200
    dest: "runs/mnist-20260101-1200/{{ inventory_hostname }}"
  register: collected

- name: Say what did not fit
  ansible.builtin.debug:
    msg: "{{ collected.left_out | map(attribute='path') | list }}"
  when: collected.left_out | length > 0
"""

RETURN = r"""
ports_released:
  description: The ports of C(tf_worker_port auto) that this run had reserved on the host
    (in this user's register, C(module_utils/tf_ports_auto.py)) and that this module run
    released, the run having ended here; a port still listened on stays reserved.
  type: list
  elements: int
  returned: when the run's directory exists and not in check mode
bundle:
  description: Path of the archive on the host ('' when no file matched, or in check mode).
  type: str
  returned: always
  sample: /home/u/tf-runs/runs/mnist-20260101-1200/.collect.tar.gz
files:
  description: Paths of the packed files, relative to the run directory.
  type: list
  elements: str
  returned: always
  sample: [worker-0/train.log, worker-0/exit.json]
left_out:
  description: Files matched but not packed (over O(max_mb)), with C(path) and C(bytes).
  type: list
  elements: dict
  returned: always
truncated:
  description: Logs sent as their head and tail (over their share of O(max_mb)), each with
    C(path), C(bytes) (its size on the host), C(sent) (what the bundle holds, marker
    included), C(head_bytes), C(tail_bytes) and C(cut_bytes); the whole log stays on the host.
  type: list
  elements: dict
  returned: always
  sample: [{"path": worker-0/worker.log, "bytes": 3221225472, "sent": 524287982,
            "head_bytes": 262143910, "tail_bytes": 262143941, "cut_bytes": 2696937621}]
run_dir:
  description: The run's directory on the host.
  type: str
  returned: always
dest:
  description: O(dest), where the files were unpacked on the controller.
  type: str
  returned: always
updated:
  description: Files whose content changed on the controller.
  type: list
  elements: str
  returned: when a bundle was fetched
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_bundle import pack_run
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_ports_auto import end_run
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import run_dir_of


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "base_dir": {"type": "path", "required": True},
            "run_id": {"type": "str", "required": True},
            "patterns": {"type": "list", "elements": "str", "required": True},
            "artifacts": {"type": "list", "elements": "str", "default": []},
            "max_mb": {"type": "int", "required": True},
            # Read by the action plugin on the controller; nothing to do on the host.
            "dest": {"type": "path", "required": True},
        },
        supports_check_mode=True,
    )
    params = module.params
    run_dir = run_dir_of(os.path.abspath(params["base_dir"]), params["run_id"])
    if not os.path.isdir(run_dir):
        module.exit_json(
            changed=False, bundle="", files=[], left_out=[], truncated=[], run_dir=run_dir,
            msg="no such run on this host",
        )
    # The packing rules are shared with the wait's last status run (module_utils/tf_bundle.py).
    result = pack_run(run_dir, params["patterns"], params["artifacts"], params["max_mb"], write=not module.check_mode)
    if not module.check_mode:
        # The collect ends the run here: its reservations of ports end with it.
        result["ports_released"] = end_run(run_dir)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
