#!/usr/bin/python
"""Pack one host's files of a run into a single archive, so that collecting a run costs one
transfer per host instead of one per file (see the action plugin of the same name)."""

from __future__ import annotations

import fnmatch
import os
import re
import tarfile
from typing import Any

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
"""

RETURN = r"""
bundle:
  description: Path of the archive on the host ('' when no file matched).
  type: str
files:
  description: Paths of the packed files, relative to the run directory.
  type: list
"""

WORKER_PATH = re.compile(r"^(retry-[0-9]+/)?worker-[0-9]+/[^/]+$")
BUNDLE_NAME = ".collect.tar.gz"


def run_files(run_dir: str, patterns: list[str]) -> list[str]:
    """Files of the run's worker directories that match one of ``patterns``, sorted."""
    found = []
    for root, dirs, files in os.walk(run_dir):
        rel_root = os.path.relpath(root, run_dir)
        depth = 0 if rel_root == "." else rel_root.count(os.sep) + 1
        dirs[:] = [d for d in dirs if depth < 2 and (d.startswith("worker-") or d.startswith("retry-"))]
        for name in files:
            rel = os.path.normpath(os.path.join(rel_root, name))
            path = os.path.join(root, name)
            if (
                WORKER_PATH.match(rel)
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
        },
        supports_check_mode=True,
    )
    params = module.params
    run_dir = os.path.join(os.path.abspath(os.path.expanduser(params["base_dir"])), "runs", params["run_id"])
    if not os.path.isdir(run_dir):
        module.exit_json(changed=False, bundle="", files=[], run_dir=run_dir, msg="no such run on this host")
    files = run_files(run_dir, params["patterns"])
    result: dict[str, Any] = {"changed": False, "files": files, "run_dir": run_dir, "bundle": ""}
    if files and not module.check_mode:
        result["bundle"] = bundle(run_dir, files)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
