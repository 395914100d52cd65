#!/usr/bin/python
# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Create a run's directories on a worker host without touching any earlier run."""

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
options:
  base_dir:
    description: Where this host keeps its runs.
    type: path
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
      remote user's home; it must then be absolute. Empty means under the run.
    type: path
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
  job_archive:
    description: A gzipped tar on this host (the user's project directory) unpacked into
      the job directory; members must stay inside it. Refused, before anything is unpacked,
      are absolute or escaping names, members below a symlink, symlinks that point outside
      the job directory or through another symlink of the archive, and anything but files,
      directories and symlinks; each member is checked again on the disk as it is written
      (tarfile's C(data) filter where the host's Python has it, else its real path). Empty
      for none.
    type: path
    default: ""
  job_env:
    description: Environment of every worker of this host, written with O(visible_devices)
      and O(pythonpath) to C(job_env.json) (mode 0600) in each worker's directory, for the
      supervisor. Never returned; the option is C(no_log), so its values are masked in
      the module's results and logs even when the task has no C(no_log).
    type: dict
    default: {}
  visible_devices:
    description: Worker index (a string) to its C(CUDA_VISIBLE_DEVICES); null for none.
    type: dict
    default: {}
  pythonpath:
    description: Put the job directory first on each worker's C(PYTHONPATH).
    type: bool
    default: false
  interpreter:
    description: The interpreter that will run the job; only shown in the diff (C(~) allowed).
    type: path
    default: ""
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

import hashlib
import json
import os
import tarfile
import tempfile
from typing import Any, Callable

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import (
    CHECKPOINT_OWNER_FILE,
    CHECKPOINTS_DIR,
    CONFIG_FILE,
    JOB_DIR,
    JOB_ENV_FILE,
    LAUNCH_RECORDS,
    RUN_ID_RULE,
    RUNS_DIR,
    attempt_dir_of,
    cluster_checksum,
    read_json,
    run_dir_of,
    run_id_is_safe,
    worker_dir_name,
    write_json_atomic,
)


def job_env_files(
    worker_dirs: dict[str, str], env: dict[str, object], devices: dict[str, object], job_dir: str, pythonpath: bool
) -> list[dict[str, object]]:
    """Each worker's ``job_env.json`` content: the host's environment, its own GPUs and the
    job directory on PYTHONPATH. Nothing when there is nothing to hand over."""
    if not env and not pythonpath and not any(v is not None for v in devices.values()):
        return []
    files = []
    for index in sorted(worker_dirs, key=int):
        values = {str(name): str(value) for name, value in env.items()}
        if devices.get(index) is not None:
            values["CUDA_VISIBLE_DEVICES"] = str(devices[index])
        if pythonpath:
            values["PYTHONPATH"] = os.pathsep.join(p for p in (job_dir, values.get("PYTHONPATH", "")) if p)
        files.append({"index": index, "content": json.dumps(values, sort_keys=True) + "\n"})
    return files


def _inside(root: str, path: str) -> bool:
    return path == root or path.startswith(root + os.sep)


# tarfile's own guard (Python 3.12+, backported to 3.11.4 and 3.10.12); None on an older
# host Python, where the real-path check below stands in for it.
DATA_FILTER: Callable[[tarfile.TarInfo, str], tarfile.TarInfo] | None = getattr(tarfile, "data_filter", None)


def archive_problem(member: tarfile.TarInfo, root: str, symlinks: set[str]) -> str:
    """Why ``member`` may not be unpacked into ``root`` ('' when it may), read from the names
    alone: an absolute or escaping name, a member below a symlink of the archive, a link
    whose target is absolute, leaves ``root`` or passes through a symlink of the archive,
    anything but a file, directory or symlink (devices, fifos, hard links)."""
    name = os.path.normpath(member.name)
    target = os.path.normpath(os.path.join(root, name))
    if os.path.isabs(member.name) or not _inside(root, target) or target == root:
        return f"archive member {member.name!r} is outside the job directory"
    parents = name.split(os.sep)[:-1]
    if any(os.sep.join(parents[: i + 1]) in symlinks for i in range(len(parents))):
        return f"archive member {member.name!r} lies below a symlink of the archive"
    if member.issym():
        pointed = os.path.normpath(os.path.join(os.path.dirname(target), member.linkname))
        if os.path.isabs(member.linkname) or not _inside(root, pointed):
            return f"archive symlink {member.name!r} points outside the job directory"
        steps = os.path.join(os.path.dirname(name), member.linkname).split(os.sep)
        if any(os.path.normpath(os.sep.join(steps[: i + 1])) in symlinks for i in range(len(steps))):
            return f"archive symlink {member.name!r} points through another symlink of the archive"
        return ""
    if not (member.isfile() or member.isdir()):
        return f"archive member {member.name!r} is not a file, directory or symlink"
    return ""


def real_path_problem(member: tarfile.TarInfo, root: str) -> str:
    """Why writing ``member`` now would leave ``root`` ('' when it would not), read from the
    disk as it is at this moment: the member's directory must be reached through no symlink
    at all, and a symlink must resolve inside ``root``. The stand-in for tarfile's ``data``
    filter, and stricter than it."""
    name = os.path.normpath(member.name)
    parent = os.path.normpath(os.path.join(root, os.path.dirname(name)))
    if os.path.realpath(parent) != parent:
        return f"archive member {member.name!r} would be written through a symlink on the host"
    if member.issym():
        pointed = os.path.realpath(os.path.join(parent, member.linkname))
        if not _inside(root, pointed):
            return f"archive symlink {member.name!r} points outside the job directory, to {pointed}"
    return ""


def guard_member(member: tarfile.TarInfo, root: str) -> None:
    """Raise ValueError when ``member``, written now, would land or point outside ``root``:
    tarfile's ``data`` filter where this Python has it, then the real-path check."""
    if DATA_FILTER is not None:
        try:
            DATA_FILTER(member, root)
        except tarfile.FilterError as exc:
            raise ValueError(f"archive member {member.name!r} refused: {exc}") from None
    problem = real_path_problem(member, root)
    if problem:
        raise ValueError(problem)


def unpack_job_archive(archive_path: str, job_dir: str, check: bool) -> list[str]:
    """Unpack the project archive into ``job_dir``, writing only what differs; refuse any
    member that would land (or point) outside it, checked by name for the whole archive
    first, then on the disk before each member is written."""
    root = os.path.realpath(job_dir) if os.path.isdir(job_dir) else os.path.abspath(job_dir)
    written = []
    with tarfile.open(archive_path, "r:gz") as archive:
        members = archive.getmembers()
        symlinks = {os.path.normpath(m.name) for m in members if m.issym()}
        for member in members:
            problem = archive_problem(member, root, symlinks)
            if problem:
                raise ValueError(problem)
        for member in members:
            target = os.path.join(root, os.path.normpath(member.name))
            guard_member(member, root)
            if member.isdir():
                if not os.path.isdir(target):
                    written.append(target)
                    if not check:
                        os.makedirs(target, mode=0o700, exist_ok=True)
            elif member.issym():
                if not (os.path.islink(target) and os.readlink(target) == member.linkname):
                    written.append(target)
                    if not check:
                        if os.path.lexists(target):
                            os.unlink(target)
                        os.symlink(member.linkname, target)
            else:
                source = archive.extractfile(member)
                content = source.read() if source is not None else b""
                if check and not os.path.isdir(os.path.dirname(target)):
                    written.append(target)
                elif write_bytes_if_changed(target, content, check, 0o700 if member.mode & 0o100 else 0o600):
                    written.append(target)
    return written


def write_bytes_if_changed(path: str, data: bytes, check: bool, mode: int) -> bool:
    """Write ``data`` atomically when the file is missing or differs; True if it did."""
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


def checkpoint_dir_of(run_dir: str, run_id: str, root: str) -> str:
    """The run's checkpoint directory: under the run, or ``<root>/<run_id>`` when the user
    set a root (``~`` already expanded for this user: the option's type is path). Raises
    ValueError for a relative root, which would otherwise land in each worker's working
    directory."""
    if not root:
        return os.path.join(run_dir, CHECKPOINTS_DIR)
    if not os.path.isabs(root):
        raise ValueError(f"tf_checkpoint_dir {root!r} is not an absolute path (nor starts with ~)")
    return os.path.join(os.path.normpath(root), run_id)


def configs_checksum(configs: list[dict[str, Any]]) -> str:
    """The checksum of the cluster every TF_CONFIG of this host names (they all name the
    same one); empty when there is none to read."""
    for entry in configs:
        content = entry.get("content")
        try:
            data = json.loads(content) if isinstance(content, str) else content
        except ValueError:
            continue
        if isinstance(data, dict) and isinstance(data.get("cluster"), dict):
            return cluster_checksum(data["cluster"])
    return ""


def checkpoint_owner_problem(checkpoint_dir: str, run_id: str, checksum: str) -> str | None:
    """On a shared ``tf_checkpoint_dir``, ``<root>/<run_id>`` records the run and cluster
    that own it: a run id reused by another cluster (another controller, another
    inventory) would resume from, and overwrite, backups not its own."""
    owner = read_json(os.path.join(checkpoint_dir, CHECKPOINT_OWNER_FILE))
    if owner is None or not checksum:
        return None
    if owner.get("run_id") != run_id or owner.get("cluster_checksum") != checksum:
        return (
            f"checkpoint directory {checkpoint_dir} belongs to run {owner.get('run_id')!r} of cluster "
            f"{str(owner.get('cluster_checksum'))[:12]}, not to run {run_id!r} of this cluster ({checksum[:12]}); "
            "its backups are not this run's: pick another tf_run_id or tf_checkpoint_dir"
        )
    return None


def write_if_changed(path: str, content: str, check: bool, mode: int = 0o600) -> bool:
    """Write ``content`` atomically when the file is missing or differs; True if it did."""
    return write_bytes_if_changed(path, content.encode("utf-8"), check, mode)


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
        targets.append((os.path.join(worker_dirs[index], CONFIG_FILE), str(entry["content"]), int(index)))
    written = []
    for path, content, _index in targets:
        if not os.path.isdir(os.path.dirname(path)):
            # Only in check mode on a fresh host: the directory would have been made.
            written.append(path)
        elif write_if_changed(path, content, check):
            written.append(path)
    read_back = []
    for path, _content, index in targets:
        if index is not None and os.path.isfile(path):
            with open(path, encoding="utf-8") as handle:
                read_back.append({"index": index, "content": handle.read()})
    return written, read_back


def sha256_text(content: str) -> str:
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


def describe_layout(
    interpreter: str, dirs: list[str], files: list[tuple[str, str]], configs: list[tuple[str, str]]
) -> str:
    """One line per item of a run on a host: the interpreter, the cluster list once, each
    directory, each job file ``(path, sha256)`` and each TF_CONFIG ``(path, content)``
    with the worker's index and port. Used for both sides of the diff."""
    lines = [f"interpreter: {interpreter}"] if interpreter else []
    parsed = []
    for path, content in configs:
        try:
            data = json.loads(content)
            workers = [str(w) for w in data["cluster"]["worker"]]
            index = int(data["task"]["index"])
        except (ValueError, KeyError, TypeError):
            parsed.append((path, None, -1, "unreadable TF_CONFIG"))
            continue
        endpoint = workers[index] if 0 <= index < len(workers) else "?"
        parsed.append((path, workers, index, f"index {index}, port {endpoint.rpartition(':')[2]}"))
    clusters = [workers for _path, workers, _index, _what in parsed if workers is not None]
    shared = clusters[0] if clusters and all(c == clusters[0] for c in clusters) else None
    if shared is not None:
        lines.append(f"TF_CONFIG cluster ({len(shared)} workers): {', '.join(shared)}")
    lines += [f"directory {path}/ (mode 0700)" for path in dirs]
    lines += [f"file {path} sha256 {digest}" for path, digest in files]
    for path, workers, _index, what in parsed:
        own = "" if shared is not None or workers is None else f", cluster {', '.join(workers)}"
        lines.append(f"TF_CONFIG {path}: {what}{own}")
    return "\n".join(lines) + "\n" if lines else ""


def layout_diff(
    interpreter: str, run_dir: str, dirs: list[str], job_dir: str, worker_dirs: dict[str, str],
    job_files: list[dict[str, Any]], configs: list[dict[str, Any]],
) -> dict[str, str]:
    """The diff of this host's run: what exists on disk now against what is wanted."""
    wanted_files = [(os.path.join(job_dir, str(f.get("name", ""))), str(f.get("content", ""))) for f in job_files]
    wanted_configs = [
        (os.path.join(worker_dirs[str(int(c["index"]))], CONFIG_FILE), str(c["content"]))
        for c in configs
        if str(int(c["index"])) in worker_dirs
    ]

    def on_disk(path: str) -> str | None:
        try:
            with open(path, encoding="utf-8") as handle:
                return handle.read()
        except (OSError, UnicodeDecodeError):
            return None

    before_files = [(p, sha256_text(c)) for p, c in ((p, on_disk(p)) for p, _content in wanted_files) if c is not None]
    before_configs = [(p, c) for p, c in ((p, on_disk(p)) for p, _content in wanted_configs) if c is not None]
    return {
        "before_header": run_dir,
        "after_header": run_dir,
        "before": describe_layout(interpreter, [d for d in dirs if os.path.isdir(d)], before_files, before_configs),
        "after": describe_layout(interpreter, dirs, [(p, sha256_text(c)) for p, c in wanted_files], wanted_configs),
    }


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "base_dir": {"type": "path", "required": True},
            "run_id": {"type": "str", "required": True},
            "indices": {"type": "list", "elements": "int", "required": True},
            "attempt": {"type": "int", "default": 0},
            "checkpoint_root": {"type": "path", "default": ""},
            "job_files": {"type": "list", "elements": "dict", "default": []},
            "configs": {"type": "list", "elements": "dict", "default": []},
            "job_archive": {"type": "path", "default": ""},
            # Secrets, often: masked in every result and log, also without a task-level no_log.
            "job_env": {"type": "dict", "default": {}, "no_log": True},
            "visible_devices": {"type": "dict", "default": {}},
            "pythonpath": {"type": "bool", "default": False},
            "interpreter": {"type": "path", "default": ""},
        },
        supports_check_mode=True,
    )
    if module.no_log:
        # The task hides the whole result already. Masking job_env's values inside it too
        # would corrupt it: Ansible replaces every occurrence of a no_log value in the
        # result, and a value such as TF_CPP_MIN_LOG_LEVEL's "2" is part of every TF_CONFIG
        # read back. job_env is this module's only no_log option.
        module.no_log_values.clear()
    run_id = module.params["run_id"]
    if not run_id_is_safe(run_id):
        module.fail_json(msg=f"run id {run_id!r} is not safe as a directory name: {RUN_ID_RULE}")
    base_dir = os.path.abspath(module.params["base_dir"])
    run_dir = run_dir_of(base_dir, run_id)
    job_dir = os.path.join(run_dir, JOB_DIR)
    try:
        checkpoint_dir = checkpoint_dir_of(run_dir, run_id, module.params["checkpoint_root"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    checksum = configs_checksum(module.params["configs"])
    if module.params["checkpoint_root"]:
        problem = checkpoint_owner_problem(checkpoint_dir, run_id, checksum)
        if problem:
            module.fail_json(msg=problem, run_dir=run_dir)
    attempt = module.params["attempt"]
    if attempt < 0:
        module.fail_json(msg=f"attempt {attempt} is negative")
    attempt_dir = attempt_dir_of(run_dir, attempt)
    worker_dirs = {str(i): os.path.join(attempt_dir, worker_dir_name(i)) for i in module.params["indices"]}

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
        os.path.join(base_dir, RUNS_DIR),
        run_dir,
        job_dir,
        attempt_dir,
        *worker_dirs.values(),
        checkpoint_dir,
    ]
    # The base directory and runs/ too: an existing one keeps no wider mode.
    private = {base_dir, os.path.join(base_dir, RUNS_DIR), run_dir, job_dir, checkpoint_dir, attempt_dir,
               *worker_dirs.values()}
    diff = None
    if module._diff:
        interpreter = module.params["interpreter"]
        diff = layout_diff(
            interpreter, run_dir, [p for p in dict.fromkeys(wanted) if p in private],
            job_dir, worker_dirs, module.params["job_files"], module.params["configs"],
        )
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
    owner_file = os.path.join(checkpoint_dir, CHECKPOINT_OWNER_FILE)
    if module.params["checkpoint_root"] and checksum and not os.path.exists(owner_file):
        written_owner = True
        if not module.check_mode:
            try:
                write_json_atomic(owner_file, {"run_id": run_id, "cluster_checksum": checksum})
                os.chmod(owner_file, 0o600)
            except OSError as exc:
                module.fail_json(msg=f"cannot record the owner of {checkpoint_dir}: {exc}")
    else:
        written_owner = False
    try:
        written, read_back = write_files(
            job_dir, worker_dirs, module.params["job_files"], module.params["configs"], module.check_mode
        )
    except (OSError, ValueError) as exc:
        module.fail_json(msg=f"cannot write the run's files: {exc}")
    params = module.params
    try:
        archive = params["job_archive"]
        if archive and module.check_mode and not os.path.isfile(archive):
            written.append(job_dir)  # check mode: the archive would have been sent first
        elif archive:
            written += unpack_job_archive(archive, job_dir, module.check_mode)
        for entry in job_env_files(
            worker_dirs, params["job_env"], params["visible_devices"], job_dir, params["pythonpath"]
        ):
            path = os.path.join(worker_dirs[entry["index"]], JOB_ENV_FILE)
            if not os.path.isdir(os.path.dirname(path)) or write_if_changed(path, str(entry["content"]), module.check_mode):
                written.append(path)
    except (OSError, ValueError, tarfile.TarError) as exc:
        module.fail_json(msg=f"cannot write the job directory or the workers' environment: {exc}")
    module.exit_json(
        changed=changed or written_owner or bool(written),
        written=written,
        read_back=read_back,
        base_dir=base_dir,
        run_dir=run_dir,
        job_dir=job_dir,
        checkpoint_dir=checkpoint_dir,
        worker_dirs=worker_dirs,
        **({"diff": diff} if diff is not None else {}),
    )


if __name__ == "__main__":
    main()
