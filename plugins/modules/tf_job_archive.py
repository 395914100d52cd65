#!/usr/bin/python
# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Check a user's project directory (tf_train_dir) and pack it into one archive.

Runs on the controller (``delegate_to: localhost``) during the preflight: what it refuses
is refused before anything is written on a host. The archive is deterministic (sorted
entries, no times, no owners), so its SHA-256 names its content: a host that already holds
``<sha256>.tar.gz`` is not sent it again.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: tf_job_archive
short_description: Check and pack a training project directory on the controller
version_added: "0.1.0"
author: tf-runbook contributors (!UNKNOWN)
description:
  - Walks O(train_dir), leaving out O(exclude) (glob patterns matched against each entry's
    name and its path below O(train_dir)).
  - Reports each problem in RV(problems) instead of failing; a problem is a directory that
    does not exist, content over O(max_mb), a symlink that points outside the directory,
    or an entry script O(script) that is missing from it or is not valid Python.
  - Without problems, writes C(<dest>/<sha256>.tar.gz) unless it exists (not in check
    mode). The archive is deterministic (sorted entries, no times, no owners), so its
    SHA-256 names its content.
  - Meant to run on the controller (delegated to C(localhost)) during the preflight.
extends_documentation_fragment:
  - tf_runbook.multiworker.attributes
