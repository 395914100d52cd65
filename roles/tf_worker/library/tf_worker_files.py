#!/usr/bin/python
"""Write a run's files on a worker host in one module run, and read back what landed.

The job (training script and supervisor) and every worker's TF_CONFIG used to take one
copy task each, plus one slurp per worker: a round trip apiece, on the launch's critical
path. This writes them all at once, atomically and only when their content differs, then
reads the TF_CONFIG files back from disk so that the cluster-wide check sees what the
workers will really load.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: tf_worker_files
short_description: Write a run's job files and TF_CONFIGs on a host, then read them back
description:
  - Writes each entry of O(files) (absolute path, text content, mode) when the file is
    missing or differs; the parent directories must exist (module tf_run_dir makes them).
  - Entries with a C(index) are TF_CONFIG files; they are read back after writing and
    returned in RV(read_back).
  - Supports check mode (reports what would change; reads back only files that exist).
options:
  files:
    description: Files to write, each C(path), C(content), optional C(mode) (default 0600)
      and optional C(index) (the worker whose TF_CONFIG it is).
    type: list
    elements: dict
    required: true
"""

RETURN = r"""
written:
  description: Paths that were (or in check mode would be) written.
  type: list
read_back:
  description: Each TF_CONFIG as read from disk, with C(index) and C(content).
  type: list
"""


def write_if_changed(path: str, content: str, mode: int, check: bool) -> bool:
    data = content.encode("utf-8")
    try:
        with open(path, "rb") as handle:
            same = handle.read() == data
        if same and (os.stat(path).st_mode & 0o7777) == mode:
            return False
    except FileNotFoundError:
        pass
    if check:
        return True
    directory = os.path.dirname(path)
    fd, pending = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(pending, mode)
        os.replace(pending, path)
    except BaseException:
        if os.path.exists(pending):
            os.unlink(pending)
        raise
    return True


def main() -> None:
    module = AnsibleModule(
        argument_spec={"files": {"type": "list", "elements": "dict", "required": True}},
        supports_check_mode=True,
    )
    written: list[str] = []
    read_back: list[dict[str, Any]] = []
    for entry in module.params["files"]:
        path = entry.get("path")
        if not path or not os.path.isabs(str(path)):
            module.fail_json(msg=f"file entry needs an absolute path: {entry.get('path')!r}")
        if not os.path.isdir(os.path.dirname(path)):
            if module.check_mode:
                # A check run on a fresh host: tf_run_dir would have made the directory.
                written.append(path)
                continue
            module.fail_json(msg=f"directory of {path} does not exist")
        mode = int(str(entry.get("mode", "0600")), 8)
        try:
            if write_if_changed(path, str(entry.get("content", "")), mode, module.check_mode):
                written.append(path)
        except OSError as exc:
            module.fail_json(msg=f"cannot write {path}: {exc}")
    for entry in module.params["files"]:
        if entry.get("index") is None or not os.path.exists(entry["path"]):
            continue
        with open(entry["path"], encoding="utf-8") as handle:
            read_back.append({"index": int(entry["index"]), "content": handle.read()})
    module.exit_json(changed=bool(written), written=written, read_back=read_back)


if __name__ == "__main__":
    main()
