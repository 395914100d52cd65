#!/usr/bin/python
# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One host's part of copying the chief's checkpoint to every host (issue 23, point 5)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: tf_checkpoint_sync
short_description: Copy the chief's checkpoint directory to the hosts that do not share it
version_added: "0.1.0"
author: tf-runbook contributors (!UNKNOWN)
description:
  - TensorFlow's checkpointing (C(PreemptionCheckpointHandler), Keras' C(BackupAndRestore)) has only the chief
    write the checkpoint and every worker read it back on restore, which assumes a filesystem every host shares.
    Before a restart or a resume the runbook makes every host's run checkpoint directory
    (C(TF_RUNBOOK_CHECKPOINT_DIR)) hold the chief's files, in steps, each one task over the hosts.
  - O(mode=mark) on the chief's host writes a marker file named by O(marker) into O(dir);
    O(mode=look) on every other host tells whether that marker is seen there (C(shared)); a directory every host
    shares needs no copy.
  - O(mode=pack) on the chief's host removes the marker and, with O(copy) true, packs every file of O(dir) (but
    the runbook's own files) into an uncompressed tar archive; the action plugin brings it to the controller at
    O(dest) and removes it from the host.
  - O(mode=unpack) on a host that does not share the directory takes the archive the action plugin sent from the
    controller's O(src) and writes every file of it into O(dir), replacing the files of the same name and the
    files of the chief's last copy that the chief no longer has; nothing else of the directory, and nothing
    outside it, is touched. Only plain files and directories are accepted, a member's path must stay inside
    O(dir), and no symbolic link on the way is followed.
  - O(dir) is one run's own directory (C(<run>/checkpoints), or C(<tf_checkpoint_dir>/<run_id>)); another run's
    files are never reached.
extends_documentation_fragment:
  - tf_runbook.multiworker.attributes
options:
  mode:
    description: The step (see above).
    type: str
    choices: [mark, look, pack, unpack]
    required: true
  dir:
    description: This host's checkpoint directory of the run (C(tf_worker_checkpoint_dir)), absolute.
    type: path
    required: true
  marker:
    description: The random name part of the marker file, the same for O(mode=mark), O(mode=look) and
      O(mode=pack).
    type: str
    default: ""
  copy:
    description: With O(mode=pack), pack the directory (some host does not share it); false only removes the
      marker.
    type: bool
    default: true
  src:
    description: With O(mode=unpack), the archive on the controller (handled by the action plugin).
    type: path
  dest:
    description: With O(mode=pack), where the action plugin puts the archive on the controller.
    type: path
  archive:
    description: The archive's path on this host, in the task's temporary directory (set by the action plugin).
    type: path
attributes:
  check_mode:
    support: full
    details: In check mode nothing is written, packed or unpacked; O(mode=look) still looks.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Mark the chief's checkpoint directory
  tf_runbook.multiworker.tf_checkpoint_sync:
    mode: mark
    dir: "{{ tf_worker_checkpoint_dir }}"
    marker: "{{ marker }}"
  when: inventory_hostname == tf_cluster_spec.chief

- name: Unpack the chief's checkpoint on a host that does not share it
  tf_runbook.multiworker.tf_checkpoint_sync:
    mode: unpack
    dir: "{{ tf_worker_checkpoint_dir }}"
    src: runs/20260101T120000Z-abc123/.checkpoint-1.tar
"""

RETURN = r"""
shared:
  description: With O(mode=look), whether this host sees the chief's marker (the directory is shared).
  type: bool
  returned: mode look
files:
  description: How many files were packed or unpacked.
  type: int
  returned: mode pack and unpack
bytes:
  description: Their size in bytes.
  type: int
  returned: mode pack and unpack
removed:
  description: Files of the chief's last copy that the chief no longer has, removed by O(mode=unpack).
  type: list
  elements: str
  returned: mode unpack
links_left_out:
  description: With O(mode=pack), the symbolic links under the chief's directory that were not packed (a
    link may point anywhere), relative to it.
  type: list
  elements: str
  returned: mode pack, when something was packed
archive:
  description: With O(mode=pack), the archive on the host (removed by the action plugin once fetched); empty when
    nothing was packed.
  type: str
  returned: mode pack
