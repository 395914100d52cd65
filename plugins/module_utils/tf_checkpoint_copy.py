# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Copying the chief's checkpoint directory to a host that does not share it (issue 23
point 5, issue 38): what module tf_checkpoint_sync does on each host, step by step.

A copy is whole or not at all. The chief's files are packed (each a plain member, with
its time) into an archive beside its checkpoint directory; on a host they are staged in a
directory inside its checkpoint directory (the same filesystem), fsynced, and only then
renamed into place, the pointer files (TensorFlow's ``checkpoint``, the default job's
``latest``) last, so that a pointer never names a checkpoint whose files are not there.
The record of the copy (``.tf-runbook-synced.json``) says ``complete`` only once every
file and directory is on the disk; a copy cut short (no completion, a staging directory
left over) is seen by the next look and redone. Before anything is packed, the space it
needs is measured on the chief, the controller and each host, and the chief's checkpoint
is compared with what each host holds of its last copy: an empty or an older one is
refused rather than silently leaving a host on another checkpoint or removing a newer one.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import tarfile
import tempfile
from typing import Any

from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import (
    CHECKPOINT_ARCHIVE_PREFIX,
    CHECKPOINT_LOCK_FILE,
    CHECKPOINT_MARKER_PREFIX,
    CHECKPOINT_OWN_PREFIX,
    CHECKPOINT_STAGING_PREFIX,
    CHECKPOINT_SYNCED_FILE,
    POINTER_FILES,
)
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run_files import own_directory_problem

# What a tar member costs beyond its data: a ustar header and a pax header (the mtime
# with its fraction) of a block each, the data rounded up to a block; then the end of
# the archive and its last record. An estimate a little above the real size.
TAR_BLOCK = 512
TAR_MEMBER_OVERHEAD = 3 * TAR_BLOCK
TAR_END = 2 * TAR_BLOCK + tarfile.RECORDSIZE


def is_own_file(name: str) -> bool:
    """A name at the top of a checkpoint directory that is the runbook's, not the job's."""
    return name.startswith(CHECKPOINT_OWN_PREFIX)


def is_pointer(name: str) -> bool:
    return os.path.basename(name) in POINTER_FILES


def marker_path(directory: str, marker: str, host: str) -> str:
    """The marker ``host`` leaves in its checkpoint directory during the copy ``marker``
    (every host marks, so that hosts sharing a directory see each other's)."""
    if not marker or "/" in marker or marker in (".", ".."):
        raise ValueError(f"marker {marker!r} is not a file name")
    return os.path.join(directory, f"{marker_prefix(marker)}{hashlib.sha256(host.encode()).hexdigest()[:16]}")


def marker_prefix(marker: str) -> str:
    return f"{CHECKPOINT_MARKER_PREFIX}{marker}-"


def seen_hosts(directory: str, marker: str) -> list[str]:
    """The hosts whose marker of the copy ``marker`` this directory holds (their names are
    the markers' contents, each checked against its file name)."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    seen = []
    for name in names:
        if not name.startswith(marker_prefix(marker)):
            continue
        try:
            with open(os.path.join(directory, name), encoding="utf-8") as handle:
                host = handle.read(1024).strip()
        except OSError:
            continue  # removed meanwhile by a host that shares the directory
        if os.path.basename(marker_path(directory, marker, host)) == name:
            seen.append(host)
    return sorted(seen)


def checked_directory(directory: str) -> str:
    """``directory``, refused when it is not absolute, is a link, or another user's."""
    if not os.path.isabs(directory):
        raise ValueError(f"checkpoint directory {directory!r} is not absolute")
    problem = own_directory_problem(directory)
    if problem:
        raise ValueError(problem)
    return directory


def make_directory(directory: str) -> None:
    """Make the checkpoint directory (0700) with mkdir, its parents as needed; one that
    appears meanwhile is judged again."""
    os.makedirs(os.path.dirname(directory), mode=0o700, exist_ok=True)
    try:
        os.mkdir(directory, 0o700)
    except FileExistsError:
        pass
    checked_directory(directory)


