# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Progress a person can plan with (issue 39): where a worker's training stands, how long
an epoch takes, and when the run will end, computed once for the wait's lines,
status.yml and the report.

The input is a worker's progress record (``tf_metrics.progress_of``: its latest epoch,
total and metrics, and when its epochs ended, all on the clock of the host that timed
them, so that a host's clock that is off changes no duration), the host's clock now, and
the controller's clock now for the finishing time. Every output format of
``tf_metrics.FORMATS`` gives such a record, the runbook's own contract lines and Keras'
``Epoch E/N`` and step lines alike.

The mean time per epoch leaves out the first epoch once there is a second: the first
holds the start-up (joining the cluster, building the dataset and the model), which no
later epoch repeats. The time left is the epochs still to come at that mean, less what
the current epoch already ran.

Pure functions over plain values: nothing here reads a file or the clock.
"""

from __future__ import annotations

import math
import time
from typing import Any

# A finishing time this far away is written with its date.
DATED_AFTER_SECONDS = 20 * 3600


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def duration_text(seconds: float | None) -> str:
    """``3.1 s``, ``42 s``, ``4 min 05 s``, ``2 h 03 min``; ``?`` for None."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    seconds = max(0.0, seconds)
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    whole = round(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


def clock_text(stamp: float | None, now: float | None = None) -> str:
    """A controller time as ``10:02:31 UTC`` (with its date when far from ``now``)."""
    if stamp is None or not math.isfinite(stamp):
        return "?"
    try:
        far = now is not None and abs(stamp - now) >= DATED_AFTER_SECONDS
        return time.strftime("%Y-%m-%d %H:%M UTC" if far else "%H:%M:%S UTC", time.gmtime(stamp))
    except (OverflowError, OSError, ValueError):
        return "?"


def epoch_durations(epoch_at: dict[str, Any], joined_at: Any = None) -> list[tuple[int, float]]:
    """Each epoch's duration, in the order the epochs ended: from the end of the epoch
    before (the first from ``joined_at``, when known), from a worker's clock ``{"<epoch>":
    time}`` (the timeline of summary.json, exit.json's timed lines through tf_metrics)."""
    ends = sorted(
        (at, int(epoch))
        for epoch, at in (epoch_at.items() if isinstance(epoch_at, dict) else [])
        if str(epoch).isdigit() and _number(at) is not None
    )
    previous = _number(joined_at)
    durations = []
    for at, epoch in ends:
        if previous is not None and at >= previous:
            durations.append((epoch, at - previous))
        previous = at
    return durations


def mean_epoch(durations: list[float]) -> float | None:
    """The mean of ``durations`` (in the order the epochs ended), without the first once
    there is a second (the first holds the start-up)."""
    kept = durations[1:] if len(durations) > 1 else durations
    return sum(kept) / len(kept) if kept else None


def metric_pairs(metrics: Any) -> list[tuple[str, str]]:
    """A record's metrics (``[name, value]`` pairs, or a mapping) as pairs, in order."""
    if isinstance(metrics, dict):
        return [(str(k), str(v)) for k, v in metrics.items()]
    if isinstance(metrics, list):
        return [(str(p[0]), str(p[1])) for p in metrics if isinstance(p, (list, tuple)) and len(p) == 2]
    return []


def metrics_text(metrics: Any) -> str:
    """``loss 0.6689, accuracy 0.5688`` (in the order the job printed them)."""
    return ", ".join(f"{name} {value}" for name, value in metric_pairs(metrics))


def worker_progress(
    record: Any,
    host_now: float,
    controller_now: float,
    started_at: Any = None,
    ended_at: Any = None,
) -> dict[str, Any] | None:
    """Where one worker stands, from its progress record (``tf_metrics.progress_of``;
    None or a malformed record: None).

    ``host_now``: the host's clock now (the record's and ``started_at``'s clock);
    ``controller_now``: the controller's, for ``finish_at``; ``ended_at``: when the worker
    exited (host clock), None while it runs.

    Returns ``epoch``, ``total``, ``metrics``, ``last`` and ``mean`` (seconds per epoch:
    the latest epoch's, and the mean without the first), ``elapsed`` (since its job
    started), ``since`` (since its latest epoch ended), ``left`` and ``finish_at`` (the
    controller's time the training should end; None without a total or once the
    epochs are done), ``phase`` (``training``, ``finishing`` after the last epoch,
    ``complete`` after the contract's ``training_complete``, ``ended`` once it exited) and
    ``text``, the line a person reads."""
    if not isinstance(record, dict):
        return None
    epoch, total, epochs = _count(record.get("epoch")), _count(record.get("total")), _count(record.get("epochs"))
    last_at, first_at = _number(record.get("last_at")), _number(record.get("first_at"))
    if epoch is None or last_at is None or not epochs:
        return None
    prev_at, joined_at = _number(record.get("prev_at")), _number(record.get("joined_at"))
    if prev_at is not None:
        last = last_at - prev_at
    elif joined_at is not None and last_at >= joined_at:
        last = last_at - joined_at
    else:
        last = None
    if epochs > 1 and first_at is not None:
        mean = (last_at - first_at) / (epochs - 1)
    else:
        mean = last
    end = _number(ended_at)
    now = end if end is not None else host_now
    started = _number(started_at)
    elapsed = now - started if started is not None and now >= started else None
    since = max(0.0, now - last_at)
    done = total is not None and epoch >= total
    left = None
    if end is None and total is not None and not done and mean is not None:
        left = max(0.0, (total - epoch) * mean - since)
    if end is not None:
        phase = "ended"
    elif _number(record.get("completed_at")) is not None:
        phase = "complete"
    elif done:
        phase = "finishing"
    else:
        phase = "training"
    finish_at = controller_now + left if left is not None else None
    of_total = f" of {total}" if total is not None else ""
    shown = metrics_text(record.get("metrics"))
    parts = [f"epoch {epoch}{of_total}" + (f" ({shown})" if shown else "")]
    if phase == "finishing":
        parts[0] = f"epoch {epoch}{of_total} done {duration_text(since)} ago; saving and exiting" + (f" ({shown})" if shown else "")
    elif phase == "ended" and done:
        parts[0] = f"epoch {epoch}{of_total} done" + (f" ({shown})" if shown else "")
    elif phase == "complete":
        parts[0] = f"epoch {epoch}{of_total} done, training complete; exiting" + (f" ({shown})" if shown else "")
    timing = []
    if last is not None:
        timing.append(f"{duration_text(last)}/epoch last")
    if mean is not None and epochs > 1:
        timing.append(f"{duration_text(mean)} mean")
    if timing:
        parts.append(", ".join(timing))
    if elapsed is not None:
        parts.append(f"{'took' if phase == 'ended' else 'elapsed'} {duration_text(elapsed)}")
    if left is not None:
        parts.append(f"about {duration_text(left)} left, done by {clock_text(finish_at, controller_now)}")
    return {
        "epoch": epoch,
        "total": total,
        "metrics": dict(metric_pairs(record.get("metrics"))),
        "last": last,
        "mean": mean,
        "elapsed": elapsed,
        "since": since,
        "left": left,
        "finish_at": finish_at,
        "phase": phase,
        "text": "; ".join(parts),
    }


def agreement_key(progress: dict[str, Any] | None) -> tuple[Any, ...] | None:
    """What workers must share for one line to stand for them all: the epoch, its total and
    metrics, and the phase (their timings differ by a poll at most)."""
    if progress is None:
        return None
    return (progress["epoch"], progress["total"], tuple(sorted(progress["metrics"].items())), progress["phase"])


def grouped(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per worker (``index``, ``state``: its state text, ``progress``: from
    ``worker_progress`` or None, ``fallback``: its latest progress line) to the lines to
    print: one for every worker when they all agree (same state and
    ``agreement_key``; the slowest one's times), else one per worker. Each line has
    ``who`` (``worker-1``, with its task where the entry has one: ``worker-3 (ps:0)``, or
    ``workers 0,1``), ``state``, ``text`` and ``key``, the part
    that is news when it changes (the times aside)."""
    def line(who: str, entry: dict[str, Any]) -> dict[str, Any]:
        progress = entry.get("progress")
        text = progress["text"] if progress is not None else str(entry.get("fallback") or "(no progress line yet)")
        key = (entry.get("state"), agreement_key(progress) if progress is not None else text)
        return {"who": who, "state": entry.get("state"), "text": text, "key": key}

    if len(entries) > 1 and all(e.get("progress") is not None for e in entries):
        first = entries[0]
        same = all(
            e.get("state") == first.get("state") and agreement_key(e["progress"]) == agreement_key(first["progress"])
            for e in entries
        )
        if same:
            slowest = max(entries, key=lambda e: (e["progress"]["left"] or 0.0, e["progress"]["elapsed"] or 0.0))
            who = "workers " + ",".join(str(e.get("index")) for e in entries)
            return [line(who, {**slowest, "state": first.get("state")})]
    return [line(f"worker-{e.get('index')}" + (f" ({e['task']})" if e.get("task") else ""), e) for e in entries]