"""

import json
import os
import stat
import tarfile
import tempfile
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import (
    CHECKPOINT_MARKER_PREFIX,
    CHECKPOINT_OWNER_FILE,
    CHECKPOINT_SYNCED_FILE,
)

# The runbook's own files in a checkpoint directory: never copied, never replaced.
OWN_FILES = (CHECKPOINT_OWNER_FILE, CHECKPOINT_SYNCED_FILE)


def is_own_file(name: str) -> bool:
    return name in OWN_FILES or name.startswith(CHECKPOINT_MARKER_PREFIX)


def marker_path(directory: str, marker: str) -> str:
    if not marker or "/" in marker or marker in (".", ".."):
        raise ValueError(f"marker {marker!r} is not a file name")
    return os.path.join(directory, CHECKPOINT_MARKER_PREFIX + marker)


def chief_files(directory: str, links: list[str] | None = None) -> list[str]:
    """Every plain file under ``directory``, relative, sorted; the runbook's own files and
    symbolic links are left out (a link may point anywhere): each link left out is added
    to ``links``, so that the copy can say what it did not carry."""
    found = []
    for root, dirs, files in os.walk(directory):
        for name in sorted(dirs):
            if os.path.islink(os.path.join(root, name)) and links is not None:
                links.append(os.path.relpath(os.path.join(root, name), directory))
        dirs[:] = sorted(d for d in dirs if not os.path.islink(os.path.join(root, d)))
        for name in sorted(files):
            path = os.path.join(root, name)
            relative = os.path.relpath(path, directory)
            if root == directory and is_own_file(name):
                continue
            mode = os.lstat(path).st_mode
            if stat.S_ISREG(mode):
                found.append(relative)
            elif stat.S_ISLNK(mode) and links is not None:
                links.append(relative)
    return found


def pack(directory: str, archive: str) -> dict[str, Any]:
    """An uncompressed tar of the chief's files (checkpoints hardly compress; gzip would
    cost more time than it saves)."""
    links: list[str] = []
    names = chief_files(directory, links) if os.path.isdir(directory) else []
    size = 0
    with tarfile.open(archive, "w") as tar:
        for name in names:
            path = os.path.join(directory, name)
            size += os.lstat(path).st_size
            tar.add(path, arcname=name, recursive=False)
    return {"files": len(names), "bytes": size, "links_left_out": sorted(links)}


def member_name(name: str) -> str:
    """A member's path, normalised; refused when it would leave the directory."""
    clean = os.path.normpath(name)
    if not name or os.path.isabs(name) or clean == "." or clean.startswith("..") or "\x00" in name:
        raise ValueError(f"archive member {name!r} would leave the checkpoint directory")
    if is_own_file(clean):
        raise ValueError(f"archive member {name!r} would replace a file of the runbook")
    return clean


def real_parent(directory: str, relative: str, check: bool) -> str:
    """The parent directory of ``relative`` under ``directory``, made where missing;
    refused where a part of the way is a link or not a directory."""
    path = directory
    for part in relative.split(os.sep)[:-1]:
        path = os.path.join(path, part)
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            if not check:
                os.mkdir(path, 0o700)
            continue
        if not stat.S_ISDIR(info.st_mode):
            raise ValueError(f"{path} is in the way of the chief's file {relative} (not a directory)")
    return path


def under_real_directories(directory: str, relative: str) -> bool:
    """Whether every directory on the way from ``directory`` to ``relative`` is a real
    directory (no link): only then does ``relative`` name a file inside ``directory``."""
    path = directory
    for part in relative.split(os.sep)[:-1]:
        path = os.path.join(path, part)
        try:
            if not stat.S_ISDIR(os.lstat(path).st_mode):
                return False
        except OSError:
            return False
    return True


