# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Worker ports shared between runs on one host (``tf_worker_port: auto``), and the
host's register of the runs that use them (standard library only: the preflight's probe
and the module ``tf_runs_alive`` run it on the host).

Each user of the host has a register of their own, ``/tmp/tf-runbook-ports-<uid>``
(``REGISTRY`` and the user's id: a directory that user owns, mode 0755, so that every
user reads it and only its owner writes it), holding one file per reserved port,
``<port>.json``: the run id, the inventory host that reserved it, the user, when, the
run's directory and every port of that run on that host. A user's reads and writes of
their own register happen under ``flock`` on its ``.lock`` file (0600), so that two
preflights of that user on the same host (two runs started in the same second) pick one
after the other, and never the same port. No user's file can block, replace or corrupt
another's: nobody takes another user's lock, a register that is not a directory of the
user its name gives (another user's, a symlink) is never used nor read (an own register
squatted by another user refuses the run, naming it), and another user's reservation is
only read.

Between two users, who hold no common lock, a pick writes its reservation first and then
reads the other users' registers again: a port that another user reserved meanwhile is
given up by the one that sees the other's reservation after writing its own (the later
writer always sees the earlier one), and picked again (``CROSS_USER_TRIES``). The port
itself is the final judge: the probe binds every port it picks.

A port is taken for an automatic pick while something listens on it, or while a run's
reservation (any user's) is younger than ``HOLD`` seconds (the time from the probe's pick
to TensorFlow's bind: the deploy and the launch). Once TensorFlow listens, the listener
itself keeps the port; between the attempts of a restart, the controller's heartbeat of
the run (renewed by the wait on every host, in the run's directory that the reservation
names) keeps it. A run's reservations end with the run (``release_run``: the wait's last
module run of a host whose workers all exited 0, the collect's, and the operator's stop),
and a listing shows only what is running or still reserved.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import json
import os
import pwd
import random
import stat
import time
from typing import Any, Callable, Iterator

from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_probe_ports import bind_error, listening_inodes
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import HEARTBEAT_FILE

AUTO = "auto"
REGISTRY = "/tmp/tf-runbook-ports"
LOCK_FILE = ".lock"
# Seconds a reservation keeps its ports from other runs' automatic picks without a
# listener on them: the probe's pick, then the deploy (a first virtualenv build takes
# minutes) and the launch. Past it, a port nobody listens on is free again.
HOLD = 3600
# How often a pick that met another user's reservation of the same port, written at the
# same time, picks again before the preflight refuses the host.
CROSS_USER_TRIES = 5


def is_auto(value: Any) -> bool:
    """Whether a tf_worker_port value asks for an automatic pick."""
    return isinstance(value, str) and value.strip().lower() == AUTO


def pick_block(count: int, first: int, last: int, taken: set[int], free: Callable[[int], bool]) -> list[int]:
    """The lowest ``count`` consecutive ports of ``first..last`` that are neither in
    ``taken`` nor refused by ``free`` (a bind test); [] when no such block exists.
    Consecutive, since a host's slot ``s`` listens on its first port + ``s``."""
    if count < 1 or first < 1 or last > 65535 or first > last:
        raise ValueError(f"cannot pick {count} port(s) in {first}..{last}")
    start = first
    while start + count - 1 <= last:
        block = list(range(start, start + count))
        bad = [p for p in block if p in taken or not free(p)]
        if not bad:
            return block
        start = bad[-1] + 1
    return []


def _entry_path(registry: str, port: int) -> str:
    return os.path.join(registry, f"{port}.json")


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def own_register(prefix: str, uid: int | None = None) -> str:
    """The register of user ``uid`` (this process's by default): ``<prefix>-<uid>``."""
    return f"{prefix}-{os.getuid() if uid is None else uid}"


def _register_owner(path: str) -> int | None:
    """The uid of a usable register: a real directory (not a symlink) owned by the user
    its name gives; None for anything else."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    suffix = path.rsplit("-", 1)[-1]
    if not stat.S_ISDIR(info.st_mode) or not suffix.isdigit() or info.st_uid != int(suffix):
        return None
    return info.st_uid


def registers(prefix: str) -> dict[int, str]:
    """Every user's usable register on this host, by uid."""
    found = {}
    for path in glob.glob(f"{glob.escape(prefix)}-*"):
        uid = _register_owner(path)
        if uid is not None:
            found[uid] = path
    return found


