#!/usr/bin/python
"""Pack one host's files of a run into a single archive, so that collecting a run costs one
transfer per host instead of one per file (see the action plugin of the same name)."""

from __future__ import annotations

import fnmatch
import os
import re
import tarfile
from typing import Any

from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import (
    JOB_ENV_FILE,
    RETRY_PREFIX,
    WORKER_PREFIX,
    run_dir_of,
)

DOCUMENTATION = r"""
module: tf_collect_bundle
short_description: Pack a run's worker files on a host into one archive
description:
  - Looks in the run's C(worker-<i>) and C(retry-<k>/worker-<i>) directories for files
    matching C(patterns) and writes them, with their path below the run directory, to
    C(<run dir>/.collect.tar.gz), replacing an earlier bundle. Nothing else is touched.
options:
  base_dir:
    type: str
    required: true
  run_id:
    type: str
    required: true
  patterns:
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
      C(left_out).
    type: int
    default: 500
"""

RETURN = r"""
bundle:
  description: Path of the archive on the host ('' when no file matched).
  type: str
files:
  description: Paths of the packed files, relative to the run directory.
  type: list
left_out:
  description: Files matched but not packed (over O(max_mb)), with C(path) and C(bytes).
  type: list
"""

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
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "base_dir": {"type": "str", "required": True},
            "run_id": {"type": "str", "required": True},
            "patterns": {"type": "list", "elements": "str", "required": True},
            "artifacts": {"type": "list", "elements": "str", "default": []},
            "max_mb": {"type": "int", "default": 500},
        },
        supports_check_mode=True,
    )
    params = module.params
    run_dir = run_dir_of(os.path.abspath(os.path.expanduser(params["base_dir"])), params["run_id"])
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
