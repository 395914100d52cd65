#!/usr/bin/python
# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Create a run's directories on a worker host without touching any earlier run (the
work is module_utils/tf_run_files.py, which tf_worker_launch shares)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: tf_run_dir
short_description: Create the directories of one training run on this host
version_added: "0.1.0"
author: tf-runbook contributors (!UNKNOWN)
description:
  - Expands O(base_dir) for the remote user (C(~) is that user's home), then makes
    C(<base_dir>/runs/<run_id>/job) and one C(worker-<index>) directory per worker, all
    mode 0700 so that other users can neither read nor write them; O(base_dir) and its
    C(runs) are made 0700 too, also when they existed with another mode.
  - The run's checkpoint directory is C(<run>/checkpoints), or C(<checkpoint_root>/<run_id>)
    when O(checkpoint_root) is set; one directory per run id even on a shared path, so
    that no run resumes from, or overwrites, another run's backups. There it records its
    owner (C(.tf-runbook-owner.json), the run id and the checksum of the cluster in O(configs));
    a run id reused by another cluster (another controller or inventory) is refused before
    anything is written.
  - Idempotent for a run that has not been launched yet. Fails, changing nothing, when a
    worker directory of this run already holds a launch record (C(state.json) or
    C(exit.json)); a run id is used once, and an earlier run's files are never touched.
  - Supports check mode and diff mode. The diff lists what the run would have on this
    host; the TF_CONFIG cluster list (once), every directory, each job file with its
    sha256, each worker's TF_CONFIG index and port, and the interpreter that trains.
extends_documentation_fragment:
  - tf_runbook.multiworker.attributes
  - tf_runbook.multiworker.run_dir
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
    details: What the run would have on this host, one line per item.
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Create the run's directories and write the job, its TF_CONFIGs and environment
  tf_runbook.multiworker.tf_run_dir:
    base_dir: ~/tf-runs
    run_id: mnist-20260101-1200
    indices: [0, 1]
    job_files:
      - name: train.py
        content: "{{ lookup('ansible.builtin.file', 'files/train.py') }}"
    configs:
      - index: 0
        content: '{"cluster": {"worker": ["10.0.0.11:2222", "10.0.0.11:2223"]}, "task": {"type": "worker", "index": 0}}'
      - index: 1
        content: '{"cluster": {"worker": ["10.0.0.11:2222", "10.0.0.11:2223"]}, "task": {"type": "worker", "index": 1}}'
    job_env:
      TF_CPP_MIN_LOG_LEVEL: "1"
    visible_devices:
      "0": "0"
      "1": "1"
  no_log: true
  register: run_dirs

- name: Keep checkpoints on a shared file system, one directory per run
  tf_runbook.multiworker.tf_run_dir:
    base_dir: ~/tf-runs
    run_id: mnist-20260101-1200
    indices: [2, 3]
    attempt: 1
    checkpoint_root: /shared/checkpoints
    job_archive: ~/tf-runs/.job-archives/0f3c9e.tar.gz
    pythonpath: true
"""

RETURN = r"""
base_dir:
  description: O(base_dir), absolute.
  type: str
  returned: always
run_dir:
  description: The run's directory.
  type: str
  returned: always
  sample: /home/u/tf-runs/runs/mnist-20260101-1200
job_dir:
  description: Where the job's files go.
  type: str
  returned: success
checkpoint_dir:
  description: The run's checkpoint directory (absolute), shared by its attempts and by no other run.
  type: str
  returned: success
worker_dirs:
  description: Worker index (as a string) to its directory.
  type: dict
  returned: success
  sample: {"0": /home/u/tf-runs/runs/mnist-20260101-1200/worker-0}
written:
  description: Files that were (or in check mode would be) written.
  type: list
  elements: str
  returned: success
read_back:
  description: Each TF_CONFIG as read from disk after writing, with C(index) and C(content).
  type: list
  elements: dict
  returned: success
diff:
  description: In diff mode, this host's part of the run before and after, one line per item.
  type: dict
  returned: diff mode
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run_files import (
    RUN_FILES_SPEC,
    RunFilesError,
    prepare_run,
)


def main() -> None:
    module = AnsibleModule(argument_spec=dict(RUN_FILES_SPEC), supports_check_mode=True)
    if module.no_log:
        # The task hides the whole result already. Masking job_env's values inside it too
        # would corrupt it: Ansible replaces every occurrence of a no_log value in the
        # result, and a value such as TF_CPP_MIN_LOG_LEVEL's "2" is part of every TF_CONFIG
        # read back. job_env is this module's only no_log option.
        module.no_log_values.clear()
    try:
        result = prepare_run(module.params, module.check_mode, module._diff)
    except RunFilesError as exc:
        module.fail_json(msg=str(exc), **exc.fields)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