@contextlib.contextmanager
def locked(prefix: str) -> Iterator[str]:
    """This user's register, made when missing (mode 0755), held under its own lock;
    yields its path. OSError naming it when another user (or a symlink) holds its name."""
    uid = os.getuid()
    path = own_register(prefix, uid)
    try:
        os.mkdir(path, 0o755)
    except FileExistsError:
        pass
    if _register_owner(path) != uid:
        raise OSError(f"{path} is not a directory of user {_user(uid)} (uid {uid}): another user or a link holds "
                      "its name; remove it")  # fmt: skip
    os.chmod(path, 0o755)
    fd = os.open(os.path.join(path, LOCK_FILE), os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield path
    finally:
        os.close(fd)


def read_entries(registry: str, uid: int | None = None) -> dict[int, dict[str, Any]]:
    """Every reservation file of one register by port, with ``uid`` and ``user`` of the
    file's owner (who cannot lie about it) in place of what it says; with ``uid``, only
    the regular files that user owns (another user's register is only read)."""
    entries: dict[int, dict[str, Any]] = {}
    try:
        names = os.listdir(registry)
    except OSError:
        return entries
    for name in names:
        stem, ext = name.split(".", 1) if "." in name else (name, "")
        if ext != "json" or not stem.isdigit():
            continue
        path = os.path.join(registry, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            with os.fdopen(fd, encoding="utf-8") as handle:
                info = os.fstat(handle.fileno())
                if not stat.S_ISREG(info.st_mode) or (uid is not None and info.st_uid != uid):
                    continue
                data = json.loads(handle.read(65536))
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict):
            continue
        data.update(port=int(stem), uid=info.st_uid, user=_user(info.st_uid))
        entries[int(stem)] = data
    return entries


def others_entries(prefix: str, uid: int) -> list[dict[str, Any]]:
    """Every reservation of the other users' registers on this host."""
    return [entry for other, path in sorted(registers(prefix).items()) if other != uid
            for entry in read_entries(path, other).values()]  # fmt: skip


def _heartbeat_age(entry: dict[str, Any], now: float) -> float | None:
    """Seconds since the controller last renewed the heartbeat of the entry's run (its
    ``run_dir``; readable by its own user only), None when there is none to read."""
    run_dir = entry.get("run_dir")
    if not isinstance(run_dir, str) or not run_dir:
        return None
    try:
        return now - os.stat(os.path.join(run_dir, HEARTBEAT_FILE)).st_mtime
    except OSError:
        return None


def entry_live(entry: dict[str, Any], now: float, listening: Callable[[int], bool], hold: float = HOLD) -> str:
    """``running`` (a process listens on the port), ``reserved`` (nothing listening, but
    reserved, or its run's heartbeat renewed, less than ``hold`` seconds ago: a launch
    or a restart under way), or '' (the reservation is over)."""
    if listening(int(entry["port"])):
        return "running"
    since = entry.get("since")
    if isinstance(since, (int, float)) and now - since < hold:
        return "reserved"
    beat = _heartbeat_age(entry, now)
    if beat is not None and beat < hold:
        return "reserved"
    return ""


def _write(registry: str, port: int, record: dict[str, Any]) -> bool:
    """Write ``port``'s reservation into this user's register; False when it cannot."""
    path = _entry_path(registry, port)
    tmp = os.path.join(registry, f".{port}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(record, handle)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return False
    return True


def _others_taken(prefix: str, uid: int, now: float, listening: Callable[[int], bool], hold: float) -> set[int]:
    return {int(e["port"]) for e in others_entries(prefix, uid) if entry_live(e, now, listening, hold)}


def _pick_once(
    prefix: str, run_id: str, me: str, listening: Callable[[int], bool], free: Callable[[int], bool], count: int,
    first: int, last: int, ports: list[int] | None, now: float, hold: float, write: bool, run_dir: str,
    avoid: set[int],
) -> list[int]:
    """One pick under this user's lock (see ``reserve``), ``avoid`` taken besides."""
    uid = os.getuid()
    with locked(prefix) as registry:
        entries = read_entries(registry, uid)
        mine = {p for p, e in entries.items() if e.get("run_id") == run_id and e.get("host") == me}
        if ports:
            chosen = list(ports)
        else:
            taken = {p for p, e in entries.items() if p not in mine and entry_live(e, now, listening, hold)}
            taken |= avoid | _others_taken(prefix, uid, now, listening, hold)
            chosen = pick_block(count, first, last, taken, free)
        if not write:
            return chosen
        record = {"run_id": run_id, "host": me, "since": now, "ports": chosen, "pid": os.getpid(), "run_dir": run_dir}
        for port in chosen:
            previous = entries.get(port, {})
            if previous.get("run_id") == run_id and previous.get("host") == me:
                record = dict(record, since=previous.get("since", now))
            if not _write(registry, port, dict(record, renewed=now)):
                raise OSError(f"cannot write {_entry_path(registry, port)}")
        for port in mine - set(chosen):  # an earlier pick of this run and host: given up
            with contextlib.suppress(OSError):
                os.unlink(_entry_path(registry, port))
    return chosen


def reserve(
    registry: str,
    run_id: str,
    me: str,
    listening: Callable[[int], bool],
    free: Callable[[int], bool],
    count: int = 0,
    first: int = 0,
    last: int = 0,
    ports: list[int] | None = None,
    now: float | None = None,
    hold: float = HOLD,
    write: bool = True,
    run_dir: str = "",
) -> list[int]:
    """Reserve ports for run ``run_id`` of inventory host ``me`` in this user's register
    (``registry`` is the registers' prefix, ``REGISTRY``), under its lock: the ``ports``
    given (a number in the inventory, or a run's recorded ports: they are not refused
    here, the probe's bind test judges them), or else the lowest block of ``count`` in
    ``first..last`` that no live reservation (of another run of this user, of another
    inventory host of this run on the same machine, or of any other user) holds and
    ``free`` accepts. Returns the ports ([] when no block is free). Reservations over
    (``entry_live``) are replaced. Without ``write`` (a dry run), it only picks.

    An automatic pick then reads the other users' registers again, and gives up (and picks
    again, at most CROSS_USER_TRIES times) the ports another user reserved meanwhile."""
    now = time.time() if now is None else now
    uid = os.getuid()
    if not write and not os.path.isdir(own_register(registry, uid)):  # a dry run makes nothing
        taken = set() if ports else _others_taken(registry, uid, now, listening, hold)
        return list(ports) if ports else pick_block(count, first, last, taken, free)
    avoid: set[int] = set()
    for _try in range(CROSS_USER_TRIES):
        chosen = _pick_once(registry, run_id, me, listening, free, count, first, last, ports, now, hold, write,
                            run_dir, avoid)  # fmt: skip
        if ports or not write or not chosen:
            return chosen
        clash = set(chosen) & _others_taken(registry, uid, now, listening, hold)
        if not clash:
            return chosen
        # Both users may have written at once: each one that sees the other gives way.
        avoid |= clash
        time.sleep(random.uniform(0.01, 0.2))
    release(registry, run_id, me)
    return []


def host_ports(run_id: str, me: str, count: int, span: list[int], ports: list[int], write: bool,
               registry: str = REGISTRY, run_dir: str = "") -> list[int]:
    """The preflight probe's reservation on this host (its real listeners and bind test):
    ``count`` ports picked in ``span`` ([first, last]), or the ``ports`` given, recorded
    unless ``write`` is false. Raises ValueError with the refusal when nothing fits, and
    OSError naming the register when it cannot be used."""
    if count and (len(span) != 2 or not 1 <= span[0] <= span[1] <= 65535):
        raise ValueError(f"host {me}: the range to pick ports in must be [first, last] within 1..65535, got {span}")
    first, last = (span[0], span[-1]) if count else (0, 0)
    try:
        chosen = reserve(registry, run_id, me, lambda p: bool(listening_inodes(p)), lambda p: bind_error(p) == 0,
                         count=count, first=first, last=last, ports=ports, write=write, run_dir=run_dir)
    except OSError as exc:
        raise OSError(f"host {me}: cannot use the register of ports {own_register(registry)}: {exc}") from exc
    if count and not chosen:
        raise ValueError(
            f"host {me}: tf_worker_port auto found no {count} consecutive free port(s) in {first}..{last} (each "
            "listened on, or reserved by another run: status.yml without -e tf_run_id lists the runs); widen "
            "tf_worker_port_auto_first..tf_worker_port_auto_last")
    return chosen


def release(registry: str, run_id: str, me: str) -> list[int]:
    """Give up this user's reservations of run ``run_id`` of inventory host ``me`` (a
    refused preflight's); returns the ports released."""
    return _release(registry, lambda entry: entry.get("run_id") == run_id and entry.get("host") == me)


def release_run(run_dir: str, listening: Callable[[int], bool], registry: str = REGISTRY) -> list[int]:
    """Give up this user's reservations of the run whose directory on this host is
    ``run_dir`` (every inventory host of it here), once it ended: the wait's last module
    run of a host whose workers all exited 0, the collect's and the operator's stop. A
    port still listened on stays (a detached run collected while it trains). Returns the
    ports released; nothing when this user has no register."""
    wanted = os.path.realpath(run_dir)

    def ended(entry: dict[str, Any]) -> bool:
        named = entry.get("run_dir")
        return isinstance(named, str) and bool(named) and os.path.realpath(named) == wanted and not listening(
            int(entry["port"]))

    return _release(registry, ended)


def end_run(run_dir: str, registry: str = REGISTRY) -> list[int]:
    """``release_run`` with the host's real listeners, in a module run that ends the run on
    this host; never an error (a register it cannot use keeps its reservations until
    they are over)."""
    try:
        return release_run(run_dir, lambda p: bool(listening_inodes(p)), registry)
    except OSError:
        return []


def _release(registry: str, which: Callable[[dict[str, Any]], bool]) -> list[int]:
    released: list[int] = []
    if _register_owner(own_register(registry)) != os.getuid():
        return released
    with locked(registry) as own:
        for port, entry in sorted(read_entries(own, os.getuid()).items()):
            if which(entry):
                with contextlib.suppress(OSError):
                    os.unlink(_entry_path(own, port))
                    released.append(port)
    return released


def live_runs(registry: str, listening: Callable[[int], bool], now: float | None = None,
              hold: float = HOLD, every: bool = False) -> list[dict[str, Any]]:
    """The runs of every user's register that are alive on this host, one entry per run,
    inventory host and user: ``run_id``, ``host``, ``user``, ``since`` (epoch seconds),
    ``ports`` (the reserved ones, sorted), ``listening`` (those a process listens on now)
    and ``state`` (``running`` when one listens, else ``reserved``), oldest first. A run
    that ended released its reservations (``release_run``) and is not listed. With
    ``every``, the runs whose reservations are over too (``state`` ``ended``)."""
    now = time.time() if now is None else now
    runs: dict[tuple[str, str, int], dict[str, Any]] = {}
    entries = [e for uid, path in sorted(registers(registry).items()) for e in read_entries(path, uid).values()]
    for entry in sorted(entries, key=lambda e: (e["port"], e["uid"])):
        port = int(entry["port"])
        state = entry_live(entry, now, listening, hold)
        if not state and not every:
            continue
        key = (str(entry.get("run_id", "")), str(entry.get("host", "")), int(entry["uid"]))
        run = runs.setdefault(key, {"run_id": key[0], "host": key[1], "user": entry["user"],
                                    "since": entry.get("since"), "ports": [], "listening": []})
        run["ports"].append(port)
        run["live"] = run.get("live", False) or bool(state)
        if state == "running":
            run["listening"].append(port)
    for run in runs.values():
        live = run.pop("live")
        run["state"] = "running" if run["listening"] else ("reserved" if live else "ended")
    return sorted(runs.values(), key=lambda r: (r["since"] or 0, r["run_id"], r["host"]))


def run_line(run: dict[str, Any], now: float | None = None) -> str:
    """One line of the listing: ``<host>: run <id> of <user>, <state> since <UTC time>
    (<age>), ports <ports>``."""
    now = time.time() if now is None else now
    since = run.get("since") or now
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(since))
    age = int(max(0, now - since))
    ports = ",".join(str(p) for p in run["ports"])
    return (f"{run['host']}: run {run['run_id']} of {run['user']}, {run['state']} since {when} "
            f"({age // 60} min {age % 60} s), ports {ports}")
