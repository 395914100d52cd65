# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The GPU use of each running job, read on its host with ``nvidia-smi`` (issue 37).

A job that computes on a GPU uses little CPU: its one busy thread feeds the device, and a
long epoch that prints nothing could look idle to the CPU measure of ``tf_activity``. The
wait's host module asks ``nvidia-smi`` (where the host has one) for every GPU's
utilisation and for the GPU of every compute process, and gives each running job the
highest utilisation of its GPUs: those its processes (its process group) run on, and
those it was pinned to (``CUDA_VISIBLE_DEVICES`` of its ``job_env.json``; a container
may hide the processes' pids from ``nvidia-smi``). A job with no GPU of its own gets none
(None), which the controller reads as "not measured".

``nvidia-smi`` can hang (a GPU fallen off the bus, a driver in trouble): every call has
``SMI_TIMEOUT_SECONDS``, after which it is killed and left unwaited for (a process in
uninterruptible sleep cannot be reaped), and the reading is simply missing. Standard
library only: it runs on the worker host inside the module.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from typing import Iterable

# Where the driver installs nvidia-smi when the module's PATH (often a short system one,
# over SSH) does not name it: distribution packages, the .run installer, NVIDIA's
# container toolkit, WSL.
NVIDIA_SMI_CANDIDATES = (
    "/usr/bin/nvidia-smi",
    "/usr/local/bin/nvidia-smi",
    "/usr/local/nvidia/bin/nvidia-smi",
    "/usr/lib/wsl/lib/nvidia-smi",
)
# A healthy nvidia-smi answers in well under a second; the wait's module run must never
# hang behind one that does not.
SMI_TIMEOUT_SECONDS = 5.0
GPU_QUERY = ("--query-gpu=index,uuid,utilization.gpu", "--format=csv,noheader,nounits")
APPS_QUERY = ("--query-compute-apps=pid,gpu_uuid", "--format=csv,noheader,nounits")


def find_nvidia_smi(path: str | None = None, candidates: Iterable[str] = NVIDIA_SMI_CANDIDATES) -> str | None:
    """The nvidia-smi to ask: the one on ``path`` (the process's PATH by default), else the
    first executable of ``candidates``; None when the host has none."""
    found = shutil.which("nvidia-smi", path=path if path is not None else os.environ.get("PATH", os.defpath))
    if found:
        return found
    return next((c for c in candidates if os.path.isfile(c) and os.access(c, os.X_OK)), None)


def run_smi(smi: str, args: Iterable[str], timeout: float = SMI_TIMEOUT_SECONDS) -> list[list[str]] | None:
    """The CSV rows ``smi args`` printed, each split into stripped fields; None when it
    failed, exited non-zero or did not end within ``timeout`` seconds (then it is killed,
    in its own session with whatever it started, and not waited for)."""
    try:
        # Not AnsibleModule.run_command: it has no timeout and waits for the process, and
        # the point here is to give up on an nvidia-smi that hangs.
        process = subprocess.Popen(  # pylint: disable=ansible-bad-function,consider-using-with
            [smi, *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            start_new_session=True, text=True,
        )  # fmt: skip
    except OSError:
        return None
    try:
        out, _err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except OSError:
            pass
        if process.stdout is not None:
            process.stdout.close()
        return None
    if process.returncode != 0:
        return None
    return [[field.strip() for field in line.split(",")] for line in out.splitlines() if line.strip()]


def parse_gpus(rows: list[list[str]] | None) -> list[dict[str, object]]:
    """Every GPU of ``--query-gpu=index,uuid,utilization.gpu``: ``index`` (text),
    ``uuid`` and ``util`` (percent; None where the driver says ``[N/A]``)."""
    gpus: list[dict[str, object]] = []
    for row in rows or []:
        if len(row) < 3:
            continue
        try:
            util: float | None = float(row[2])
        except ValueError:
            util = None
        gpus.append({"index": row[0], "uuid": row[1], "util": util})
    return gpus


def parse_apps(rows: list[list[str]] | None) -> dict[int, set[str]]:
    """pid to the uuids of the GPUs it computes on, from ``--query-compute-apps=pid,gpu_uuid``."""
    apps: dict[int, set[str]] = {}
    for row in rows or []:
        if len(row) >= 2 and row[0].isdigit():
            apps.setdefault(int(row[0]), set()).add(row[1])
    return apps


def pinned(visible: object, gpus: list[dict[str, object]]) -> set[str]:
    """The uuids of the GPUs a ``CUDA_VISIBLE_DEVICES`` value names, by index or by
    uuid (CUDA accepts a uuid's unambiguous prefix); an empty value or ``-1`` names none."""
    names = [name.strip() for name in str(visible or "").split(",") if name.strip()]
    found: set[str] = set()
    for name in names:
        for gpu in gpus:
            uuid = str(gpu["uuid"])
            if name == gpu["index"] or (name.startswith("GPU-") and uuid.startswith(name)):
                found.add(uuid)
    return found


def job_gpu_use(
    jobs: dict[object, dict[str, object]], gpus: list[dict[str, object]], apps: dict[int, set[str]]
) -> dict[object, float | None]:
    """Per job of ``jobs`` (key to ``{"pids": [...], "visible": CUDA_VISIBLE_DEVICES}``) the
    highest utilisation (percent) of its GPUs, those its processes run on and those it was
    pinned to; None for a job with no GPU or no reading of its GPUs."""
    use: dict[object, float | None] = {}
    for key, job in jobs.items():
        pids = job.get("pids") or []
        uuids = pinned(job.get("visible"), gpus)
        for pid in pids if isinstance(pids, (list, tuple, set)) else []:
            uuids |= apps.get(pid, set())
        utils = [float(g["util"]) for g in gpus if g["uuid"] in uuids and isinstance(g["util"], (int, float))]
        use[key] = max(utils) if utils else None
    return use


def gpu_use(jobs: dict[object, dict[str, object]], smi: str | None = None,
            timeout: float = SMI_TIMEOUT_SECONDS) -> dict[object, float | None]:  # fmt: skip
    """``job_gpu_use`` over what ``smi`` (found by ``find_nvidia_smi`` when not given) says
    now; every job None on a host without nvidia-smi, or when it fails or hangs."""
    empty: dict[object, float | None] = {key: None for key in jobs}
    if not jobs:
        return empty
    smi = smi or find_nvidia_smi()
    if smi is None:
        return empty
    gpus = parse_gpus(run_smi(smi, GPU_QUERY, timeout))
    if not gpus:
        return empty
    return job_gpu_use(jobs, gpus, parse_apps(run_smi(smi, APPS_QUERY, timeout)))
