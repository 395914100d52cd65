# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the wait counts as a worker's activity (issue 37): progress lines, CPU use, GPU
use, and a process that is frozen.

A stall is silence and idleness together. A worker makes progress when it prints a
progress line the wait knows, or when its job's processes (its process group) used more
than ``BUSY_CPU_SHARE`` of one core over a window of at least ``CPU_WINDOW_SECONDS``, or
one of its threads was runnable for more than ``BUSY_RUNNABLE_SHARE`` of a module call's
window (a host loaded past its CPUs leaves a computing job little CPU): a Keras job with
``verbose=2`` prints one line per epoch, and an epoch longer than tf_stall_timeout is no
stall while it computes. Where the host has ``nvidia-smi``, a job
whose GPUs were busier than ``BUSY_GPU_SHARE`` at a check is making progress too
(``gpu_util``, read by module_utils/tf_gpu_use.py).

The host module reads each running job's cumulative CPU time (``cpu_seconds``) and the
host's monotonic clock (``cpu_at``), and its main process's state (``process_state``);
the action on the controller turns successive readings into the host's progress record
(``progress_record``) and tracks since when a worker is frozen (``frozen_since``). Pure
functions of their inputs; the controller's clock is passed in as ``now``.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import WORKER_EXITED

# A job whose processes use more than this share of one core over a window is busy, i.e.
# making progress. Measured (FACTS.md, the team's measurements of tensorflow-cpu 2.21
# workers): two workers deadlocked in an all-reduce behind a peer stuck in its own code
# used 6 clock ticks in 30 s each, 0.2 % of a core; a worker computing through an epoch
# uses close to a whole core (100 %). 5 % sits 25 times above the one and 20 times below
# the other.
BUSY_CPU_SHARE = 0.05
# The shortest window a share is judged over: a second holds only 100 clock ticks, and a
# hung job's few ticks (a gRPC keepalive) could land in one short window. A shorter
# window keeps its earlier reading as the base until it is this long.
CPU_WINDOW_SECONDS = 5.0
# The process states (/proc/<pid>/stat) of a frozen job: stopped (SIGSTOP, a debugger) or
# in uninterruptible sleep (a dead NFS mount, a hung device). Neither ends by itself.
FROZEN_STATES = {"T": "stopped", "t": "stopped", "D": "uninterruptible"}
# A job whose GPUs (tf_gpu_use: those its processes compute on or it was pinned to) are
# busier than this share is making progress too, whatever its CPU: a job that waits for
# a long GPU kernel can leave the host's CPU idle. nvidia-smi's utilisation is the share of
# the last sample period (1/6 s to 1 s) a kernel ran; an idle GPU reads 0 %, a training
# step tens of percent. Caveat: NCCL's collectives spin on the GPU while they wait, so a
# GPU job deadlocked in an all-reduce can read busy; its job deadline still ends it.
BUSY_GPU_SHARE = 0.05
# A job one of whose threads was runnable (running, or waiting in a run queue for a CPU)
# for more than this share of a module call's window is busy, whatever CPU it got: on a
# host with more busy processes than CPUs (other jobs, a test suite beside it) a job that
# computes gets a small share of a core (5 % with 40 other spinning processes on 2 cores,
# measured) but its computing thread stays runnable (0.92 to 1.02 of the window with 40
# and 150 of them), while a waiting thread is runnable only as long as its wake-ups wait
# for a CPU (0.12 to 0.16 for a thread woken 100 times a second, under the same loads).
BUSY_RUNNABLE_SHARE = 0.5
# How long a freeze that ended is still told (its peers' failure comes within a poll or two).
FROZEN_KEPT_SECONDS = 60.0


def cpu_share(before: Any, after: Any) -> float | None:
    """The share of one core (1.0 = a whole core) the job used between two readings
    (``{"seconds": cumulative CPU seconds, "at": host monotonic seconds}``); None when they
    cannot be compared: no earlier reading, a clock that did not move on (another boot),
    or a sum that went down (a process left the group)."""
    try:
        used = float(after["seconds"]) - float(before["seconds"])
        elapsed = float(after["at"]) - float(before["at"])
    except (TypeError, KeyError, ValueError):
        return None
    if elapsed <= 0 or used < 0:
        return None
    return used / elapsed


