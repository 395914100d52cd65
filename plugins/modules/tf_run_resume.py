#!/usr/bin/python
# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What one host holds of a run that is to be resumed (issue 23, point 7)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: tf_run_resume
short_description: Read what this host holds of a run to resume
version_added: "0.1.0"
author: tf-runbook contributors (!UNKNOWN)
description:
  - Reads, without changing anything, this host's part of the run O(run_id) under O(base_dir), for the preflight of
    C(-e tf_resume=true) (roles/tf_preflight/tasks/resume.yml); the controller's claim (tf_run_claim with
    C(resume)) judges every host's answer at once.
  - Finds the run's attempts (C(worker-<index>) in the run's directory for the first, C(retry-<n>/) for restart n)
    and, for each worker directory of the latest one, whether its supervisor is alive (the pid of its
    C(state.json), still working in that directory), how it exited (C(exit.json)) and the checksum of the cluster
    in its C(tf_config.json).
  - Says which checkpoint directory the resume would use here (from O(checkpoint_root)) and, for each worker of
    the latest attempt, which one its launch used (recorded in its C(state.json)), so that the claim refuses a
    resume whose C(tf_checkpoint_dir) would start the job over in an empty directory.
extends_documentation_fragment:
  - tf_runbook.multiworker.attributes
  - tf_runbook.multiworker.run_dir.run
options:
  checkpoint_root:
    description: Where this host keeps checkpoints (C(tf_checkpoint_dir)); empty, under the run's directory
      (C(<run>/checkpoints)), else C(<checkpoint_root>/<run_id>). C(~) is the remote user's home. A relative
      path is refused.
    type: path
    default: ""
attributes:
  check_mode:
    support: full
    details: It only reads.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Read this host's part of the run to resume
  tf_runbook.multiworker.tf_run_resume:
    base_dir: "{{ tf_worker_base_dir }}"
    run_id: "{{ tf_run_id }}"
    checkpoint_root: "{{ tf_checkpoint_dir }}"
  register: run_here
"""

RETURN = r"""
exists:
  description: Whether the run's directory exists on this host.
  type: bool
  returned: always
run_dir:
  description: The run's directory on this host.
  type: str
  returned: always
checkpoint_dir:
  description: The checkpoint directory the resume would use on this host, from O(checkpoint_root).
  type: str
  returned: always
  sample: /srv/checkpoints/20260101T120000Z-abc123
checkpoint_root:
  description: O(checkpoint_root) as this host resolved it (C(~) expanded); empty for the run's directory.
  type: str
  returned: always
last_attempt:
  description: The latest attempt found (0 the first launch); -1 when none was launched here.
  type: int
  returned: always
