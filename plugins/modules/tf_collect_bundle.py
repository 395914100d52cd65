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
    the files whose content changed; each file is streamed to disk, never held whole in
    the controller's memory.
  - A worker's C(job_env.json) (the environment handed to the job) is never collected.
  - In check mode nothing is packed, fetched or written; the files that would be fetched
    are returned (and shown in diff mode).
extends_documentation_fragment:
  - tf_runbook.multiworker.attributes
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
    description: Most this host sends, in MB. The worker files matching O(patterns) come
      first, then artifacts in path order while they fit. Of the first, a record (any file
      but a text log) comes whole when it is no larger than the cap (64 KiB at least, so the
      supervisor's records come even with 0); the text logs (C(*.log), C(*.txt), C(*.out),
      C(*.err)) share what is left, smallest first, each whole when it fits in an equal
      share. A log over its share is sent as its head and its tail, cut at line ends, with
      a marker line between that says how many bytes were cut (64 KiB at least in all); it
      is listed in RV(truncated). Any other file that does not fit is listed in
      RV(left_out).
    type: int
    default: 500
  dest:
    description: Controller directory that receives the files (created when missing);
      read by the action plugin, the module on the host ignores it.
    type: path
    required: true
attributes:
  check_mode:
    support: full
    details: In check mode nothing is packed, fetched or written.
  diff_mode:
    support: partial
    details: In check mode, the files that would be fetched are shown as the archive's listing.
  platform:
    platforms: posix
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
truncated:
  description: Logs sent as their head and tail (over their share of O(max_mb)), each with
    C(path), C(bytes) (its size on the host), C(sent) (what the bundle holds, marker
    included), C(head_bytes), C(tail_bytes) and C(cut_bytes); the whole log stays on the host.
  type: list
  elements: dict
  returned: always
  sample: [{"path": worker-0/worker.log, "bytes": 3221225472, "sent": 524287982,
            "head_bytes": 262143910, "tail_bytes": 262143941, "cut_bytes": 2696937621}]
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
from typing import Any, BinaryIO, Iterator, NamedTuple

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
# Files that may be sent as their head and tail when over their share of max_mb: text logs.
CUTTABLE = ("*.log", "*.txt", "*.out", "*.err")
# However small the cap, a cut log keeps this much (head and tail together, with the marker).
MIN_CUT = 64 * 1024
# How far back (forward) from the head's end (the tail's start) a cut looks for a line end.
LINE_SEARCH = 64 * 1024
# Most bytes of a cut log held in memory at once while packing.
CHUNK = 64 * 1024


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


def within_cap(
    run_dir: str, first: list[str], rest: list[str], max_mb: int
) -> tuple[list[str], list[dict[str, Any]], dict[str, Cut]]:
    """What this host sends within ``max_mb``: ``first`` (logs and records), then ``rest``
    (artifacts) in order while the total stays within the cap. Returns the files sent, the
    files left out with their sizes, and the logs sent cut (path to its `Cut`).

    Records (``first`` files that are not text logs) come whole, as they cannot be cut,
    each when it is no larger than the cap (at least `MIN_CUT`: the supervisor's records
    come even with ``max_mb`` 0), else it is left out. The logs share what is left fairly,
    smallest first, each whole when it fits in an equal share of what is left; a log over
    its share is cut to its head and tail (at least `MIN_CUT` bytes in all)."""
    budget = max_mb * MB
    sizes = {rel: os.path.getsize(os.path.join(run_dir, rel)) for rel in dict.fromkeys(first)}
    kept: list[str] = []
    left_out: list[dict[str, Any]] = []
    cuts: dict[str, Cut] = {}
    left = budget
    logs = sorted((rel for rel in sizes if cuttable(rel)), key=lambda rel: (sizes[rel], rel))
    for rel in sorted(rel for rel in sizes if not cuttable(rel)):
        if sizes[rel] <= max(budget, MIN_CUT):
            left -= sizes[rel]
            kept.append(rel)
        else:
            left_out.append({"path": rel, "bytes": sizes[rel]})
    for position, rel in enumerate(logs):
        share = max(left, 0) // (len(logs) - position)
        size = sizes[rel]
        if size <= max(share, MIN_CUT):
            left -= size
        else:
            cuts[rel] = plan_cut(os.path.join(run_dir, rel), size, max(share, MIN_CUT), max_mb)
            left -= cuts[rel].sent
        kept.append(rel)
    kept.sort()
    left_out.sort(key=lambda entry: entry["path"])
    for rel in rest:
        if rel in sizes:
            continue
        size = os.path.getsize(os.path.join(run_dir, rel))
        if size <= left:
            left -= size
            kept.append(rel)
        else:
            left_out.append({"path": rel, "bytes": size})
    return kept, left_out, cuts