def cpu_readings(workers: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per worker index (as text) the reading of its job's CPU the host module returned
    (``cpu_seconds`` at ``cpu_at``), for the workers that have one."""
    readings = {}
    for worker in workers:
        seconds, at = worker.get("cpu_seconds"), worker.get("cpu_at")
        if isinstance(seconds, (int, float)) and isinstance(at, (int, float)):
            readings[str(worker.get("index"))] = {"seconds": float(seconds), "at": float(at)}
    return readings


def cpu_windows(
    base: dict[str, Any], readings: dict[str, dict[str, float]]
) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """The next bases of each worker's CPU window and the shares of the windows that ended
    now: a reading replaces its base once the window is ``CPU_WINDOW_SECONDS`` long (or
    cannot be compared to it); a worker with no reading now drops out."""
    bases: dict[str, dict[str, float]] = {}
    shares: dict[str, float] = {}
    for index, reading in readings.items():
        old = base.get(index) if isinstance(base, dict) else None
        share = cpu_share(old, reading)
        if share is not None and reading["at"] - float(old["at"]) < CPU_WINDOW_SECONDS:
            bases[index] = old
            continue
        bases[index] = reading
        if share is not None:
            shares[index] = round(share, 4)
    return bases, shares


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def runnable_readings(workers: list[dict[str, Any]]) -> dict[str, float]:
    """Per worker index (as text) the largest share of the module call's window one of its
    job's threads was runnable (``runnable_share``), for the workers that have one."""
    return {str(w.get("index")): _number(w.get("runnable_share"))
            for w in workers if _number(w.get("runnable_share")) is not None}  # fmt: skip


def gpu_readings(workers: list[dict[str, Any]]) -> dict[str, float]:
    """Per worker index (as text) the utilisation (percent) of its job's GPUs the host
    module read (``gpu_util``), for the workers that have one."""
    return {str(w.get("index")): _number(w.get("gpu_util")) for w in workers if _number(w.get("gpu_util")) is not None}


def _measured(key: str, values: dict[str, float]) -> dict[str, Any]:
    # Only where a host measures it (GPU use, runnable threads): a record without stays as it was.
    return {key: values} if values else {}


def progress_record(previous: Any, host: str, workers: list[dict[str, Any]], now: float) -> dict[str, Any]:
    """This host's progress record after a check at ``now`` (controller clock).

    ``progress_lines``: each worker's progress line count; ``last_line_at``: when one of
    them last changed (``now`` for a host not recorded yet: the watch begins); ``cpu``: the
    base reading of each worker's CPU window; ``cpu_share``: each worker's share of a core
    over its latest window; ``gpu_util``: each worker's latest GPU utilisation (percent),
    only where the host measures one; ``runnable_share``: each worker's busiest thread's
    runnable share of the latest module call's window, only where the host measures one;
    ``busy_at``: when a window last ended with a worker busy (``BUSY_CPU_SHARE``) or a
    check saw a worker's GPUs busy (``BUSY_GPU_SHARE``) or a thread of its runnable for
    most of the call (``BUSY_RUNNABLE_SHARE``),
    None before; ``last_progress_at``: the later of ``last_line_at`` and ``busy_at``, what
    the stall watchdog reads. A record of an earlier version (only ``last_progress_at``) counts
    as its lines' time."""
    counts = {str(w.get("index")): int(w.get("progress_lines") or 0) for w in workers}
    readings = cpu_readings(workers)
    gpus = gpu_readings(workers)
    runnable = runnable_readings(workers)
    old = previous if isinstance(previous, dict) else {}
    started = _number(old.get("last_progress_at"))
    if started is None:
        return {"host": host, "progress_lines": counts, "last_line_at": now, "busy_at": None, "cpu": readings,
                "cpu_share": {}, **_measured("gpu_util", gpus),
                **_measured("runnable_share", runnable), "last_progress_at": now}  # fmt: skip
    old_counts = old.get("progress_lines") if isinstance(old.get("progress_lines"), dict) else {}
    moved = any(old_counts.get(index) != count for index, count in counts.items())
    line_at = _number(old.get("last_line_at"))
    last_line_at = now if moved else (line_at if line_at is not None else started)
    bases, shares = cpu_windows(old.get("cpu") or {}, readings)
    old_shares = old.get("cpu_share") if isinstance(old.get("cpu_share"), dict) else {}
    latest = {index: shares.get(index, old_shares.get(index)) for index in bases}
    busy = any(share >= BUSY_CPU_SHARE for share in shares.values())
    busy = busy or any(util >= BUSY_GPU_SHARE * 100 for util in gpus.values())
    busy = busy or any(share >= BUSY_RUNNABLE_SHARE for share in runnable.values())
    busy_at = now if busy else _number(old.get("busy_at"))
    return {
        "host": host, "progress_lines": counts, "last_line_at": last_line_at, "busy_at": busy_at, "cpu": bases,
        "cpu_share": {index: share for index, share in latest.items() if share is not None}, **_measured("gpu_util", gpus),
        **_measured("runnable_share", runnable),
        "last_progress_at": max(last_line_at, busy_at or 0.0),
    }  # fmt: skip


def seconds_without_progress(records: list[dict[str, Any]], now: float) -> float | None:
    """Seconds since the latest progress of any kind on any host (None with no record)."""
    if not records:
        return None
    return max(0.0, now - max(float(r["last_progress_at"]) for r in records))


def _peak(records: list[dict[str, Any]], key: str) -> tuple[float, str, Any] | None:
    """The highest value of any worker under ``key`` (a mapping of worker index to a
    number, as ``cpu_share`` and ``gpu_util`` are), with its host and index; None where
    no record measured one."""
    values = [
        (float(value), str(r.get("host")), index)
        for r in records if isinstance(r.get(key), dict)
        for index, value in r[key].items() if _number(value) is not None
    ]  # fmt: skip
    return max(values) if values else None


def stall_detail(records: list[dict[str, Any]], now: float, timeout: int) -> str:
    """What the stall watchdog saw, for the stall's reason: the seconds since any worker's
    latest progress line, and the most CPU any worker used over its latest window (which
    worker, on which host), or that no CPU use was measured; and where a host measured
    GPU use (nvidia-smi), the highest utilisation of any worker's GPUs."""
    line_times = [_number(r.get("last_line_at")) or float(r["last_progress_at"]) for r in records]
    silent = max(0.0, now - max(line_times)) if line_times else 0.0
    cpu_peak = _peak(records, "cpu_share")
    if cpu_peak:
        share, host, index = cpu_peak
        cpu = (f"none used over {BUSY_CPU_SHARE:.0%} of a core (at most {share:.1%}, worker {index} on {host})")
    else:
        cpu = "no CPU use was measured"
    runnable_peak = _peak(records, "runnable_share")
    if runnable_peak:
        share, host, index = runnable_peak
        cpu += f", nor had a thread runnable over {BUSY_RUNNABLE_SHARE:.0%} of a check (at most {share:.1%}, worker {index} on {host})"
    gpu_peak = _peak(records, "gpu_util")
    if gpu_peak:
        util, host, index = gpu_peak
        cpu += f", nor over {BUSY_GPU_SHARE:.0%} of a GPU (at most {util:.0f}%, worker {index} on {host})"
    return f"no worker printed a progress line for {silent:.0f} s and {cpu} (tf_stall_timeout {timeout} s)"


def frozen_since(previous: dict[str, Any], workers: list[dict[str, Any]], now: float) -> dict[str, dict[str, Any]]:
    """Per worker index (as text) whose job was seen frozen (its ``process_state`` one of
    FROZEN_STATES): ``state`` (stopped or uninterruptible) and ``since``, the controller
    time it was first seen so without a check in between that saw it otherwise; and
    ``until``, the first check that no longer saw it frozen, for a freeze that ended up to
    FROZEN_KEPT_SECONDS ago. A frozen job's peers fail for lack of it, and the stop that
    follows (a peer's announcement, the runbook's) continues it before it ends it: the
    freeze must outlive the job's last frozen check to name it. ``previous`` is the result
    of the check before."""
    frozen: dict[str, dict[str, Any]] = {}
    for worker in workers:
        index = str(worker.get("index"))
        state = FROZEN_STATES.get(str(worker.get("process_state")))
        seen = previous.get(index) if isinstance(previous, dict) else None
        seen = seen if isinstance(seen, dict) else None
        if state is not None and worker.get("state") != WORKER_EXITED:
            ongoing = seen is not None and seen.get("state") == state and seen.get("until") is None
            frozen[index] = {"state": state, "since": seen["since"] if ongoing else now}
        elif seen is not None:
            until = seen.get("until") or now
            if now - until <= FROZEN_KEPT_SECONDS:
                frozen[index] = {**seen, "until": until}
    return frozen


def frozen_entry(frozen: dict[str, dict[str, Any]], worker: dict[str, Any], now: float) -> dict[str, Any] | None:
    """What a worker's status says of it being frozen: ``state``, ``since`` (controller
    clock), ``seconds`` it was seen frozen (until ``now``, or until the freeze ended) and
    ``until`` (None while it lasts); None when it was not."""
    seen = frozen.get(str(worker.get("index")))
    if seen is None:
        return None
    end = seen.get("until") or now
    return {"state": seen["state"], "since": seen["since"], "seconds": round(max(0.0, end - seen["since"]), 1),
            "until": seen.get("until")}
