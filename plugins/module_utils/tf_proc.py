# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""This host's processes as ``/proc`` shows them, read in one place (issue 12).

A run's processes are found through the run's own records (the pids and the process group
in ``state.json``) and confirmed by what ``/proc`` says of them now: alive (not a zombie),
in that process group, working in that worker's directory. Nothing is ever found by name.

tf_worker_stop and tf_worker_status import this module. The supervisor
(``roles/tf_worker/files/tf_supervisor.py``) runs on the hosts as one standard-library file
and keeps its own copy of ``ENDED_STATES``, ``parse_stat``, ``process_stat``,
``process_ids`` and ``group_members``; ``tests/unit/test_tf_proc.py`` checks that both
copies give the same answers on the same ``/proc`` trees.

Every function takes the ``/proc`` root as ``proc``, so that a test can hand it a tree of
its own.
"""

from __future__ import annotations

import os

PROC = "/proc"
# The states of a process that has ended: a zombie waiting for its reaper, or dead.
ENDED_STATES = ("Z", "X")


def parse_stat(text: str) -> tuple[str, int] | None:
    """(state, process group) from the text of ``/proc/<pid>/stat``; None when the text is
    not one. The command name may hold spaces and parentheses: the fields start after the
    last ')'."""
    fields = text[text.rfind(")") + 2 :].split()
    try:
        return fields[0], int(fields[2])
    except (IndexError, ValueError):
        return None


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