options:
  train_dir:
    description: The project directory to pack.
    type: path
    required: true
  script:
    description: The entry script, relative to O(train_dir) (an absolute path inside it is accepted).
    type: str
    required: true
  exclude:
    description: Glob patterns of entries left out (C(.git), C(*.pyc), C(data/raw/*)).
    type: list
    elements: str
    default: []
  max_mb:
    description: Most the packed files may hold, in MB, after O(exclude) (the role passes C(tf_train_dir_max_mb)).
    type: int
    required: true
  dest:
    description: Controller directory that keeps the archives.
    type: path
    required: true
attributes:
  check_mode:
    support: full
    details: In check mode no archive is written.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Check and pack the project directory once, on the controller
  tf_runbook.multiworker.tf_job_archive:
    train_dir: ~/projects/mnist
    script: train.py
    exclude: [".git", "__pycache__", "*.pyc"]
    max_mb: 100
    dest: runs/.job-archives
  register: job_archive
  delegate_to: localhost
  run_once: true

- name: Refuse a bad project directory
  ansible.builtin.fail:
    msg: "{{ job_archive.problems | join('; ') }}"
  when: job_archive.problems | length > 0
  run_once: true
"""

RETURN = r"""
problems:
  description: One message per problem, each naming the path and the figure.
  type: list
  elements: str
  returned: always
  sample: ["tf_train_dir /home/u/mnist: 312.4 MB after tf_train_dir_exclude, over tf_train_dir_max_mb=200"]
path:
  description: The archive on the controller ('' with problems or in check mode).
  type: str
  returned: always
sha256:
  description: SHA-256 of the archive ('' with problems).
  type: str
  returned: always
script:
  description: The entry script, relative to the job directory.
  type: str
  returned: always
  sample: train.py
files:
  description: Number of files packed.
  type: int
  returned: always
bytes:
  description: Their total size.
  type: int
  returned: always
"""

import fnmatch
import gzip
import hashlib
import io
import os
import tarfile
from typing import Any

from ansible.module_utils.basic import AnsibleModule

MB = 1024 * 1024


def excluded(rel: str, patterns: list[str]) -> bool:
    """Whether the entry at ``rel`` (relative, '/'-separated) is left out."""
    name = rel.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatch(name, p) or fnmatch.fnmatch(rel, p) for p in patterns)


def walk(root: str, patterns: list[str]) -> tuple[list[tuple[str, str]], list[str]]:
    """Entries below ``root`` as (relative path, kind: dir, file or link), sorted, and the
    problems seen (symlinks pointing outside ``root``, entries that are neither)."""
    root = os.path.realpath(root)
    entries: list[tuple[str, str]] = []
    problems: list[str] = []
    for current, dirs, files in os.walk(root):
        rel_dir = os.path.relpath(current, root)
        rel_dir = "" if rel_dir == "." else rel_dir.replace(os.sep, "/") + "/"
        kept = []
        for name in sorted(dirs):
            rel = rel_dir + name
            if excluded(rel, patterns):
                continue
            path = os.path.join(current, name)
            if os.path.islink(path):
                entries.append((rel, "link"))  # os.walk does not follow it
            else:
                kept.append(name)
                entries.append((rel, "dir"))
        dirs[:] = kept
        for name in sorted(files):
            rel = rel_dir + name
            if excluded(rel, patterns):
                continue
            path = os.path.join(current, name)
            if os.path.islink(path):
                entries.append((rel, "link"))
            elif os.path.isfile(path):
                entries.append((rel, "file"))
            else:
                problems.append(f"tf_train_dir {root}: {rel} is not a regular file, directory or symlink")
    for rel, kind in entries:
        if kind != "link":
            continue
        target = os.path.realpath(os.path.join(root, rel))
        if target != root and not target.startswith(root + os.sep):
            problems.append(
                f"tf_train_dir {root}: symlink {rel} points outside the directory, to {target}"
            )
    return sorted(entries), problems


def entry_script(root: str, script: str) -> tuple[str, str]:
    """The entry script relative to ``root``, and a problem ('' when none)."""
    root = os.path.realpath(root)
    candidate = script if os.path.isabs(script) else os.path.join(root, script)
    resolved = os.path.realpath(candidate)
    if not resolved.startswith(root + os.sep):
        return "", f"tf_train_script {script}: not inside tf_train_dir {root}"
    rel = os.path.relpath(os.path.abspath(candidate), root).replace(os.sep, "/")
    if rel.startswith("../"):
        return "", f"tf_train_script {script}: not inside tf_train_dir {root}"
    return rel, ""


def script_problems(root: str, rel: str, packed: set[str]) -> list[str]:
    path = os.path.join(os.path.realpath(root), rel)
    if not os.path.isfile(path):
        return [f"tf_train_script {rel}: no such file in tf_train_dir {os.path.realpath(root)}"]
    if rel not in packed:
        return [f"tf_train_script {rel}: left out of tf_train_dir by tf_train_dir_exclude"]
    if rel.endswith(".py"):
        with open(path, "rb") as handle:
            source = handle.read()
        try:
            compile(source, path, "exec")
        except SyntaxError as exc:
            return [f"tf_train_script {rel} in tf_train_dir: line {exc.lineno}: {exc.msg}"]
        except ValueError as exc:
            return [f"tf_train_script {rel} in tf_train_dir: {exc}"]
    return []


def pack(root: str, entries: list[tuple[str, str]]) -> bytes:
    """A gzipped tar of ``entries``: same content, same bytes (no times, owners or umask)."""
    root = os.path.realpath(root)
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for rel, kind in entries:
            path = os.path.join(root, rel)
            info = tarfile.TarInfo(rel)
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                info.mode = 0o700
                archive.addfile(info)
            elif kind == "link":
                info.type = tarfile.SYMTYPE
                # Relative, so that it still points inside the job directory on a host.
                info.linkname = os.path.relpath(os.path.realpath(path), os.path.dirname(os.path.join(root, rel)))
                info.mode = 0o777
                archive.addfile(info)
            else:
                executable = os.stat(path).st_mode & 0o100
                info.mode = 0o700 if executable else 0o600
                with open(path, "rb") as handle:
                    data = handle.read()
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0, compresslevel=6) as zipped:
        zipped.write(raw.getvalue())
    return out.getvalue()


def inspect(train_dir: str, script: str, exclude: list[str], max_mb: int) -> dict[str, Any]:
    """Everything but the writing: entries, entry script, size and the problems."""
    if not os.path.isdir(train_dir):
        return {"problems": [f"tf_train_dir {train_dir}: not a directory on the controller"], "entries": []}
    entries, problems = walk(train_dir, exclude)
    root = os.path.realpath(train_dir)
    size = sum(os.path.getsize(os.path.join(root, rel)) for rel, kind in entries if kind == "file")
    if size > max_mb * MB:
        problems.append(
            f"tf_train_dir {root}: {size / MB:.1f} MB after tf_train_dir_exclude, "
            f"over tf_train_dir_max_mb={max_mb}"
        )
    rel, problem = entry_script(root, script)
    if problem:
        problems.append(problem)
    else:
        problems.extend(script_problems(root, rel, {r for r, kind in entries if kind == "file"}))
    return {
        "problems": problems,
        "entries": entries,
        "script": rel,
        "bytes": size,
        "files": sum(1 for _rel, kind in entries if kind == "file"),
    }


def write_archive(dest: str, data: bytes) -> tuple[str, str, bool]:
    """Store ``data`` as ``<dest>/<sha256>.tar.gz``; True when it was written now."""
    digest = hashlib.sha256(data).hexdigest()
    path = os.path.join(dest, f"{digest}.tar.gz")
    if os.path.isfile(path):
        return path, digest, False
    os.makedirs(dest, mode=0o700, exist_ok=True)
    pending = f"{path}.part-{os.getpid()}"
    with open(pending, "wb") as handle:
        handle.write(data)
    os.chmod(pending, 0o600)
    os.replace(pending, path)
    return path, digest, True


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "train_dir": {"type": "path", "required": True},
            "script": {"type": "str", "required": True},
            "exclude": {"type": "list", "elements": "str", "default": []},
            "max_mb": {"type": "int", "required": True},
            "dest": {"type": "path", "required": True},
        },
        supports_check_mode=True,
    )
    params = module.params
    seen = inspect(params["train_dir"], params["script"], params["exclude"], params["max_mb"])
    result: dict[str, Any] = {
        "changed": False,
        "problems": seen["problems"],
        "script": seen.get("script", ""),
        "files": seen.get("files", 0),
        "bytes": seen.get("bytes", 0),
        "path": "",
        "sha256": "",
    }
    if not seen["problems"]:
        data = pack(params["train_dir"], seen["entries"])
        if module.check_mode:
            result["sha256"] = hashlib.sha256(data).hexdigest()
        else:
            try:
                result["path"], result["sha256"], result["changed"] = write_archive(params["dest"], data)
            except OSError as exc:
                module.fail_json(msg=f"cannot write the job archive under {params['dest']}: {exc}")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