def unpack(directory: str, archive: str, check: bool) -> dict[str, Any]:
    """Write every file of ``archive`` into ``directory``; remove the files of the chief's
    last copy it no longer has; record this copy's files."""
    with tarfile.open(archive, "r:*") as tar:
        members = tar.getmembers()
        plan = []
        for member in members:
            name = member_name(member.name)
            if member.isdir():
                continue
            if not member.isfile():
                raise ValueError(f"archive member {member.name!r} is not a plain file")
            plan.append((name, member))
        names = [name for name, _member in plan]
        previous = read_synced(directory)
        stale = sorted(set(previous) - set(names))
        size = sum(member.size for _name, member in plan)
        if check:
            return {"files": len(plan), "bytes": size, "removed": stale}
        os.makedirs(directory, mode=0o700, exist_ok=True)
        for name, member in plan:
            parent = real_parent(directory, name, check)
            source = tar.extractfile(member)
            if source is None:
                raise ValueError(f"archive member {member.name!r} cannot be read")
            handle, pending = tempfile.mkstemp(dir=parent, prefix=".tf-runbook-unpack-")
            try:
                with os.fdopen(handle, "wb") as out:
                    while True:
                        chunk = source.read(1 << 20)
                        if not chunk:
                            break
                        out.write(chunk)
                os.chmod(pending, 0o600)
                target = os.path.join(directory, name)
                if os.path.isdir(target) and not os.path.islink(target):
                    raise ValueError(f"{target} is a directory where the chief has a file")
                os.replace(pending, target)  # replaces a link itself, never its target
            except BaseException:
                if os.path.lexists(pending):
                    os.unlink(pending)
                raise
    for name in stale:
        if not under_real_directories(directory, name):
            continue  # a part of its way became a link: whatever it names is not the chief's copy
        path = os.path.join(directory, name)
        if stat.S_ISREG(os.lstat(path).st_mode) if os.path.lexists(path) else False:
            os.unlink(path)
    write_synced(directory, names)
    return {"files": len(plan), "bytes": size, "removed": stale}


def read_synced(directory: str) -> list[str]:
    """The files the chief's last copy wrote here (safe names only)."""
    try:
        with open(os.path.join(directory, CHECKPOINT_SYNCED_FILE), encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return []
    names = data.get("files") if isinstance(data, dict) else None
    safe = []
    for name in names if isinstance(names, list) else []:
        try:
            safe.append(member_name(str(name)))
        except ValueError:
            continue
    return safe


def write_synced(directory: str, names: list[str]) -> None:
    path = os.path.join(directory, CHECKPOINT_SYNCED_FILE)
    pending = f"{path}.{os.getpid()}.tmp"
    with open(pending, "w", encoding="utf-8") as handle:
        json.dump({"files": names}, handle, sort_keys=True)
    os.chmod(pending, 0o600)
    os.replace(pending, path)


def run(params: dict[str, Any], check: bool) -> dict[str, Any]:
    """The result of one step on this host."""
    directory = params["dir"]
    if not os.path.isabs(directory):
        raise ValueError(f"checkpoint directory {directory!r} is not absolute")
    mode = params["mode"]
    if mode == "mark":
        path = marker_path(directory, params["marker"])
        if check:
            return {"changed": True}
        os.makedirs(directory, mode=0o700, exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("tf-runbook: this directory is the chief's; a host that sees this file shares it\n")
        return {"changed": True}
    if mode == "look":
        return {"changed": False, "shared": os.path.exists(marker_path(directory, params["marker"]))}
    if mode == "pack":
        path = marker_path(directory, params["marker"])
        if not check and os.path.lexists(path):
            os.unlink(path)
        if not params["copy"] or check:
            return {"changed": False, "files": 0, "bytes": 0, "archive": ""}
        archive = params["archive"]
        if not archive:
            handle, archive = tempfile.mkstemp(prefix="tf-runbook-checkpoint-", suffix=".tar")
            os.close(handle)
        descriptor = os.open(archive, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.close(descriptor)
        return {"changed": False, "archive": archive, **pack(directory, archive)}
    if not params["archive"]:
        raise ValueError("mode unpack needs the archive on the host (given by the action plugin)")
    return {"changed": not check, **unpack(directory, params["archive"], check)}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "mode": {"type": "str", "choices": ["mark", "look", "pack", "unpack"], "required": True},
            "dir": {"type": "path", "required": True},
            "marker": {"type": "str", "default": ""},
            "copy": {"type": "bool", "default": True},
            "src": {"type": "path"},
            "dest": {"type": "path"},
            "archive": {"type": "path"},
        },
        supports_check_mode=True,
    )
    try:
        result = run(module.params, module.check_mode)
    except (OSError, ValueError, tarfile.TarError) as exc:
        module.fail_json(msg=f"tf_checkpoint_sync {module.params['mode']} in {module.params['dir']}: {exc}")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
