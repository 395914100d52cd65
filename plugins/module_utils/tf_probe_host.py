# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the preflight's host look (``tf_preflight_host``) sees on a worker host, read only: its worker
ports, the free space and state of its base directory, an earlier launch of the run id,
the GPUs it shows and the checkpoint directory (the module ``tf_preflight_host`` calls
``probe_host`` and ``checkpoint_state``; the pieces live in ``tf_probe_*``)."""

from __future__ import annotations

import os
import shutil
from typing import Any

from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_base_dir import base_dir_state, creatable, nearest_existing
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_probe_addresses import names_only, resolve_addresses, source_addresses
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_probe_interpreter import (
    Runner,
    interpreter_file,
    interpreter_python3,
    interpreter_state,
    interpreter_versions,
)
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_probe_ports import busy_ports
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import (
    CHECKPOINTS_DIR,
    LAUNCH_RECORDS,
    RETRY_PREFIX,
    RUNS_DIR,
    WORKER_PREFIX,
    run_dir_of,
)


def launched_record(base_dir: str, run_id: str) -> str:
    """A record that shows ``run_id`` was already launched under ``base_dir``, or '': a
    worker's launch record, or backups in the run's own checkpoint directory (its worker
    directories removed, a run copied in): a new run there would resume from them. The
    runbook's own dot files in it do not count (a deploy may write them)."""
    run_dir = run_dir_of(base_dir, run_id)
    if not os.path.isdir(run_dir):
        return ""
    for root, dirs, files in os.walk(run_dir):
        dirs[:] = [d for d in dirs if d.startswith((WORKER_PREFIX, RETRY_PREFIX))]
        for record in LAUNCH_RECORDS:
            if record in files:
                return os.path.join(root, record)
    backups = os.path.join(run_dir, CHECKPOINTS_DIR)
    try:
        if any(not name.startswith(".") for name in os.listdir(backups)):
            return backups
    except OSError:
        pass
    return ""


def count_gpus(proc: str = "/proc", run: Runner | None = None) -> int:
    """GPUs the host shows: NVIDIA's driver lists one directory per GPU; else what
    ``nvidia-smi -L`` lists, run with ``run`` (None: not asked)."""
    listing = os.path.join(proc, "driver", "nvidia", "gpus")
    if os.path.isdir(listing):
        return len(os.listdir(listing))
    smi = shutil.which("nvidia-smi")
    if smi and run is not None:
        try:
            _rc, out, _err = run([smi, "-L"], 20)
        except OSError:  # TimeoutError among them
            return 0
        return sum(1 for line in out.splitlines() if line.startswith("GPU "))
    return 0


def probe_host(
    ports: list[int], base_dir: str, run_id: str, proc: str = "/proc", run: Runner | None = None
) -> dict[str, Any]:
    """``base_dir`` as the module got it: ``~`` already expanded (the option's type is path)."""
    base = base_dir
    usage = shutil.disk_usage(nearest_existing(os.path.abspath(base), follow_links=True))
    return {
        "busy_ports": busy_ports(ports, proc),
        "free_mb": usage.free // (1024 * 1024),
        "base_dir": os.path.abspath(base),
        "run_launched": launched_record(os.path.abspath(base), run_id),
        "base_dir_state": base_dir_state(base),
        "gpus": count_gpus(proc, run),
        "base_dir_identity": base_dir_identity(base, proc),
    }


def base_dir_identity(base_dir: str, proc: str = "/proc") -> str:
    """What tells two inventory hosts that are one machine with one base directory: the
    running kernel's boot id (shared by containers and network namespaces of one machine,
    new at every boot), the device and inode of the base directory or of its nearest
    existing parent, and the rest of its path. Two hosts with the same identity would
    keep their runs in the same directories. Empty where the boot id cannot be read."""
    try:
        with open(os.path.join(proc, "sys/kernel/random/boot_id"), encoding="ascii") as handle:
            boot = handle.read().strip()
    except OSError:
        return ""
    path = os.path.abspath(base_dir)
    existing = nearest_existing(path, follow_links=True)
    try:
        info = os.stat(existing)
    except OSError:
        return ""
    rest = os.path.relpath(path, existing)
    return f"{boot}:{info.st_dev}:{info.st_ino}:{rest}"


def checkpoint_state(checkpoint_dir: str, base_dir: str = "") -> dict[str, Any]:
    """Whether the run's checkpoints can be made under ``checkpoint_dir`` on this host;
    ``runs_dir`` where that directory lies in (or is) the runs directory under ``base_dir``,
    where every run keeps its own directory (symlinks followed)."""
    if not checkpoint_dir:
        return {}
    path = os.path.abspath(checkpoint_dir)
    inside: dict[str, Any] = {}
    if base_dir:
        runs = os.path.realpath(os.path.join(os.path.abspath(base_dir), RUNS_DIR))
        real = os.path.realpath(path)
        if os.path.commonpath([real, runs]) == runs:
            inside = {"runs_dir": runs}
    if os.path.exists(path):
        return {"path": path, "exists": True, "is_dir": os.path.isdir(path),
                "writable": os.access(path, os.W_OK | os.X_OK), **inside}
    return {"path": path, "exists": False, **creatable(path), **inside}


def look_host(
    run: Runner, ports: list[int], base_dir: str, run_id: str, interpreter: str = "", python: str = "",
    versions_code: str = "", checkpoint_dir: str = "", addresses: list[str] | None = None,
) -> dict[str, Any]:
    """Everything the host look reports before it listens: ``probe_host``, then where the
    worker interpreter is (run once as Python 3 where its versions are not read, since an
    executable that is not Python 3 would otherwise first fail at the launch), the
    checkpoint directory, what the cluster's ``addresses`` resolve to and come from, and
    with ``python`` the versions that ``versions_code`` prints."""
    seen = probe_host(ports, base_dir, run_id, run=run)
    seen["interpreter_state"] = interpreter_state(interpreter)
    # Where its versions are not read (one host, or not every host names it), the
    # interpreter is still run once.
    found = "" if python else interpreter_file(seen["interpreter_state"])
    if found:
        version, fault = interpreter_python3(found, run)
        seen["interpreter_state"].update({"python": version} if version else {"fault": fault})
    seen["checkpoint_state"] = checkpoint_state(checkpoint_dir, base_dir)
    resolved = resolve_addresses(addresses or [])
    seen["sources"] = source_addresses(resolved)
    seen["resolved"] = names_only(resolved)
    if python:
        seen["versions"] = interpreter_versions(python, versions_code, run)
    return seen