def megabytes(size: int) -> str:
    """A size as the refusals say it: MB, kB below one MB."""
    if size >= 1_000_000:
        return f"{size / 1e6:.0f} MB"
    return f"{size / 1e3:.0f} kB"


def free_bytes(path: str) -> int:
    """The space an unprivileged user may still write on ``path``'s filesystem (its
    nearest existing directory)."""
    probe = os.path.abspath(path)
    while not os.path.isdir(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    info = os.statvfs(probe)
    return info.f_bavail * info.f_frsize


def archive_bytes(sizes: list[int]) -> int:
    """The size of an archive of files of ``sizes`` (an estimate from above)."""
    return sum(TAR_MEMBER_OVERHEAD + -(-size // TAR_BLOCK) * TAR_BLOCK for size in sizes) + TAR_END


def chief_files(directory: str, links: list[str] | None = None, hard_links: list[str] | None = None) -> list[str]:
    """Every plain file under ``directory``, relative, sorted; the runbook's own entries and
    symbolic links are left out (a link may point anywhere): each link left out is added to
    ``links``, each file with more than one name to ``hard_links`` (it is packed as a plain
    file under each name), so that the copy can say what it did."""
    found = []
    for root, dirs, files in os.walk(directory):
        top = root == directory
        for name in sorted(dirs):
            if os.path.islink(os.path.join(root, name)) and links is not None:
                links.append(os.path.relpath(os.path.join(root, name), directory))
        dirs[:] = sorted(d for d in dirs if not os.path.islink(os.path.join(root, d)) and not (top and is_own_file(d)))
        for name in sorted(files):
            if top and is_own_file(name):
                continue
            path = os.path.join(root, name)
            relative = os.path.relpath(path, directory)
            info = os.lstat(path)
            if stat.S_ISREG(info.st_mode):
                found.append(relative)
                if info.st_nlink > 1 and hard_links is not None:
                    hard_links.append(relative)
            elif stat.S_ISLNK(info.st_mode) and links is not None:
                links.append(relative)
    return found


def checkpoint_number(name: str, text: str) -> int | None:
    """The number of the checkpoint a pointer file names: TensorFlow's ``checkpoint``
    (``model_checkpoint_path: "ckpt-12"``), the default job's ``latest`` (``12 epoch-12-...``
    first); None when it names none that can be read."""
    if os.path.basename(name) == "checkpoint":
        found = re.search(r'^model_checkpoint_path:\s*"([^"]*)"', text, re.MULTILINE)
        number = re.search(r"-(\d+)$", os.path.basename(found.group(1))) if found else None
        return int(number.group(1)) if number else None
    first = text.split(None, 1)
    return int(first[0]) if first and first[0].isdigit() else None


def pointer_numbers(directory: str, names: list[str]) -> dict[str, int]:
    """Each pointer file among ``names`` (relative to ``directory``) to the number it names."""
    numbers = {}
    for name in names:
        if not is_pointer(name):
            continue
        try:
            with open(os.path.join(directory, name), encoding="utf-8", errors="replace") as handle:
                number = checkpoint_number(name, handle.read(1 << 16))
        except OSError:
            continue
        if number is not None:
            numbers[name] = number
    return numbers


def leftovers(directory: str) -> list[str]:
    """Staging directories of a copy that was killed before it ended."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(name for name in names if name.startswith(CHECKPOINT_STAGING_PREFIX))


def file_sha256(path: str) -> str:
    """The sha256 of a file's bytes (read without following a link)."""
    digest = hashlib.sha256()
    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(descriptor, "rb") as handle:
        while True:
            data = handle.read(1 << 20)
            if not data:
                return digest.hexdigest()
            digest.update(data)


def manifest(directory: str) -> dict[str, list[Any]]:
    """Each of the chief's files (chief_files) to ``[size, sha256]``: what a host's look
    compares its own files with, and what each receiver of the copy checks before the swap."""
    if not os.path.isdir(directory):
        return {}
    found = {}
    for name in chief_files(directory):
        path = os.path.join(directory, name)
        found[name] = [os.lstat(path).st_size, file_sha256(path)]
    return found


def holds_chiefs_files(directory: str, chiefs: dict[str, Any], record: dict[str, Any], incomplete: bool) -> str:
    """Why this directory does not already hold the chief's files (``chiefs``: name to
    ``[size, sha256]``); "" when it holds every one of them with the same size and sha256
    and nothing of the chief's last copy that the chief no longer has (a copy would move
    nothing). Sizes first, hashes only where every size matched."""
    if not chiefs:
        return "the chief has no file"
    if incomplete:
        return "its last copy was cut short"
    for name in sorted(chiefs):
        path = os.path.join(directory, name)
        try:
            info = os.lstat(path)
        except OSError:
            return f"it lacks {name}"
        if not stat.S_ISREG(info.st_mode) or not under_real_directories(directory, name):
            return f"its {name} is not a plain file"
        if info.st_size != int(chiefs[name][0]):
            return f"its {name} has another size"
    stale = sorted(set(record["files"]) - set(chiefs))
    for name in stale:
        if os.path.lexists(os.path.join(directory, name)):
            return f"it holds {name} of the chief's last copy, which the chief no longer has"
    # Smallest first: a newer checkpoint's pointer file (a few bytes) differs, and the data
    # files (often of the same sizes from one checkpoint to the next) are never read then.
    for name in sorted(chiefs, key=lambda name: (int(chiefs[name][0]), name)):
        if file_sha256(os.path.join(directory, name)) != str(chiefs[name][1]):
            return f"its {name} has another sha256"
    return ""


def look(directory: str, marker: str, chief: str, chiefs: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a host that is not the chief's tells of its checkpoint directory: the hosts
    whose marker it sees (``seen``: those that share it), whether the chief is one of them
    (``shared``), the space free there, the checkpoint numbers the chief's last copy
    brought (``copied``), whether that copy was cut short, and, given the chief's files
    (``chiefs``, its mark's ``files``), whether this directory already holds every one of
    them (``same``; else ``differs``, why)."""
    record = read_synced(directory)
    seen = seen_hosts(directory, marker)
    incomplete = bool(leftovers(directory)) or record["complete"] is False
    result = {
        "changed": False,
        "shared": chief in seen,
        "seen": seen,
        "dir": directory,
        "free": free_bytes(directory),
        "copied": record["pointers"],
        "incomplete": incomplete,
    }
    if chiefs and not result["shared"]:
        differs = holds_chiefs_files(directory, chiefs, record, incomplete) if os.path.isdir(directory) else "it has no file"
        result.update({"same": not differs, "differs": differs})
    return result


def look_step(directory: str, marker: str, chief: str, chiefs: dict[str, Any], host: str, relay_port: int,
              relay_key: str, check: bool) -> dict[str, Any]:  # fmt: skip
    """The look, and where this host will need the chief's files (neither shared nor
    holding them already) and the copy has a key and a port for it, a listener for the
    host-to-host relay on that port (tf_checkpoint_relay), left running: ``relay``."""
    result = look(directory, marker, chief, chiefs)
    if result["shared"] or result.get("same") or not chiefs or relay_port <= 0 or not relay_key or check:
        return result
    from ansible_collections.tf_runbook.multiworker.plugins.module_utils import tf_checkpoint_relay as relay

    result["relay"] = relay.start_listener(
        relay_port, relay_key.encode("utf-8"), marker, host,
        lambda names, fill: install(checked_directory(directory), names, fill))  # fmt: skip
    return result


def space_problem(where: str, directory: str, needed: int, free: int) -> str | None:
    if free >= needed:
        return None
    return f"{where}: the checkpoint copy needs {megabytes(needed)} in {directory}, {megabytes(free)} free"


def hosts_to_skip(targets: dict[str, Any]) -> dict[str, str]:
    """The hosts whose look found every file of the chief's there, same size and sha256
    (``same``): nothing is sent to them; each to why."""
    return {host: "it holds every file of the chief's, same sizes and sha256" for host in sorted(targets)
            if isinstance(targets[host], dict) and targets[host].get("same") is True}  # fmt: skip


def copy_groups(targets: dict[str, Any]) -> dict[str, list[str]]:
    """The hosts the archive is sent to, each with the other hosts that share its directory
    (they see the same markers): one copy per directory, never two at once into one. A
    host whose look found the chief's files already there is left out (hosts_to_skip)."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for host in sorted(targets):
        target = targets[host] if isinstance(targets[host], dict) else {}
        if target.get("same") is True:
            continue
        seen = tuple(sorted(str(name) for name in target.get("seen") or [])) or (host,)
        groups.setdefault(seen, []).append(host)
    return {hosts[0]: hosts[1:] for hosts in groups.values()}


def copy_problems(
    chief: str, directory: str, files: dict[str, int], numbers: dict[str, int], chief_free: int,
    targets: dict[str, Any], controller_dir: str, controller_free: int, relayed: tuple[str, ...] = (),
) -> list[str]:
    """Why the chief's files (``files``: name to size, in ``directory`` on host ``chief``,
    ``numbers`` its pointer files' checkpoints) may not be copied to ``targets`` (each host
    to its look): too little space on the chief (the archive), the controller (where the
    archive lands; ``controller_free`` negative: not measured) or a host (the archive and
    the staged files); a chief's directory that holds no checkpoint or an older one than a
    host holds from the chief's last copy. Empty when the copy may go on."""
    size = sum(files.values())
    archive = archive_bytes(list(files.values()))
    problems = []
    if files and set(targets) - set(relayed):  # the archive only for the hosts the relay does not serve
        problems.append(space_problem(f"host {chief}", directory, archive, chief_free))
        if controller_free >= 0:
            problems.append(space_problem("the controller", controller_dir, archive, controller_free))
    for host in sorted(targets):
        target = targets[host] if isinstance(targets[host], dict) else {}
        if files and "free" in target:
            # Relayed, a host stages the files; through the controller, it also holds the archive.
            needed = size if host in relayed else archive + size
            problems.append(space_problem(f"host {host}", str(target.get("dir")), needed, int(target["free"])))
        for name, theirs in sorted((target.get("copied") or {}).items()):
            mine = numbers.get(name)
            if mine is None:
                holds = "holds no checkpoint" if not files else f"holds no {name}"
                problems.append(
                    f"the chief's checkpoint directory on {chief} ({directory}) {holds}, and {host} holds the chief's "
                    f"earlier copy ({name}: {theirs}): copying would leave {host} on it while the chief starts over; "
                    f"put the checkpoint back on {chief} (from {host}'s {target.get('dir')}), or empty that "
                    "directory to start over"
                )
            elif mine < int(theirs):
                problems.append(
                    f"the chief's newest checkpoint on {chief} ({name}: {mine}) is older than the one {host} holds "
                    f"from the last copy ({name}: {theirs}): copying would remove {host}'s newer one; copy {host}'s "
                    f"{target.get('dir')} to {chief}'s {directory}, or empty {host}'s to go on from {mine}"
                )
    return [problem for problem in problems if problem]


def pack(directory: str, archive: str) -> dict[str, Any]:
    """An uncompressed tar of the chief's files (checkpoints hardly compress; gzip would
    cost more time than it saves), each a plain member with its mtime: a hard link is
    packed as the file it names."""
    links: list[str] = []
    hard_links: list[str] = []
    names = chief_files(directory, links, hard_links) if os.path.isdir(directory) else []
    size = 0
    with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
        for name in names:
            descriptor = os.open(os.path.join(directory, name), os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(descriptor, "rb") as handle:
                info = os.fstat(handle.fileno())
                member = tarfile.TarInfo(name)
                member.size, member.mtime, member.mode = info.st_size, info.st_mtime, 0o600
                tar.addfile(member, handle)
            size += info.st_size
    return {"files": len(names), "bytes": size, "links_left_out": sorted(links), "hard_links": sorted(hard_links)}


def relay_plan(targets: dict[str, Any], groups: dict[str, list[str]], workers: list[Any]) -> tuple[list[list[Any]], list[list[Any]]]:
    """(the chain: ``[host, address, port]`` of each host the copy goes to whose look
    listens for the relay, in name order; the listeners that get nothing: hosts that share
    another's directory). Each host's address and port are its first slot's in the cluster
    spec (``workers``)."""
    endpoints = {str(w.get("host")): [str(w.get("address")), int(w.get("port"))] for w in workers or []
                 if isinstance(w, dict) and int(w.get("slot") or 0) == 0 and w.get("address") and w.get("port")}  # fmt: skip

    def listening(host: str) -> bool:
        target = targets.get(host) if isinstance(targets.get(host), dict) else {}
        relay = target.get("relay") if isinstance(target.get("relay"), dict) else {}
        return bool(relay.get("listening")) and host in endpoints

    chain = [[host, *endpoints[host]] for host in sorted(groups) if listening(host)]
    idle = [[host, *endpoints[host]] for host in sorted(targets) if listening(host) and host not in groups]
    return chain, idle


def relay_fallbacks(targets: dict[str, Any], groups: dict[str, list[str]], outcomes: dict[str, Any],
                    chain: list[list[Any]]) -> dict[str, str]:  # fmt: skip
    """Each host of ``groups`` the relay did not serve to why (it goes through the controller)."""
    in_chain = {hop[0] for hop in chain}
    why = {}
    for host in sorted(groups):
        if host in in_chain:
            outcome = outcomes.get(host) if isinstance(outcomes.get(host), dict) else {}
            if not outcome.get("ok"):
                said = "not reachable on the relay" if not outcome.get("reached") else "the relay failed there"
                why[host] = f"{said}: {outcome.get('error') or 'no outcome'}"
            continue
        target = targets.get(host) if isinstance(targets.get(host), dict) else {}
        relay = target.get("relay") if isinstance(target.get("relay"), dict) else {}
        why[host] = f"it could not listen for the relay: {relay['error']}" if relay.get("error") else "no relay port"
    return why


def pack_step(
    directory: str, marker: str, copy: bool, host: str, targets: dict[str, Any], controller_dir: str,
    controller_free: int, archive: str, check: bool, relay_key: str = "", chiefs: dict[str, Any] | None = None,
    workers: list[Any] | None = None,
) -> dict[str, Any]:
    """The chief's pack: remove the marker; with ``copy``, skip the hosts that hold the
    chief's files already, refuse what copy_problems finds, send the files once along the
    chain of the hosts that listen for the relay (with ``relay_key`` and the chief's mark's
    ``chiefs``), and pack into ``archive`` (by default a new file beside the checkpoint
    directory: on its filesystem, which the space was measured on) for the hosts the relay
    did not serve (``copy_to``: they get it through the controller)."""
    path = marker_path(directory, marker, host) if marker else ""
    if path and not check and os.path.lexists(path):
        os.unlink(path)
    nothing = {"changed": False, "files": 0, "bytes": 0, "archive": "", "copy_to": [], "shares_with": {},
               "skipped_hosts": {}, "relayed": {}, "relay_fallback": {}}  # fmt: skip
    if not copy or check:
        return nothing
    skipped = hosts_to_skip(targets)
    nothing["skipped_hosts"] = skipped
    groups = copy_groups(targets)
    names = chief_files(directory) if os.path.isdir(directory) else []
    files = {name: os.lstat(os.path.join(directory, name)).st_size for name in names}
    if names and skipped and not groups:  # every host skipped: nothing to pack, nothing to refuse
        return {**nothing, "files": len(names), "bytes": sum(files.values())}
    chain, idle = relay_plan(targets, groups, workers or []) if relay_key and chiefs and names else ([], [])
    relayed = tuple(hop[0] for hop in chain)
    copiers = {copier: targets[copier] for copier in groups}
    numbers = pointer_numbers(directory, names)
    problems = copy_problems(host or "the chief", directory, files, numbers, free_bytes(directory), copiers,
                             controller_dir, controller_free, relayed)  # fmt: skip
    from ansible_collections.tf_runbook.multiworker.plugins.module_utils import tf_checkpoint_relay as relay

    if problems or not names:
        # Nothing will be sent: every listener gives its worker port back now, not at its
        # deadline (the next attempt's TensorFlow server, or a run started again after the
        # refusal, binds that port).
        listeners = relay_plan(targets, {}, workers or [])[1] if relay_key else []
        if listeners:
            relay.close_listeners(listeners, relay_key.encode("utf-8"), marker)
    if problems:
        raise ValueError("; ".join(problems))
    if not names:
        return nothing
    if idle:
        relay.close_listeners(idle, relay_key.encode("utf-8"), marker)
    outcomes = relay.send_chain(chain, relay_key.encode("utf-8"), marker, directory, chiefs or {}) if chain else {}
    fallback = relay_fallbacks(targets, groups, outcomes, chain)
    sharing = {other: copier for copier, others in groups.items() for other in others}
    sent = {"copy_to": sorted(fallback), "shares_with": sharing, "skipped_hosts": skipped,
            "relay_fallback": fallback if relay_key else {},
            "relayed": {h: o for h, o in outcomes.items() if isinstance(o, dict) and o.get("ok")}}  # fmt: skip
    if chain and not fallback:
        return {**nothing, **sent, "files": len(names), "bytes": sum(files.values())}
    if relayed:  # the archive's space, not measured before for hosts the relay was to serve
        problems = copy_problems(host or "the chief", directory, files, numbers, free_bytes(directory),
                                 {h: copiers[h] for h in fallback}, controller_dir, controller_free)  # fmt: skip
        if problems:
            raise ValueError("; ".join(problems))
    if archive:
        handle = os.open(archive, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    else:
        handle, archive = tempfile.mkstemp(dir=directory, prefix=CHECKPOINT_ARCHIVE_PREFIX, suffix=".tar")
    os.close(handle)
    try:
        return {"changed": False, "archive": archive, **sent, **pack(directory, archive)}
    except BaseException:
        os.unlink(archive)
        raise


def member_name(name: str) -> str:
    """A member's path, normalised; refused when it would leave the directory."""
    clean = os.path.normpath(name)
    if not name or os.path.isabs(name) or clean == "." or clean.startswith("..") or "\x00" in name:
        raise ValueError(f"archive member {name!r} would leave the checkpoint directory")
    if is_own_file(clean.split(os.sep)[0]):
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


def fsync_path(path: str) -> None:
    """fsync a file or a directory by its path (a directory: its entries, after renames)."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def swap_order(names: list[str]) -> list[str]:
    """The order files are renamed into place: every data file first, pointers last."""
    return sorted(names, key=lambda name: (is_pointer(name), name))


def read_plan(tar: tarfile.TarFile) -> list[tuple[str, tarfile.TarInfo]]:
    """Each file member of the archive with its safe name; anything else is refused."""
    plan = []
    for member in tar.getmembers():
        name = member_name(member.name)
        if member.isdir():
            continue
        if not member.isfile():
            raise ValueError(f"archive member {member.name!r} is not a plain file")
        plan.append((name, member))
    return plan


def stage(tar: tarfile.TarFile, plan: list[tuple[str, tarfile.TarInfo]], staging: str) -> None:
    """Write every member into ``staging`` (a fresh private directory), fsynced, with
    mode 0600 and the member's mtime."""
    for name, member in plan:
        os.makedirs(os.path.join(staging, os.path.dirname(name)), mode=0o700, exist_ok=True)
        source = tar.extractfile(member)
        if source is None:
            raise ValueError(f"archive member {member.name!r} cannot be read")
        path = os.path.join(staging, name)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(descriptor, "wb") as out:
            shutil.copyfileobj(source, out, 1 << 20)
            out.flush()
            os.fsync(out.fileno())
        os.utime(path, (member.mtime, member.mtime))


def swap_in(directory: str, staging: str, names: list[str]) -> set[str]:
    """Rename each staged file over its place in ``directory`` (a link there is replaced
    itself, never written through), pointers last; the directories it touched."""
    for name in names:  # everything in the way is refused before the first rename
        real_parent(directory, name, check=True)
        target = os.path.join(directory, name)
        if os.path.isdir(target) and not os.path.islink(target):
            raise ValueError(f"{target} is a directory where the chief has a file")
    touched = {directory}
    for name in swap_order(names):
        parent = real_parent(directory, name, check=False)
        os.replace(os.path.join(staging, name), os.path.join(directory, name))
        touched.add(parent)
    return touched


class CopyLock:
    """flock on the checkpoint directory's lock file: two copies into one directory (two
    hosts that share it) take turns instead of racing."""

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, CHECKPOINT_LOCK_FILE)
        self.descriptor = -1

    def __enter__(self) -> "CopyLock":
        self.descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(self.descriptor, fcntl.LOCK_EX)
        except OSError as exc:
            # A filesystem without locks: the copy goes on (the pack sends one copy per
            # shared directory, so none runs beside it).
            if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
                os.close(self.descriptor)
                raise
        return self

    def __exit__(self, *_exc: Any) -> None:
        os.close(self.descriptor)  # closing the last descriptor releases the lock


def remove_tree(path: str) -> None:
    """Remove a staging directory; one another copy removed meanwhile is fine."""
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        pass


def install(directory: str, names: list[str], fill: Any) -> dict[str, Any]:
    """Write the chief's files ``names`` into ``directory`` through a staging directory,
    ``fill(staging)`` putting every one of them there (fsynced, checked); the pointer files
    last; remove the files of the chief's last copy it no longer has; record the copy,
    complete only once it is all on the disk. A copy cut short before (a staging directory
    left over, a record not complete) is cleaned up and ``redone``. The unpack of an archive
    and the host-to-host relay (tf_checkpoint_relay) both swap in through here."""
    make_directory(directory)
    with CopyLock(directory):
        previous = read_synced(directory)
        stale = sorted(set(previous["files"]) - set(names))
        left = leftovers(directory)
        for name in left:
            remove_tree(os.path.join(directory, name))
        redone = bool(left) or previous["complete"] is False
        staging = tempfile.mkdtemp(dir=directory, prefix=CHECKPOINT_STAGING_PREFIX)
        try:
            fill(staging)
            numbers = pointer_numbers(staging, names)
            fsync_path(staging)
            # From here on the directory holds parts of two copies until the record
            # says complete: a later copy removes the files of either.
            write_synced(directory, sorted(set(previous["files"]) | set(names)), previous["pointers"], False)
            touched = swap_in(directory, staging, names)
            for name in stale:
                if not under_real_directories(directory, name):
                    continue  # a part of its way became a link: whatever it names is not the chief's copy
                path = os.path.join(directory, name)
                try:
                    if stat.S_ISREG(os.lstat(path).st_mode):
                        os.unlink(path)
                        touched.add(os.path.dirname(path))
                except FileNotFoundError:
                    pass  # gone meanwhile (a host that shares the directory, by hand)
            for path in sorted(touched, key=len, reverse=True):
                fsync_path(path)
            write_synced(directory, names, numbers, True)
        finally:
            remove_tree(staging)
    return {"files": len(names), "removed": stale, "redone": redone}


def unpack(directory: str, archive: str, check: bool) -> dict[str, Any]:
    """Write every file of ``archive`` into ``directory`` (install)."""
    with tarfile.open(archive, "r:*") as tar:
        plan = read_plan(tar)
        names = [name for name, _member in plan]
        previous = read_synced(directory)
        stale = sorted(set(previous["files"]) - set(names))
        size = sum(member.size for _name, member in plan)
        if check:
            return {"files": len(plan), "bytes": size, "removed": stale, "redone": False}
        done = install(directory, names, lambda staging: stage(tar, plan, staging))
    return {**done, "bytes": size}


def read_synced(directory: str) -> dict[str, Any]:
    """The record of the chief's last copy here: its files (safe names only), the numbers
    its pointer files named, and whether it completed (None: no record, or one written
    before copies were marked complete)."""
    try:
        with open(os.path.join(directory, CHECKPOINT_SYNCED_FILE), encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        data = {}
    data = data if isinstance(data, dict) else {}
    names = data.get("files")
    safe = []
    for name in names if isinstance(names, list) else []:
        try:
            safe.append(member_name(str(name)))
        except ValueError:
            continue
    pointers = data.get("pointers")
    numbers = {
        str(name): number for name, number in (pointers.items() if isinstance(pointers, dict) else [])
        if isinstance(number, int) and str(name) in safe
    }  # fmt: skip
    complete = data.get("complete")
    return {"files": safe, "pointers": numbers, "complete": complete if isinstance(complete, bool) else None}


def write_synced(directory: str, names: list[str], pointers: dict[str, int], complete: bool) -> None:
    """Write the record atomically and durably (the file, then the directory)."""
    path = os.path.join(directory, CHECKPOINT_SYNCED_FILE)
    pending = f"{path}.{os.getpid()}.tmp"
    descriptor = os.open(pending, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        json.dump({"files": names, "pointers": pointers, "complete": complete}, handle, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(pending, path)
    fsync_path(directory)


def mark(directory: str, marker: str, host: str, check: bool) -> dict[str, Any]:
    """Leave ``host``'s marker of this copy; remove the markers of earlier copies (a
    copy's markers but the chief's stay until the next one: harmless, never copied) and
    the archives a killed copy left (no archive of this copy exists yet: every host marks
    before the chief packs)."""
    path = marker_path(directory, marker, host)
    if check:
        return {"changed": True}
    make_directory(directory)
    for name in os.listdir(directory):
        earlier = name.startswith(CHECKPOINT_MARKER_PREFIX) and not name.startswith(marker_prefix(marker))
        if earlier or name.startswith(CHECKPOINT_ARCHIVE_PREFIX):
            try:
                os.unlink(os.path.join(directory, name))
            except FileNotFoundError:
                pass  # removed meanwhile by a host that shares the directory
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(f"{host}\n")
    return {"changed": True}


def run(params: dict[str, Any], check: bool) -> dict[str, Any]:
    """The result of one step on this host (module tf_checkpoint_sync's options)."""
    directory = checked_directory(params["dir"])
    mode = params["mode"]
    if mode == "mark":
        marked = mark(directory, params["marker"], params.get("host") or "", check)
        if params.get("manifest"):
            marked["files"] = manifest(directory)
        return marked
    if mode == "look":
        return look_step(directory, params["marker"], params.get("chief") or "", params.get("chief_files") or {},
                         params.get("host") or "", int(params.get("relay_port") or 0), params.get("relay_key") or "",
                         check)  # fmt: skip
    if mode == "pack":
        return pack_step(directory, params["marker"], params["copy"], params.get("host") or "",
                         params.get("targets") or {}, params.get("controller_dir") or "",
                         int(-1 if params.get("controller_free") is None else params["controller_free"]),
                         params.get("archive") or "", check, params.get("relay_key") or "",
                         params.get("chief_files") or {}, params.get("workers") or [])  # fmt: skip
    if not params["archive"]:
        raise ValueError("mode unpack needs the archive on the host (given by the action plugin)")
    return {"changed": not check, **unpack(directory, params["archive"], check)}
