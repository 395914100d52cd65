"""Collect one host's files of a run with a single transfer.

The module of the same name packs the run's worker files on the host; this action fetches
the archive and unpacks it on the controller under ``dest``, keeping each file's path
below the run directory. Fetching file by file costs a round trip (and a module run) per
file and host; this costs one per host. Its options and results are documented in the
module (plugins/modules/tf_collect_bundle.py).
"""

from __future__ import annotations

import hashlib
import os
import tarfile
import tempfile
from typing import Any, BinaryIO

from ansible.plugins.action import ActionBase

from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import make_private_dirs

# Most bytes of one member held in memory at once while unpacking.
CHUNK = 1024 * 1024


def safe_members(archive: tarfile.TarFile, files: list[str]) -> list[tarfile.TarInfo]:
    """Only the regular files the module said it packed, with relative, clean paths."""
    wanted = set(files)
    members = []
    for member in archive.getmembers():
        name = os.path.normpath(member.name)
        if member.isfile() and name in wanted and not os.path.isabs(name) and not name.startswith(".."):
            members.append(member)
    return members


def stream_member(source: BinaryIO, target: str) -> bool:
    """Copy ``source`` to ``target`` in chunks of `CHUNK` bytes, through a temporary file
    beside it, and replace ``target`` only when the content differs; True when it did.

    The copy is compared with the file on disk by SHA-256, both read in chunks: a member is
    never held whole in memory, however large the host's log.
    """
    fd, pending = tempfile.mkstemp(dir=os.path.dirname(target), prefix=".tf-collect-")
    try:
        os.fchmod(fd, 0o600)
        digest = hashlib.sha256()
        with os.fdopen(fd, "wb") as handle:
            for chunk in iter(lambda: source.read(CHUNK), b""):
                digest.update(chunk)
                handle.write(chunk)
        if file_sha256(target) == digest.hexdigest():
            os.unlink(pending)
            return False
        os.replace(pending, target)
        return True
    except BaseException:
        if os.path.exists(pending):
            os.unlink(pending)
        raise


def file_sha256(path: str) -> str:
    """SHA-256 of the file at ``path``, read in chunks; '' when there is none."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(CHUNK), b""):
                digest.update(chunk)
    except FileNotFoundError:
        return ""
    return digest.hexdigest()


def unpack(archive_path: str, dest: str, files: list[str]) -> list[str]:
    """Write the archive's files under ``dest``, each streamed to disk; return those whose
    content changed.

    Directories are made 0700 and files written 0600, whatever the umask: a run's logs and
    records (the job's arguments among them) are private on the controller as on the hosts.
    """
    changed = []
    with tarfile.open(archive_path, "r:gz") as archive:
        for member in safe_members(archive, files):
            source = archive.extractfile(member)
            if source is None:
                continue
            target = os.path.join(dest, os.path.normpath(member.name))
            make_private_dirs(os.path.dirname(target))
            with source:
                if stream_member(source, target):
                    changed.append(member.name)
    return changed


class ActionModule(ActionBase):
    """Pack on the host, fetch once, unpack on the controller."""

    _requires_connection = True

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        dest = args.get("dest")
        if not dest:
            return {**result, "failed": True, "msg": "dest is required"}
        packed = self._execute_module(module_name="tf_runbook.multiworker.tf_collect_bundle", module_args=args, task_vars=task_vars)
        if packed.get("failed"):
            return {**result, **packed}
        files = packed.get("files", [])
        left_out = packed.get("left_out", [])
        truncated = packed.get("truncated", [])
        if self._task.check_mode:
            # A dry run fetches nothing and writes nothing under dest: it names what it would fetch.
            preview = "".join(f"{os.path.join(dest, name)}\n" for name in files)
            return {**result, "changed": bool(files), "files": files, "left_out": left_out, "truncated": truncated,
                    "dest": dest,
                    **({"diff": {"before": "", "after": preview, "after_header": dest}} if self._task.diff else {})}
        if not packed.get("bundle"):
            return {**result, "changed": False, "files": files, "left_out": left_out, "truncated": truncated,
                    "dest": dest}
        with tempfile.TemporaryDirectory(prefix="tf-collect-") as scratch:
            local = os.path.join(scratch, "bundle.tar.gz")
            self._connection.fetch_file(packed["bundle"], local)
            make_private_dirs(dest)
            changed = unpack(local, dest, files)
        return {
            **result, "changed": bool(changed), "files": files, "left_out": left_out, "truncated": truncated,
            "updated": changed, "dest": dest,
        }
