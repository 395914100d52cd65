# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

# A documentation-only module: the work is the action plugin plugins/action/tf_run_claim.py,
# which runs on the controller and never calls a module.

from __future__ import annotations

DOCUMENTATION = r"""
module: tf_run_claim
short_description: Claim a run's private directory on the controller, or claim a run to resume
version_added: "0.1.0"
author: tf-runbook contributors (!UNKNOWN)
description:
  - Creates O(runs_dir) (mode 0700, which is also set when it exists) and O(runs_dir)/O(run_id) (mode 0700) with
    one C(mkdir) that fails when the directory exists, so that the run id cannot be used again from this
    controller, and of two playbooks started together with the same run id only one passes. Writes
    C(run.json) there with O(cluster_checksum).
  - With O(resume) (C(-e tf_resume=true)) it claims an existing run instead, for its next attempt, after checking
    every host's answer (O(hosts), from tf_run_resume) and the controller's records; it refuses, with every
    reason naming host and value, a run unknown to this controller, a run not launched on a host, a worker whose
    supervisor still runs, a cluster whose checksum differs from the run's (C(run.json), each worker's
    TF_CONFIG), a checkpoint directory other than the one the latest attempt's workers recorded (a resume with
    another C(tf_checkpoint_dir) would start the job over; a worker without a record is not refused), and a run
    that succeeded (its C(summary.json), or every worker of its latest attempt exited 0).
    The next attempt is the latest attempt found on any host plus one; a file made with O_EXCL in the run's
    directory (C(.resume-<attempt>.claim)) lets only one playbook take it.
  - Either claim records the playbook that drives the run in C(driver.json) in the run's directory, with the pid
    of the ansible-playbook process (the parent of the worker process that runs this action), its start time
    (C(/proc/<pid>/stat) field 22) and the controller's host name; the record is kept after the playbook ends.
    A resume is refused, naming the pid and how to stop it, while the recorded driver still lives, that is
    while a process of that pid with that start time runs on this host (a dead playbook's record, a pid since
    reused by another process, or another controller's record does not refuse it).
  - Runs on the controller only (an action plugin); the hosts are not contacted. In check mode nothing is created.
extends_documentation_fragment:
  - tf_runbook.multiworker.attributes
options:
  runs_dir:
    description: The directory of every run's files on the controller (C(tf_runs_dir)).
    type: path
    required: true
  run_id:
    description: The run id, a single path component.
    type: str
    required: true
  cluster_checksum:
    description: The checksum of the cluster (C(tf_cluster_spec.checksum)), recorded in C(run.json) by a new claim
      and compared by a resume.
    type: str
    default: ""
  resume:
    description: Claim the existing run O(run_id) for its next attempt (C(tf_resume)).
    type: bool
    default: false
  hosts:
    description: With O(resume), every host of the play to what tf_run_resume read there (given the host's
      C(tf_checkpoint_dir) as its C(checkpoint_root)).
    type: dict
    default: {}
  chief:
    description: With O(resume), the chief's host, whose checkpoint directory holds what the resumed job
      restores from. A chief whose directory holds nothing is refused unless O(from_scratch).
    type: str
    default: ""
  from_scratch:
    description: With O(resume), resume a run whose chief holds no checkpoint anyway (C(tf_resume_from_scratch));
      the job trains again from its first epoch.
    type: bool
    default: false
  ports:
    description: Each host's worker ports (its workers', or a spare's), recorded in C(run.json) by a new run's
      claim, so that a resume of a run whose ports were picked (C(tf_worker_port=auto)) keeps them.
    type: dict
    default: {}
attributes:
  check_mode:
    support: full
    details: In check mode nothing is created.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Claim the run's private directory on the controller
  tf_runbook.multiworker.tf_run_claim:
    runs_dir: runs
    run_id: 20260101T120000Z-abc123
    cluster_checksum: "{{ tf_cluster_spec.checksum }}"
  run_once: true

- name: Claim the stopped run for its next attempt
  tf_runbook.multiworker.tf_run_claim:
    runs_dir: runs
    run_id: 20260101T120000Z-abc123
    cluster_checksum: "{{ tf_cluster_spec.checksum }}"
    resume: true
    hosts: "{{ dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', hostvars, 'run_here'))) }}"
  run_once: true
"""

RETURN = r"""
path:
  description: The run's directory.
  type: str
  returned: always
  sample: runs/20260101T120000Z-abc123
attempt:
  description: The attempt the playbook runs first; 0 for a new run, the next one for a resume.
  type: int
  returned: always
  sample: 2
resumes_from:
  description: With O(resume), what the resumed job restores from, as the output says it.
  type: str
  returned: when resume
  sample: from the chief's checkpoint on w0 (5 file(s), 0.0 MB, newest latest; it names checkpoint 3)
"""