checkpoint:
  description: What the checkpoint directory the resume would use holds here (the runbook's own files left out),
    C(files), C(bytes), C(newest) (its newest file, relative; null when none) and C(newest_at) (epoch seconds), and
    C(numbers), the checkpoint number each pointer file names (TensorFlow's C(checkpoint), the default job's
    C(latest)). On the chief's host it tells what the resumed job restores from.
  type: dict
  returned: always
  sample: {"files": 5, "bytes": 20480, "newest": "latest", "newest_at": 1767268800.0, "numbers": {"latest": 3}}
earlier_alive:
  description: Workers of earlier attempts whose supervisor still runs, each with C(attempt), C(index),
    C(dir) and C(supervisor_pid).
  type: list
  elements: dict
  returned: always
workers:
  description: Each worker directory of the latest attempt, with C(index), C(dir), C(alive) (its supervisor
    still runs), C(returncode) (null without an exit record), C(checksum) (of its TF_CONFIG's cluster, null
    when unreadable) and C(checkpoint_dir) (the checkpoint directory its launch recorded in its C(state.json),
    null when unreadable or not recorded, as by an older supervisor).
  type: list
  elements: dict
  returned: always
"""

import os
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_proc import works_in
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import (
    CONFIG_FILE,
    EXIT_FILE,
    RUN_ID_RULE,
    STATE_FILE,
    attempt_dir_of,
    cluster_checksum,
    read_json,
    retry_index,
    run_dir_of,
    run_id_is_safe,
    worker_index,
)
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_checkpoint_copy import (
    chief_files,
    pointer_numbers,
)
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run_files import checkpoint_dir_of


def worker_dirs(directory: str) -> dict[int, str]:
    """The worker directories directly under ``directory``, by index."""
    try:
        names = os.listdir(directory)
    except OSError:
        return {}
    found = {}
    for name in names:
        index = worker_index(name)
        if index is not None and os.path.isdir(os.path.join(directory, name)):
            found[index] = os.path.join(directory, name)
    return found


def attempts_of(run_dir: str) -> list[int]:
    """Every attempt with a worker directory on this host, in order."""
    found = [0] if worker_dirs(run_dir) else []
    try:
        names = os.listdir(run_dir)
    except OSError:
        return found
    for name in names:
        attempt = retry_index(name)
        if attempt is not None and worker_dirs(os.path.join(run_dir, name)):
            found.append(attempt)
    return sorted(found)


def worker_entry(index: int, directory: str) -> dict[str, Any]:
    state = read_json(os.path.join(directory, STATE_FILE)) or {}
    exit_record = read_json(os.path.join(directory, EXIT_FILE)) or {}
    config = read_json(os.path.join(directory, CONFIG_FILE)) or {}
    cluster = config.get("cluster")
    pid = state.get("supervisor_pid")
    launch = state.get("launch")
    recorded = launch.get("checkpoint_dir") if isinstance(launch, dict) else None
    return {
        "index": index,
        "dir": directory,
        "alive": bool(works_in(pid, directory)) if isinstance(pid, int) else False,
        "returncode": exit_record.get("returncode"),
        "checksum": cluster_checksum(cluster) if isinstance(cluster, dict) else None,
        "checkpoint_dir": recorded if isinstance(recorded, str) and recorded else None,
    }


def read_run(base_dir: str, run_id: str, checkpoint_root: str = "") -> dict[str, Any]:
    """What this host holds of the run, and the checkpoint directory a resume with
    ``checkpoint_root`` would use. Raises ValueError for a relative ``checkpoint_root``."""
    run_dir = run_dir_of(os.path.abspath(base_dir), run_id)
    checkpoint_dir = checkpoint_dir_of(run_dir, run_id, checkpoint_root)
    attempts = attempts_of(run_dir)
    last = attempts[-1] if attempts else -1
    dirs = worker_dirs(attempt_dir_of(run_dir, last)) if attempts else {}
    return {
        "changed": False,
        "exists": os.path.isdir(run_dir),
        "run_dir": run_dir,
        "checkpoint_dir": checkpoint_dir,
        "checkpoint_root": checkpoint_root,
        "last_attempt": last,
        "workers": [worker_entry(index, dirs[index]) for index in sorted(dirs)],
        "earlier_alive": earlier_alive(run_dir, attempts[:-1]),
        "checkpoint": checkpoint_held(checkpoint_dir),
    }


def checkpoint_held(directory: str) -> dict[str, Any]:
    """What the job's checkpoint directory here holds (the runbook's own files left out):
    ``files``, ``bytes``, the ``newest`` file and its time, and ``numbers``, the checkpoint
    each pointer file names (TensorFlow's ``checkpoint``, the default job's ``latest``). A
    resume from a directory that holds nothing starts the job over."""
    try:
        names = chief_files(directory) if os.path.isdir(directory) and not os.path.islink(directory) else []
    except OSError:
        names = []
    sizes, times = {}, {}
    for name in names:
        try:
            info = os.stat(os.path.join(directory, name))
        except OSError:
            continue
        sizes[name], times[name] = info.st_size, info.st_mtime
    newest = max(times, key=lambda name: times[name]) if times else None
    return {"files": len(sizes), "bytes": sum(sizes.values()), "newest": newest,
            "newest_at": times.get(newest) if newest else None, "numbers": pointer_numbers(directory, list(sizes))}


def earlier_alive(run_dir: str, attempts: list[int]) -> list[dict[str, Any]]:
    """Supervisors of earlier attempts that still run (an orphan on a host that was lost and
    came back): a resume beside them would share their ports."""
    alive = []
    for attempt in attempts:
        for index, directory in sorted(worker_dirs(attempt_dir_of(run_dir, attempt)).items()):
            pid = (read_json(os.path.join(directory, STATE_FILE)) or {}).get("supervisor_pid")
            if isinstance(pid, int) and not isinstance(pid, bool) and works_in(pid, directory):
                alive.append({"attempt": attempt, "index": index, "dir": directory, "supervisor_pid": pid})
    return alive


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "base_dir": {"type": "path", "required": True},
            "run_id": {"type": "str", "required": True},
            "checkpoint_root": {"type": "path", "default": ""},
        },
        supports_check_mode=True,
    )
    run_id = module.params["run_id"]
    if not run_id_is_safe(run_id):
        module.fail_json(msg=f"run id {run_id!r} is not safe as a directory name: {RUN_ID_RULE}")
    try:
        found = read_run(module.params["base_dir"], run_id, module.params["checkpoint_root"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**found)


if __name__ == "__main__":
    main()
