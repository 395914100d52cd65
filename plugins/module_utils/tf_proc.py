# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""This host's processes as ``/proc`` shows them, read in one place (issue 12).

A run's processes are found through the run's own records (the pids and the process group
in ``state.json``) and confirmed by what ``/proc`` says of them now: alive (not a zombie),
in that process group, working in that worker's directory. Nothing is ever found by name.

tf_worker_stop and tf_worker_status import this module; so does the supervisor
(``roles/tf_worker/files/tf_supervisor.py``), next to which the deploy ships it: standard
library only.

Every function takes the ``/proc`` root as ``proc`` (and the cgroup root as ``cgroup``),
so that a test can hand it a tree of its own.
"""

from __future__ import annotations

import errno
import os
import re
from typing import Any, Iterable

PROC = "/proc"
CGROUP = "/sys/fs/cgroup"
# The states of a process that has ended: a zombie waiting for its reaper, or dead.
ENDED_STATES = ("Z", "X")


# The CPU time fields of ``/proc/<pid>/stat`` (proc(5) fields 14 to 17: utime, stime, cutime,
# cstime, in clock ticks), counted from the state (field 3), the first after the command name.
CPU_FIELDS = slice(11, 15)


def stat_fields(text: str) -> list[str]:
    """The fields of a ``/proc/<pid>/stat`` text from the state on. The command name may
    hold spaces and parentheses: the fields start after the last ')'."""
    return text[text.rfind(")") + 2 :].split()


def parse_stat(text: str) -> tuple[str, int] | None:
    """(state, process group) from the text of ``/proc/<pid>/stat``; None when the text is
    not one."""
    fields = stat_fields(text)
    try:
        return fields[0], int(fields[2])
    except (IndexError, ValueError):
        return None


# The start time of a process, in clock ticks after boot (proc(5) field 22), counted from
# the state (field 3).
START_TIME_FIELD = 19


def parse_start_time(text: str) -> int | None:
    """The start time of a ``/proc/<pid>/stat`` text (clock ticks after boot); None when
    the text is not one."""
    try:
        return int(stat_fields(text)[START_TIME_FIELD])
    except (IndexError, ValueError):
        return None


def process_start_time(pid: int | str, proc: str = PROC) -> int | None:
    """The start time of the live process ``pid`` (clock ticks after boot): with its pid,
    it names one process for the host's uptime, where a pid alone may be reused. None
    when it is gone, a zombie or unreadable."""
    try:
        with open(f"{proc}/{pid}/stat", encoding="utf-8") as handle:
            text = handle.read()
    except OSError:
        return None
    stat = parse_stat(text)
    if stat is None or stat[0] in ENDED_STATES:
        return None
    return parse_start_time(text)


def parse_cpu_ticks(text: str) -> int | None:
    """The CPU time of a ``/proc/<pid>/stat`` text in clock ticks: user and system time of
    the process (all its threads), and of its children it waited for (cutime, cstime: a
    data loader process that ended between two readings still counts); None when the text
    is not one."""
    ticks = stat_fields(text)[CPU_FIELDS]
    try:
        return sum(int(tick) for tick in ticks) if len(ticks) == 4 else None
    except ValueError:
        return None


def clock_ticks() -> int:
    """Clock ticks per second of the CPU times in ``/proc`` (100 on Linux)."""
    try:
        return int(os.sysconf("SC_CLK_TCK")) or 100
    except (ValueError, OSError, AttributeError):
        return 100


def group_usage(pgids: Iterable[int], proc: str = PROC) -> dict[int, dict[str, Any]]:
    """Per process group of ``pgids`` (whole numbers above 1; others are ignored) that has a
    process: ``cpu_seconds``, the CPU time (parse_cpu_ticks) its processes used so far, and
    ``states``, pid to state letter (``R``, ``S``, ``D``, ``T``, ``Z``...) of each of them.
    One pass over the process table, whatever the number of groups. The sum goes down when
    a process leaves the group (ends and is reaped by a parent outside it)."""
    wanted = {pgid for pgid in pgids if not isinstance(pgid, bool) and isinstance(pgid, int) and pgid > 1}
    usage: dict[int, dict[str, Any]] = {}
    if not wanted:
        return usage
    per_second = clock_ticks()
    for pid in process_ids(proc):
        try:
            with open(f"{proc}/{pid}/stat", encoding="utf-8") as handle:
                text = handle.read()
        except OSError:
            continue
        stat = parse_stat(text)
        ticks = parse_cpu_ticks(text)
        if stat is None or stat[1] not in wanted or ticks is None:
            continue
        group = usage.setdefault(stat[1], {"cpu_seconds": 0.0, "states": {}})
        group["cpu_seconds"] += ticks / per_second
        group["states"][pid] = stat[0]
    return usage


# The shortest window over which a thread's runnable share is judged: over a shorter one a
# thread woken once (a gRPC keepalive) could read runnable for most of it.
RUNNABLE_WINDOW_SECONDS = 0.5


def thread_runnable_ns(pids: Iterable[int], proc: str = PROC) -> dict[str, int]:
    """Per thread (``"<pid>/<tid>"``) of the processes ``pids``: the nanoseconds it has been
    runnable so far, that is ran on a CPU or waited in a run queue for one (the first two
    fields of ``/proc/<pid>/task/<tid>/schedstat``). A thread that computes is runnable all
    the time, however few CPUs a loaded host leaves it; one that waits (a lock, a socket, a
    peer's all-reduce) is not. Empty where the kernel keeps no schedstat; a thread that
    ended between the listing and the reading is left out."""
    runnable: dict[str, int] = {}
    for pid in pids:
        try:
            tids = os.listdir(f"{proc}/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"{proc}/{pid}/task/{tid}/schedstat", encoding="utf-8") as handle:
                    fields = handle.read().split()
                runnable[f"{pid}/{tid}"] = int(fields[0]) + int(fields[1])
            except (OSError, IndexError, ValueError):
                continue
    return runnable


def busiest_thread_share(before: dict[str, int], after: dict[str, int], elapsed: float) -> float | None:
    """The largest share of the ``elapsed`` seconds between two thread_runnable_ns readings
    that one thread (present in both) was runnable; None over a window shorter than
    RUNNABLE_WINDOW_SECONDS or without a thread in both readings. Measured on this project's
    2-core machine with 40 and 150 other processes spinning: a thread spinning in Python read
    0.92 to 1.02 (while it got 5 % of a core or less), a thread woken 100 times a second
    0.12 to 0.16."""
    if elapsed < RUNNABLE_WINDOW_SECONDS:
        return None
    shares = [(after[thread] - before[thread]) / 1e9 / elapsed for thread in after.keys() & before.keys()]
    return round(max(shares), 4) if shares else None


def process_stat(pid: int | str, proc: str = PROC) -> tuple[str, int] | None:
    """(state, process group) of ``pid``; None when it is gone or unreadable."""
    try:
        with open(f"{proc}/{pid}/stat", encoding="utf-8") as handle:
            return parse_stat(handle.read())
    except OSError:
        return None


def process_ids(proc: str = PROC) -> list[int]:
    """Every pid of the process table, in order."""
    try:
        entries = os.listdir(proc)
    except OSError:
        return []
    return sorted(int(entry) for entry in entries if entry.isdigit())


def group_members(pgid: object, proc: str = PROC) -> list[int]:
    """Live (not ended) processes of the process group ``pgid``, in order; none for a
    ``pgid`` that is not a whole number above 1 (never init's group, never "all")."""
    if isinstance(pgid, bool) or not isinstance(pgid, int) or pgid <= 1:
        return []
    members = []
    for pid in process_ids(proc):
        stat = process_stat(pid, proc)
        if stat is not None and stat[0] not in ENDED_STATES and stat[1] == pgid:
            members.append(pid)
    return members


def process_cwd(pid: int, proc: str = PROC) -> str | None:
    """The working directory of ``pid``, symlinks resolved; None when it is gone or not
    this user's to read."""
    try:
        return os.path.realpath(os.readlink(f"{proc}/{pid}/cwd"))
    except OSError:
        return None


def works_in(pid: object, directory: str, proc: str = PROC) -> bool:
    """``pid`` is a live process working in ``directory``: the process a run recorded,
    not a reused pid of another program."""
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return False
    stat = process_stat(pid, proc)
    if stat is None or stat[0] in ENDED_STATES:
        return False
    return process_cwd(pid, proc) == os.path.realpath(directory)


def _signal_masks(pid: int, fields: tuple[str, ...], sig: int, proc: str) -> bool | None:
    """Whether ``sig`` is set in any of the signal masks ``fields`` of ``pid``'s status;
    None when its status cannot be read."""
    try:
        with open(f"{proc}/{pid}/status", encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    masks = [line.split(":", 1)[1].strip() for line in lines if line.startswith(fields)]
    try:
        return any(int(mask, 16) >> (int(sig) - 1) & 1 for mask in masks) if masks else None
    except ValueError:
        return None


def signal_pending(pid: int, sig: int, proc: str = PROC) -> bool | None:
    """Whether ``sig`` is pending on ``pid`` (sent to it or to its process, and blocked
    there); None when its status cannot be read."""
    return _signal_masks(pid, ("SigPnd:", "ShdPnd:"), sig, proc)


def signal_caught(pid: int, sig: int, proc: str = PROC) -> bool | None:
    """Whether ``pid`` has a handler for ``sig`` (``SigCgt``): a signal whose default
    action ends a process is safe to send only then. None when its status cannot be read."""
    return _signal_masks(pid, ("SigCgt:",), sig, proc)


def oom_kill_counts(proc: str = PROC, cgroup: str = CGROUP) -> dict[str, int]:
    """How many processes the kernel's OOM killer has killed so far, by counter: ``host``
    (``/proc/vmstat``'s ``oom_kill``) and ``cgroup`` (``memory.events``' ``oom_kill`` of
    this process's cgroup v2, where readable). A counter that cannot be read is left out."""
    counts: dict[str, int] = {}
    found = _counter(f"{proc}/vmstat", "oom_kill")
    if found is not None:
        counts["host"] = found
    try:
        with open(f"{proc}/self/cgroup", encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError:
        lines = []
    path = next((line[3:] for line in lines if line.startswith("0::")), None)
    if path is not None:
        found = _counter(os.path.join(cgroup, path.lstrip("/"), "memory.events"), "oom_kill")
        if found is not None:
            counts["cgroup"] = found
    return counts


# The kernel's log of an OOM kill names the process it killed.
KMSG = "/dev/kmsg"
_OOM_KILLED = re.compile(r"(?:Killed process|Out of memory: Killed process|oom_reaper: reaped process) (\d+)\b")


def kernel_oom_killed(pid: int, kmsg: str = KMSG, limit: int = 100000) -> bool | None:
    """Whether the kernel's log names ``pid`` as killed by the OOM killer; None when the
    log cannot be read (``kernel.dmesg_restrict``, no permission). Reads what the ring
    buffer holds, without waiting for more."""
    try:
        fd = os.open(kmsg, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        for _record in range(limit):
            try:
                data = os.read(fd, 8192)
            except BlockingIOError:
                return False
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # a record overwritten while reading: go on
                    continue
                return None
            if not data:
                return False
            found = _OOM_KILLED.search(data.decode("utf-8", errors="replace"))
            if found and int(found.group(1)) == int(pid):
                return True
        return False
    finally:
        os.close(fd)


def oom_evidence(
    pid: int, before: dict[str, int], after: dict[str, int], kmsg: str = KMSG
) -> tuple[int | None, str | None]:
    """How many OOM kills to hold against a SIGKILL of the job ``pid``, and what said so:
    the kernel's log, which names the process it killed (1 or 0); else the growth of the
    job's cgroup counter; else of the host's, which another process's OOM kill grows too;
    (None, None) when nothing could be read."""
    named = kernel_oom_killed(pid, kmsg)
    if named is not None:
        return (1 if named else 0), "the kernel's log"
    for name, source in (("cgroup", "the OOM count of the job's cgroup"), ("host", "the host's OOM count")):
        if name in before and name in after:
            return after[name] - before[name], source
    return None, None


def _counter(path: str, name: str) -> int | None:
    """The value of ``name`` in a ``name value`` per line file; None when unreadable."""
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                key, value = line.partition(" ")[::2]
                if key == name and value.strip().isdigit():
                    return int(value)
    except OSError:
        return None
    return None
