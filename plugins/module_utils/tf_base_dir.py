# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a host's ``tf_worker_base_dir`` is, and whether the runbook may make it its own.

The run's directories are private (0700), ``tf_worker_base_dir`` included: tf_run_dir
makes it 0700 even when it existed with another mode. That is right for a directory that
holds only the runbook's own files, and wrong for a shared one (a home directory, a
project directory of a group). The rule, read on the host by the preflight probe
(:func:`base_dir_state`, standard library only) and decided on the controller
(:func:`base_dir_problems`) before anything is written:

- a missing directory is created by the runbook, 0700, where its nearest existing parent
  lets the remote user create it;
- an existing one must be a directory the remote user owns;
- one that other users may read or enter (a mode wider than 0700) is made private only
  when it holds nothing but the runbook's own entries (or nothing); one with other
  content is refused, never silently chmod-ed. A 0700 directory with other content is
  accepted: its mode does not change;
- its ``runs`` (every run's directory is made there, and made private) must be, when it
  exists, a directory the remote user owns: one left by another user (a run started
  with sudo, say) would fail the launch on that host, after the other hosts were
  deployed.
"""

from __future__ import annotations

import os
import stat
from typing import Any

from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import RUNS_DIR

# What the runbook itself keeps in a base directory (tf_worker roles and tf_run_dir).
RUNBOOK_ENTRIES = frozenset({RUNS_DIR, "venv", "job-archives", "wheelhouse", "worker-requirements.txt"})
# Names of other entries reported, at most.
FOREIGN_SHOWN = 5


def _user(uid: int) -> str:
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return str(uid)


def nearest_existing(path: str, follow_links: bool = False) -> str:
    """``path`` or its nearest existing parent. With ``follow_links``, a symlink whose target
    is missing does not count as existing (what ``os.stat`` and ``shutil.disk_usage`` need)."""
    exists = os.path.exists if follow_links else os.path.lexists
    while not exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def creatable(path: str) -> dict[str, Any]:
    """Whether the remote user can create the missing directory ``path``: its nearest
    existing ``parent``, and whether that is a directory it may write and enter."""
    parent = nearest_existing(os.path.dirname(path))
    return {"parent": parent, "parent_writable": os.path.isdir(parent) and os.access(parent, os.W_OK | os.X_OK)}


def base_dir_state(path: str) -> dict[str, Any]:
    """What the preflight needs to know of ``path`` (``~`` expanded), read only."""
    path = os.path.abspath(path)
    uid = os.geteuid()
    state: dict[str, Any] = {"path": path, "user": _user(uid), "uid": uid, "exists": os.path.exists(path)}
    if not state["exists"]:
        state.update(creatable(path))
        return state
    info = os.stat(path)
    state["is_dir"] = stat.S_ISDIR(info.st_mode)
    state["owner_uid"] = info.st_uid
    state["owner"] = _user(info.st_uid)
    state["mode"] = f"{stat.S_IMODE(info.st_mode):04o}"
    if state["is_dir"] and info.st_uid == uid:
        try:
            names = sorted(os.listdir(path))
        except OSError as exc:
            state["error"] = exc.strerror or str(exc)
            names = []
        foreign = [name for name in names if name not in RUNBOOK_ENTRIES]
        state["foreign_count"] = len(foreign)
        state["foreign"] = foreign[:FOREIGN_SHOWN]
        if RUNS_DIR in names:
            state["runs"] = _entry_state(os.path.join(path, RUNS_DIR))
    return state


def _entry_state(path: str) -> dict[str, Any]:
    """Whether ``path`` (followed, as the launch follows it) is a directory, and whose."""
    try:
        info = os.stat(path)
    except OSError as exc:
        return {"error": exc.strerror or str(exc)}
    return {"is_dir": stat.S_ISDIR(info.st_mode), "owner_uid": info.st_uid, "owner": _user(info.st_uid)}


def base_dir_problems(host: str, state: dict[str, Any] | None) -> list[str]:
    """Why the runbook may not use the base directory ``state`` describes (see the module)."""
    if not state:
        return []
    path = state.get("path", "tf_worker_base_dir")
    user = f"{state.get('user')} (uid {state.get('uid')})"
    own = "pick a directory of its own for the runbook, e.g. ~/tf-runbook"
    if not state.get("exists"):
        if state.get("parent_writable", True):
            return []
        return [
            f"host {host}: tf_worker_base_dir {path} does not exist and the remote user {user} cannot create it "
            f"(nearest existing parent: {state.get('parent')}); {own}"
        ]
    if not state.get("is_dir"):
        return [f"host {host}: tf_worker_base_dir {path} exists and is not a directory; {own}"]
    if state.get("owner_uid") != state.get("uid"):
        return [
            f"host {host}: tf_worker_base_dir {path} belongs to {state.get('owner')} (uid {state.get('owner_uid')}), "
            f"not to the remote user {user}: the runbook keeps its runs in a private directory (0700) of the "
            f"user's own; {own}"
        ]
    if state.get("error"):
        return [f"host {host}: tf_worker_base_dir {path} cannot be listed: {state['error']}"]
    mode = int(str(state.get("mode", "0700")), 8)
    if mode & 0o077 and state.get("foreign_count"):
        shown = ", ".join(state.get("foreign", []))
        more = state["foreign_count"] - len(state.get("foreign", []))
        listing = shown + (f" and {more} more" if more > 0 else "")
        return [
            f"host {host}: tf_worker_base_dir {path} is shared (mode {state['mode']}) and holds files that are not "
            f"the runbook's ({listing}): the runbook makes its base directory private (0700) and will not change "
            f"the mode of a directory others use; {own}, or make this one 0700 yourself"
        ]
    return _runs_problems(host, path, state)


def _runs_problems(host: str, base: str, state: dict[str, Any]) -> list[str]:
    """Why the base directory's ``runs`` cannot hold this run (see the module)."""
    runs = state.get("runs")
    if not runs:
        return []
    path = os.path.join(base, RUNS_DIR)
    other = "move it away or pick another tf_worker_base_dir"
    if runs.get("error"):
        return [f"host {host}: {path}, where the runbook keeps its runs, cannot be read: {runs['error']}; {other}"]
    if not runs.get("is_dir"):
        return [f"host {host}: {path}, where the runbook keeps its runs, exists and is not a directory; {other}"]
    if runs.get("owner_uid") != state.get("uid"):
        user = f"{state.get('user')} (uid {state.get('uid')})"
        return [
            f"host {host}: {path}, where the runbook keeps its runs, belongs to {runs.get('owner')} "
            f"(uid {runs.get('owner_uid')}), not to the remote user {user}: each run's directory is made "
            f"there and made private (0700); give it back to that user (chown -R) or pick another "
            "tf_worker_base_dir"
        ]
    return []