def cuttable(rel: str) -> bool:
    """Whether a file may be sent as its head and tail: a text log, not a record."""
    return any(fnmatch.fnmatch(rel.rsplit("/", 1)[-1], pattern) for pattern in CUTTABLE)


def cut_marker(cut_bytes: int, max_mb: int) -> bytes:
    """The line that stands where a log was cut; says how much is missing and why."""
    return (
        f"\n[tf-runbook collect: {cut_bytes} bytes of this log cut here to keep within "
        f"tf_collect_max_mb={max_mb}; the whole log stays on the host]\n"
    ).encode()


def plan_cut(path: str, size: int, keep: int, max_mb: int) -> Cut:
    """How to send the log at ``path`` (``size`` bytes) in about ``keep`` bytes: its first and
    last halves of what is left beside the marker, each ending (head) or starting (tail) at
    a line boundary when one lies within the last (first) `LINE_SEARCH` bytes."""
    marker_room = len(cut_marker(size, max_mb))
    half = max(keep - marker_room, 0) // 2
    head_end, tail_start = half, size - half
    with open(path, "rb") as handle:
        handle.seek(max(head_end - LINE_SEARCH, 0))
        block = handle.read(head_end - max(head_end - LINE_SEARCH, 0))
        newline = block.rfind(b"\n")
        if newline >= 0:
            head_end = head_end - len(block) + newline + 1
        handle.seek(tail_start)
        block = handle.read(min(LINE_SEARCH, size - tail_start))
        newline = block.find(b"\n")
        if newline >= 0 and tail_start + newline + 1 < size:
            tail_start += newline + 1
    return Cut(head_end, tail_start, size, cut_marker(tail_start - head_end, max_mb))


class Cut(NamedTuple):
    """A log sent as bytes [0, head_end) and [tail_start, size) with ``marker`` between."""

    head_end: int
    tail_start: int
    size: int
    marker: bytes

    @property
    def sent(self) -> int:
        return self.head_end + len(self.marker) + self.size - self.tail_start

    def record(self, rel: str) -> dict[str, Any]:
        """What RV(truncated) says of this log."""
        return {
            "path": rel,
            "bytes": self.size,
            "sent": self.sent,
            "head_bytes": self.head_end,
            "tail_bytes": self.size - self.tail_start,
            "cut_bytes": self.tail_start - self.head_end,
        }


class CutReader:
    """The bytes of a `Cut` log as one stream (its head, the marker, its tail), read in
    chunks of at most `CHUNK` bytes: no more than that is held in memory."""

    def __init__(self, handle: BinaryIO, cut: Cut) -> None:
        self._pieces = self._generate(handle, cut)
        self._pending = b""

    @staticmethod
    def _generate(handle: BinaryIO, cut: Cut) -> Iterator[bytes]:
        for span in ((0, cut.head_end), cut.marker, (cut.tail_start, cut.size)):
            if isinstance(span, bytes):
                yield span
                continue
            start, end = span
            handle.seek(start)
            while start < end:
                want = min(CHUNK, end - start)
                # A log that shrank meanwhile is padded: the archive promised its size.
                data = handle.read(want) or b"\n" * want
                start += len(data)
                yield data

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self._pending) < size:
            piece = next(self._pieces, None)
            if piece is None:
                break
            self._pending += piece
        cut = len(self._pending) if size < 0 else size
        data, self._pending = self._pending[:cut], self._pending[cut:]
        return data


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


def bundle(run_dir: str, files: list[str], cuts: dict[str, Cut] | None = None) -> str:
    """Pack ``files`` (paths below ``run_dir``) into the run's bundle, each log of ``cuts``
    as its head and tail; return the bundle's path."""
    cuts = cuts or {}
    target = os.path.join(run_dir, BUNDLE_NAME)
    pending = target + ".part"
    with tarfile.open(pending, "w:gz", compresslevel=1) as archive:
        for rel in files:
            path = os.path.join(run_dir, rel)
            try:
                if rel not in cuts:
                    archive.add(path, arcname=rel, recursive=False)
                    continue
                with open(path, "rb") as handle:
                    info = archive.gettarinfo(arcname=rel, fileobj=handle)
                    info.size = cuts[rel].sent
                    archive.addfile(info, CutReader(handle, cuts[rel]))  # type: ignore[arg-type]
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
            changed=False, bundle="", files=[], left_out=[], truncated=[], run_dir=run_dir,
            msg="no such run on this host",
        )
    files, left_out, cuts = within_cap(
        run_dir, run_files(run_dir, params["patterns"]), artifact_files(run_dir, params["artifacts"]), params["max_mb"]
    )
    result: dict[str, Any] = {
        "changed": False, "files": files, "left_out": left_out, "run_dir": run_dir, "bundle": "",
        "truncated": [cut.record(rel) for rel, cut in sorted(cuts.items())],
    }
    if files and not module.check_mode:
        result["bundle"] = bundle(run_dir, files, cuts)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
