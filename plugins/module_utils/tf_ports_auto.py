# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Worker ports shared between runs on one host (``tf_worker_port: auto``), and the
host's register of the runs that use them (standard library only: the preflight's probe
and the module ``tf_runs_alive`` run it on the host).

The register is one directory every user of the host can write, ``/tmp/tf-runbook-ports``
(mode 1777, as ``/tmp``: a user removes only their own files), holding one file per
reserved port, ``<port>.json``: the run id, the inventory host that reserved it, the
user, when, and every port of that run on that host. Every read and write of it happens
under ``flock`` on its ``.lock`` file, so that two preflights on the same host (two runs
started in the same second) pick one after the other, and never the same port.

A port is taken for an automatic pick while something listens on it, or while another
run's reservation is younger than ``HOLD`` seconds (the time from the probe's pick to
TensorFlow's bind: the deploy and the launch), or while it is reserved by a file this
user may not replace (another user's: the sticky directory keeps it). Once TensorFlow
listens, the listener itself keeps the port; between the attempts of a restart, the
controller's heartbeat of the run (renewed by the wait on every host, in the run's
directory that the reservation names) keeps it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pwd
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


@contextlib.contextmanager
def locked(registry: str) -> Iterator[None]:
    """The register, made when missing (mode 1777), held under its lock."""
    try:
        os.mkdir(registry, 0o1777)
        os.chmod(registry, 0o1777)
    except FileExistsError:
        pass
    fd = os.open(os.path.join(registry, LOCK_FILE), os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def read_entries(registry: str) -> dict[int, dict[str, Any]]:
    """Every reservation file of the register by port, with ``uid`` and ``user`` of the
    file's owner (who cannot lie about it) in place of what it says."""
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
            with open(path, encoding="utf-8") as handle:
                owner = os.fstat(handle.fileno()).st_uid
                data = json.load(handle)
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict):
            continue
        data.update(port=int(stem), uid=owner, user=_user(owner))
        entries[int(stem)] = data
    return entries


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
    """Write ``port``'s reservation; False when another user's file stays in the way."""
    path = _entry_path(registry, port)
    tmp = os.path.join(registry, f".{port}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(record, handle)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return False
    return True


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
    """Reserve ports for run ``run_id`` of inventory host ``me``, under the register's
    lock: the ``ports`` given (a number in the inventory, or a run's recorded ports: they
    are not refused here, the probe's bind test judges them), or else the lowest block of
    ``count`` in ``first..last`` that no live reservation of another run (or of another
    inventory host of this run on the same machine) holds and ``free`` accepts. Returns
    the ports ([] when no block is free). Reservations over (``entry_live``) are replaced.
    Without ``write`` (a dry run), it only picks."""
    now = time.time() if now is None else now
    uid = os.getuid()
    if not write and not os.path.isdir(registry):  # a dry run makes nothing, not even the register
        return list(ports) if ports else pick_block(count, first, last, set(), free)
    with locked(registry):
        entries = read_entries(registry)
        mine = {p for p, e in entries.items() if e.get("run_id") == run_id and e.get("host") == me}
        if ports:
            chosen = list(ports)
        else:
            taken = {
                p for p, e in entries.items()
                if p not in mine and (entry_live(e, now, listening, hold) or e["uid"] != uid)
            }
            chosen = pick_block(count, first, last, taken, free)
        if not write:
            return chosen
        record = {"run_id": run_id, "host": me, "since": now, "ports": chosen, "pid": os.getpid(), "run_dir": run_dir}
        kept = [p for p in chosen if p not in entries or entries[p]["uid"] == uid]
        for port in kept:
            previous = entries.get(port, {})
            if previous.get("run_id") == run_id and previous.get("host") == me:
                record = dict(record, since=previous.get("since", now))
            _write(registry, port, dict(record, renewed=now))
        for port in mine - set(chosen):  # an earlier pick of this run and host: given up
            with contextlib.suppress(OSError):
                os.unlink(_entry_path(registry, port))
    return chosen


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
        raise OSError(f"host {me}: cannot use the register of ports {registry}: {exc}") from exc
    if count and not chosen:
        raise ValueError(
            f"host {me}: tf_worker_port auto found no {count} consecutive free port(s) in {first}..{last} (each "
            "listened on, or reserved by another run: status.yml without -e tf_run_id lists the runs); widen "
            "tf_worker_port_auto_first..tf_worker_port_auto_last")
    return chosen


def release(registry: str, run_id: str, me: str) -> list[int]:
    """Give up the reservations of run ``run_id`` of inventory host ``me`` (a refused
    preflight's); returns the ports released."""
    released = []
    if not os.path.isdir(registry):
        return released
    with locked(registry):
        for port, entry in sorted(read_entries(registry).items()):
            if entry.get("run_id") == run_id and entry.get("host") == me and entry["uid"] == os.getuid():
                with contextlib.suppress(OSError):
                    os.unlink(_entry_path(registry, port))
                    released.append(port)
    return released


def live_runs(registry: str, listening: Callable[[int], bool], now: float | None = None,
              hold: float = HOLD, every: bool = False) -> list[dict[str, Any]]:
    """The runs of the register that are alive on this host, one entry per run and
    inventory host: ``run_id``, ``host``, ``user``, ``since`` (epoch seconds), ``ports``
    (the reserved ones, sorted), ``listening`` (those a process listens on now) and
    ``state`` (``running`` when one listens, else ``reserved``), oldest first. With
    ``every``, the runs whose reservations are over too (``state`` ``ended``)."""
    now = time.time() if now is None else now
    runs: dict[tuple[str, str, int], dict[str, Any]] = {}
    for port, entry in sorted(read_entries(registry).items()):
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
