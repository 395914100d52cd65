# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A host's collect bundle, in one place: what is packed on the host and how the
controller unpacks it (issue 26).

Two module runs pack it: tf_collect_bundle (the collect phase, or collect.yml alone) and
the wait's last status run of a successful attempt (tf_worker_status), so that the common
path fetches each host's files without a module run of its own. Their actions fetch the
archive in one transfer and unpack it with the same code. The rules, each once:

- what is packed: the files of the run's ``worker-<i>`` and ``retry-<k>/worker-<i>``
  directories whose names match the patterns, and the artifacts whose path below a worker
  directory matches (a directory takes everything below it); never ``job_env.json``, never
  a link;
- the cap: everything sent sums to ``max_mb`` at most: records whole, smallest first, while
  they fit; the logs sharing what is left (a log over its share sent as its head and tail
  with a marker line, or left out when its share is under `MIN_SHARE`); then the artifacts
  while they fit. ``max_mb`` 0 is no cap: each record up to `MIN_CUT`, each log up to
  `MIN_CUT`. What is left out or cut is returned, never dropped silently;
- the unpack: only the regular files the host said it packed, with relative clean paths,
  streamed to disk (0600 in 0700 directories) and replaced only when their content changed.

Standard library only (with tf_run): the host side runs inside the modules.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import re
import tarfile
import tempfile
from typing import Any, BinaryIO, Callable, Iterator, NamedTuple

from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import (
    JOB_ENV_FILE,
    RETRY_PREFIX,
    WORKER_PREFIX,
    make_private_dirs,
)

# --- On the host: what is packed -------------------------------------------------------

WORKER_PATH = re.compile(r"^(retry-[0-9]+/)?worker-[0-9]+/[^/]+$")
BUNDLE_NAME = ".collect.tar.gz"
# Written by the deploy for the supervisor; may hold secrets, never leaves the host.
NEVER_COLLECTED = (JOB_ENV_FILE,)
WORKER_DIR = re.compile(r"^(retry-[0-9]+/)?worker-[0-9]+$")
MB = 1024 * 1024
# Files that may be sent as their head and tail when over their share of max_mb: text logs.
CUTTABLE = ("*.log", "*.txt", "*.out", "*.err")
# With max_mb 0 (no cap), each record up to this size comes whole, and each log comes whole
# up to it, else cut to it (head and tail together, with the marker).
MIN_CUT = 64 * 1024
# Under a cap, a log whose share is smaller than this is left out rather than cut to a few
# lines around its marker.
MIN_SHARE = 4 * 1024
# How far back (forward) from the head's end (the tail's start) a cut looks for a line end.
LINE_SEARCH = 64 * 1024
# Most bytes of a cut log held in memory at once while packing.
CHUNK = 64 * 1024
# Most bytes of one member held in memory at once while unpacking.
UNPACK_CHUNK = 1024 * 1024


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
    files left out with their sizes, and the logs sent cut (path to its `Cut`). Everything
    sent sums to ``max_mb`` MB at most, records included.

    Records (``first`` files that are not text logs) come whole, as they cannot be cut,
    smallest first while they fit in what the smaller ones left; a record that does not
    fit is left out (listed, with its size). The logs share what the records left, smallest
    first, each whole when it fits in an equal share of what is left; a log over its share
    is cut to its head and tail within the share, and left out when the share is under
    `MIN_SHARE`.

    ``max_mb`` 0 is no cap (the supervisor's records and the ends of the logs still come):
    each record whole when it is no larger than `MIN_CUT`, each log whole up to `MIN_CUT`,
    else cut to `MIN_CUT`."""
    budget = max_mb * MB
    sizes = {rel: os.path.getsize(os.path.join(run_dir, rel)) for rel in dict.fromkeys(first)}
    kept: list[str] = []
    left_out: list[dict[str, Any]] = []
    cuts: dict[str, Cut] = {}
    left = budget
    logs = sorted((rel for rel in sizes if cuttable(rel)), key=lambda rel: (sizes[rel], rel))
    for rel in sorted((rel for rel in sizes if not cuttable(rel)), key=lambda rel: (sizes[rel], rel)):
        if sizes[rel] <= (left if budget else MIN_CUT):
            left -= sizes[rel]
            kept.append(rel)
        else:
            left_out.append({"path": rel, "bytes": sizes[rel]})
    for position, rel in enumerate(logs):
        share = left // (len(logs) - position) if budget else MIN_CUT
        size = sizes[rel]
        if size <= share:
            left -= size
        elif share >= MIN_SHARE:
            cuts[rel] = plan_cut(os.path.join(run_dir, rel), size, share, max_mb)
            left -= cuts[rel].sent
        else:
            left_out.append({"path": rel, "bytes": size})
            continue
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


def pack_run(run_dir: str, patterns: list[str], artifacts: list[str], max_mb: int, write: bool = True) -> dict[str, Any]:
    """The run's files within ``max_mb`` (see within_cap), packed into the run's bundle
    when ``write`` (not in check mode) and any file matched. Returns ``run_dir``, ``files``
    (paths below the run directory), ``left_out``, ``truncated`` (each cut log's record) and
    ``bundle`` (the archive's path on the host, '' when nothing was packed): the results of
    tf_collect_bundle, and the ``bundle`` of the wait's last status run."""
    files, left_out, cuts = within_cap(run_dir, run_files(run_dir, patterns), artifact_files(run_dir, artifacts), max_mb)
    return {
        "run_dir": run_dir,
        "files": files,
        "left_out": left_out,
        "truncated": [cut.record(rel) for rel, cut in sorted(cuts.items())],
        "bundle": bundle(run_dir, files, cuts) if files and write else "",
    }


# --- On the controller: the unpack ----------------------------------------------------


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
    """Copy ``source`` to ``target`` in chunks of `UNPACK_CHUNK` bytes, through a temporary file
    beside it, and replace ``target`` only when the content differs; True when it did.

    The copy is compared with the file on disk by SHA-256, both read in chunks: a member is
    never held whole in memory, however large the host's log.
    """
    fd, pending = tempfile.mkstemp(dir=os.path.dirname(target), prefix=".tf-collect-")
    try:
        os.fchmod(fd, 0o600)
        digest = hashlib.sha256()
        with os.fdopen(fd, "wb") as handle:
            for chunk in iter(lambda: source.read(UNPACK_CHUNK), b""):
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
            for chunk in iter(lambda: handle.read(UNPACK_CHUNK), b""):
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


def receive(fetch: Callable[[str, str], Any], packed: dict[str, Any], dest: str) -> list[str]:
    """Fetch a host's bundle (``packed["bundle"]``, as pack_run returned it) with
    ``fetch(remote_path, local_path)`` (the connection's fetch_file) into a private scratch
    directory, and unpack the files the host said it packed under ``dest`` (made 0700 when
    missing). Returns the files whose content changed."""
    with tempfile.TemporaryDirectory(prefix="tf-collect-") as scratch:
        local = os.path.join(scratch, "bundle.tar.gz")
        fetch(packed["bundle"], local)
        make_private_dirs(dest)
        return unpack(local, dest, packed.get("files", []))
