#!/usr/bin/python
"""Create a run's directories on a worker host without touching any earlier run."""

from __future__ import annotations

import os
import tempfile
from typing import Any

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: tf_run_dir
short_description: Create the directories of one training run on this host
description:
  - Expands O(base_dir) for the remote user (C(~) is that user's home), then makes
    C(<base_dir>/runs/<run_id>/job) and one C(worker-<index>) directory per worker, all
    mode 0700 so that other users can neither read nor write them; O(base_dir) and its
    C(runs) are made 0700 too, also when they existed with another mode.
  - The run's checkpoint directory is C(<run>/checkpoints), or C(<checkpoint_root>/<run_id>)
    when O(checkpoint_root) is set: one directory per run id even on a shared path, so
    that no run resumes from, or overwrites, another run's backups.
  - Idempotent for a run that has not been launched yet. Fails, changing nothing, when a
    worker directory of this run already holds a launch record (C(state.json) or
    C(exit.json)): a run id is used once, and an earlier run's files are never touched.
  - Supports check mode.
options:
  base_dir:
    description: Where this host keeps its runs.
    type: str
    required: true
  run_id:
    description: The run id; one path component.
    type: str
    required: true
  indices:
    description: Worker indices that run on this host.
    type: list
    elements: int
    required: true
  checkpoint_root:
    description: Where the user keeps checkpoints (C(tf_checkpoint_dir)); C(~) is the
      remote user's home; it must then be absolute. Empty; under the run.
    type: str
    default: ""
  attempt:
    description: Restart attempt; 0 is the first launch.
    type: int
    default: 0
  job_files:
    description: Files of the job, each C(name) and C(content), written (mode 0600) into
      the job directory when missing or different.
    type: list
    elements: dict
    default: []
  configs:
    description: Each worker's TF_CONFIG, C(index) and C(content), written to
      C(tf_config.json) in its directory when missing or different, then read back.
    type: list
    elements: dict
    default: []
"""

RETURN = r"""
base_dir:
  description: O(base_dir), absolute.
  type: str
run_dir:
  description: The run's directory.
  type: str
job_dir:
  description: Where the job's files go.
  type: str
checkpoint_dir:
  description: The run's checkpoint directory (absolute), shared by its attempts and by no other run.
  type: str
worker_dirs:
  description: Worker index (as a string) to its directory.
  type: dict
written:
  description: Files that were (or in check mode would be) written.
  type: list
read_back:
  description: Each TF_CONFIG as read from disk after writing, with C(index) and C(content).
  type: list
"""

LAUNCH_RECORDS = ("state.json", "exit.json")


def checkpoint_dir_of(run_dir: str, run_id: str, root: str) -> str:
    """The run's checkpoint directory: under the run, or ``<root>/<run_id>`` when the user
    set a root (``~`` expanded for this user). Raises ValueError for a relative root,
    which would otherwise land in each worker's working directory."""
    if not root:
        return os.path.join(run_dir, "checkpoints")
    expanded = os.path.expanduser(root)
    if not os.path.isabs(expanded):
        raise ValueError(f"tf_checkpoint_dir {root!r} is not an absolute path (nor starts with ~)")
    return os.path.join(os.path.normpath(expanded), run_id)


def write_if_changed(path: str, content: str, check: bool, mode: int = 0o600) -> bool:
    """Write ``content`` atomically when the file is missing or differs; True if it did."""
    data = content.encode("utf-8")
    try:
        with open(path, "rb") as handle:
            if handle.read() == data and (os.stat(path).st_mode & 0o7777) == mode:
                return False
    except FileNotFoundError:
        pass
    if check:
        return True
    fd, pending = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
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


def write_files(
    job_dir: str, worker_dirs: dict[str, str], job_files: list[dict[str, Any]], configs: list[dict[str, Any]], check: bool
) -> tuple[list[str], list[dict[str, Any]]]:
    """Write the job files and TF_CONFIGs; read the TF_CONFIGs back from disk."""
    targets = []
    for entry in job_files:
        name = str(entry.get("name", ""))
        if not name or "/" in name or name in {".", ".."}:
            raise ValueError(f"job file name {name!r} is not one path component")
        targets.append((os.path.join(job_dir, name), str(entry.get("content", "")), None))
    for entry in configs:
        index = str(int(entry["index"]))
        if index not in worker_dirs:
            raise ValueError(f"TF_CONFIG for worker {index}, which does not run on this host")
        targets.append((os.path.join(worker_dirs[index], "tf_config.json"), str(entry["content"]), int(index)))
    written = []
    for path, content, _ in targets:
        if not os.path.isdir(os.path.dirname(path)):
            # Only in check mode on a fresh host: the directory would have been made.
            written.append(path)
        elif write_if_changed(path, content, check):
            written.append(path)
    read_back = []
    for path, _, index in targets:
        if index is not None and os.path.isfile(path):
            with open(path, encoding="utf-8") as handle:
                read_back.append({"index": index, "content": handle.read()})
    return written, read_back


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "base_dir": {"type": "str", "required": True},
            "run_id": {"type": "str", "required": True},
            "indices": {"type": "list", "elements": "int", "required": True},
            "attempt": {"type": "int", "default": 0},
            "checkpoint_root": {"type": "str", "default": ""},
            "job_files": {"type": "list", "elements": "dict", "default": []},
            "configs": {"type": "list", "elements": "dict", "default": []},
        },
        supports_check_mode=True,
    )
    run_id = module.params["run_id"]
    if not run_id or "/" in run_id or run_id in {".", ".."}:
        module.fail_json(msg=f"run id {run_id!r} is not one path component")
    base_dir = os.path.abspath(os.path.expanduser(module.params["base_dir"]))
    run_dir = os.path.join(base_dir, "runs", run_id)
    job_dir = os.path.join(run_dir, "job")
    try:
        checkpoint_dir = checkpoint_dir_of(run_dir, run_id, module.params["checkpoint_root"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    attempt = module.params["attempt"]
    if attempt < 0:
        module.fail_json(msg=f"attempt {attempt} is negative")
    attempt_dir = run_dir if attempt == 0 else os.path.join(run_dir, f"retry-{attempt}")
    worker_dirs = {str(i): os.path.join(attempt_dir, f"worker-{i}") for i in module.params["indices"]}

    for index, path in worker_dirs.items():
        for record in LAUNCH_RECORDS:
            if os.path.exists(os.path.join(path, record)):
                module.fail_json(
                    msg=(
                        f"run id {run_id!r} was already launched here ({path}/{record} "
                        "exists); pick a new tf_run_id, earlier runs are never overwritten"
                    ),
                    run_dir=run_dir,
                )

    wanted = [
        base_dir,
        os.path.join(base_dir, "runs"),
        run_dir,
        job_dir,
        attempt_dir,
        *worker_dirs.values(),
        checkpoint_dir,
    ]
    # The base directory and runs/ too: an existing one keeps no wider mode.
    private = {base_dir, os.path.join(base_dir, "runs"), run_dir, job_dir, checkpoint_dir, attempt_dir,
               *worker_dirs.values()}
    changed = False
    for path in dict.fromkeys(wanted):
        mode = 0o700 if path in private else None
        if not os.path.isdir(path):
            changed = True
            if not module.check_mode:
                try:
                    os.makedirs(path, mode=0o700, exist_ok=True)
                except OSError as exc:
                    module.fail_json(msg=f"cannot create {path}: {exc}")
        elif mode is not None and (os.stat(path).st_mode & 0o777) != mode:
            changed = True
            if not module.check_mode:
                os.chmod(path, mode)
        if mode is not None and not module.check_mode and os.path.isdir(path):
            # makedirs honours the umask; the run's directories must be private anyway.
            if (os.stat(path).st_mode & 0o777) != mode:
                os.chmod(path, mode)
    try:
        written, read_back = write_files(
            job_dir, worker_dirs, module.params["job_files"], module.params["configs"], module.check_mode
        )
    except (OSError, ValueError) as exc:
        module.fail_json(msg=f"cannot write the run's files: {exc}")
    module.exit_json(
        changed=changed or bool(written),
        written=written,
        read_back=read_back,
        base_dir=base_dir,
        run_dir=run_dir,
        job_dir=job_dir,
        checkpoint_dir=checkpoint_dir,
        worker_dirs=worker_dirs,
    )


if __name__ == "__main__":
    main()
