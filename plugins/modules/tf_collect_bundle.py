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
    the files whose content changed.
  - A worker's C(job_env.json) (the environment handed to the job) is never collected.
  - In check mode nothing is packed, fetched or written; the files that would be fetched
    are returned (and shown in diff mode).
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
    description: Most this host sends, in MB; the worker files matching O(patterns) come
      first, then artifacts in path order while they fit. What does not fit is listed in
      RV(left_out).
    type: int
    default: 500
  dest:
    description: Controller directory that receives the files (created when missing);
      read by the action plugin, the module on the host ignores it.
    type: path
    required: true
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

import fnmatch
import os
import re
import tarfile
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import (
    JOB_ENV_FILE,
    RETRY_PREFIX,
    WORKER_PREFIX,
    run_dir_of,
)

WORKER_PATH = re.compile(r"^(retry-[0-9]+/)?worker-[0-9]+/[^/]+$")
BUNDLE_NAME = ".collect.tar.gz"
# Written by the deploy for the supervisor; may hold secrets, never leaves the host.
NEVER_COLLECTED = (JOB_ENV_FILE,)
WORKER_DIR = re.compile(r"^(retry-[0-9]+/)?worker-[0-9]+$")
MB = 1024 * 1024


def artifact_files(run_dir: str, patterns: list[str]) -> list[str]:
    """Regular files below the run's worker directories whose path relative to their
    worker directory (or one of its parent directories) matches one of ``patterns``."""
    if not patterns:
        return []
    found = []
    for top in sorted(os.listdir(run_dir)):
        candidates = [top] + (
            [f"{top}/{d}" for d in sorted(os.listdir(os.path.join(run_dir, top)))]
            if top.startswith(RETRY_PREFIX) and os.path.isdir(os.path.join(run_dir, top))
            else []
        )
        for worker_rel in candidates:
            worker_dir = os.path.join(run_dir, worker_rel)
            if not WORKER_DIR.match(worker_rel) or not os.path.isdir(worker_dir) or os.path.islink(worker_dir):
                continue
            for root, dirs, files in os.walk(worker_dir):
                dirs[:] = sorted(d for d in dirs if not os.path.islink(os.path.join(root, d)))
                for name in sorted(files):
                    path = os.path.join(root, name)
                    inner = os.path.relpath(path, worker_dir).replace(os.sep, "/")
                    if name in NEVER_COLLECTED or os.path.islink(path) or not os.path.isfile(path):
                        continue
                    parts = inner.split("/")
                    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
                    if any(fnmatch.fnmatch(prefix, p.rstrip("/")) for p in patterns for prefix in prefixes):
                        found.append(f"{worker_rel}/{inner}")
    return sorted(found)


def within_cap(run_dir: str, first: list[str], rest: list[str], max_mb: int) -> tuple[list[str], list[dict[str, Any]]]:
    """``first`` (logs and records) always, then ``rest`` in order while the total stays
    within ``max_mb``; the files left out, with their sizes."""
    budget = max_mb * MB
    kept, left_out = [], []
    total = 0
    for rel in first:
        total += os.path.getsize(os.path.join(run_dir, rel))
        kept.append(rel)
    for rel in rest:
        if rel in kept:
            continue
        size = os.path.getsize(os.path.join(run_dir, rel))
        if total + size <= budget:
            total += size
            kept.append(rel)
        else:
            left_out.append({"path": rel, "bytes": size})
    return kept, left_out


def run_files(run_dir: str, patterns: list[str]) -> list[str]:
    """Files of the run's worker directories that match one of ``patterns``, sorted."""
    found = []
    for root, dirs, files in os.walk(run_dir):
        rel_root = os.path.relpath(root, run_dir)
        depth = 0 if rel_root == "." else rel_root.count(os.sep) + 1
        dirs[:] = [d for d in dirs if depth < 2 and d.startswith((WORKER_PREFIX, RETRY_PREFIX))]
        for name in files:
            rel = os.path.normpath(os.path.join(rel_root, name))
            path = os.path.join(root, name)
            if (
                WORKER_PATH.match(rel)
                and name not in NEVER_COLLECTED
                and any(fnmatch.fnmatch(name, p) for p in patterns)
                and os.path.isfile(path)
                and not os.path.islink(path)
            ):
                found.append(rel)
    return sorted(found)


def bundle(run_dir: str, files: list[str]) -> str:
    target = os.path.join(run_dir, BUNDLE_NAME)
    pending = target + ".part"
    with tarfile.open(pending, "w:gz", compresslevel=1) as archive:
        for rel in files:
            try:
                archive.add(os.path.join(run_dir, rel), arcname=rel, recursive=False)
            except FileNotFoundError:
                continue  # removed meanwhile
    os.chmod(pending, 0o600)
    os.replace(pending, target)
    return target


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "base_dir": {"type": "path", "required": True},
            "run_id": {"type": "str", "required": True},
            "patterns": {"type": "list", "elements": "str", "required": True},
            "artifacts": {"type": "list", "elements": "str", "default": []},
            "max_mb": {"type": "int", "default": 500},
            # Read by the action plugin on the controller; nothing to do on the host.
            "dest": {"type": "path", "required": True},
        },
        supports_check_mode=True,
    )
    params = module.params
    run_dir = run_dir_of(os.path.abspath(params["base_dir"]), params["run_id"])
    if not os.path.isdir(run_dir):
        module.exit_json(
            changed=False, bundle="", files=[], left_out=[], run_dir=run_dir, msg="no such run on this host"
        )
    files, left_out = within_cap(
        run_dir, run_files(run_dir, params["patterns"]), artifact_files(run_dir, params["artifacts"]), params["max_mb"]
    )
    result: dict[str, Any] = {
        "changed": False, "files": files, "left_out": left_out, "run_dir": run_dir, "bundle": ""
    }
    if files and not module.check_mode:
        result["bundle"] = bundle(run_dir, files)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
