"""The run report's view: chart and timeline geometry computed from the verdict's summary.

Every value comes from a record a job or a host wrote (metric values, times, causes,
stacks), so nothing here may loop or fail on a legal but odd value: the axes carry at most
``MAX_TICKS`` ticks whatever the span, values past the float type's range are skipped by
name, and the page prints everything through Jinja's autoescape.
"""

from __future__ import annotations

import math
import shlex
import sys
import time
from typing import Any
from urllib.parse import quote

from ansible.errors import AnsibleFilterError

from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_causes import CAUSES
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_progress import epoch_durations, mean_epoch
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_verdict_evaluator import FAILED, LOST, UNKNOWN, evaluator_line


# Chart box (SVG user units); the page scales it to its column.
CHART_W = 520
CHART_H = 230
CHART_LEFT = 62
CHART_RIGHT = 12
CHART_TOP = 12
CHART_BOTTOM = 34
# Timeline box: labels on the left, seconds since the attempt's first launch across.
TIMELINE_W = 1040
TIMELINE_LABEL_W = 170
TIMELINE_RIGHT = 16
TIMELINE_TOP = 22
TIMELINE_BOTTOM = 30
# Markers on every point only while a chart stays readable with them.
MARKER_MAX_EPOCHS = 30
MARKER_MAX_SERIES = 8
# Workers of an attempt drawn in widening strokes, so that coinciding curves all show.
NESTED_MAX_WORKERS = 4
# At most this many ticks on an axis, whatever the span of its values.
MAX_TICKS = 12
# Epoch numbers beyond this are not drawn (a record's epoch key is only digits).
MAX_EPOCH = 10**9
# At most this many epochs' times are listed per attempt (the first and the last ones).
MAX_EPOCH_TIMES = 40
# At most this many collected artifacts are listed.
MAX_ARTIFACTS = 200
# Frames of a worker's captured stack shown (innermost last).
MAX_FRAMES = 8
# The largest finite float: padded axis ends are clamped to it.
FLOAT_MAX = sys.float_info.max
# At most this many metric values are drawn (32 workers x 200 epochs x 2 metrics are
# 12,800, drawn in about 0.3 s of CPU): beyond, the page says why it is not drawn.
MAX_VALUES = 500_000


def palette(count: int) -> list[str]:
    """``count`` distinct colours (the golden angle around the hue circle)."""
    return [f"hsl({(index * 137.508) % 360:.0f},70%,{42 if index % 2 == 0 else 34}%)" for index in range(count)]


def nice_ticks(low: float, high: float, target: int = 5) -> list[float]:
    """Round tick values covering ``low..high``: steps of 1, 2 or 5 times a power of ten,
    never more than ``MAX_TICKS`` of them. A span the float type cannot step through (below
    the values' precision, as 1e16 to 1e16 + 2, or one that underflows) gets its two ends;
    a span past its range (-1e308 to 1e308) is stepped without ever forming it."""
    if not (math.isfinite(low) and math.isfinite(high)):
        raise AnsibleFilterError(f"tf_report_view: cannot scale an axis from {low} to {high}")
    if high <= low:
        return [low]
    target = min(max(target, 1), MAX_TICKS - 2)
    raw = high / target - low / target  # (high - low) / target, which never overflows
    if not (math.isfinite(raw) and raw >= sys.float_info.min):
        return [low, high]
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw * (1 - 1e-9))
    if not math.isfinite(step) or step <= 2 * math.ulp(max(abs(low), abs(high))):
        return [low, high]
    # Multiples of the step: k * step, k counted in integers (bounded: |low / step| is
    # below 2**53 here), so no tick is a sum that stops growing or overflows.
    first = math.ceil(low / step - 1e-9)
    last = math.floor(high / step + 1e-9)
    decimals = max(0, -math.floor(math.log10(step))) + 2  # the step's, to drop float noise (0.35000000000000003)
    ticks = [round(k * step, decimals) for k in range(first, min(last, first + MAX_TICKS - 1) + 1)]
    return [t for t in ticks if math.isfinite(t)] or [low, high]


def fmt_number(value: float, step: float) -> str:
    """A tick label with as many decimals as the step needs (as many significant digits,
    up to the float type's 17, for large or small values)."""
    if value == 0:
        return "0"
    if abs(value) >= 1e6 or abs(value) < 1e-4:
        digits = 3
        if 0 < step < abs(value):
            digits = min(17, max(3, math.ceil(math.log10(abs(value) / step)) + 1))
        return f"{value:.{digits}g}"
    decimals = max(0, -math.floor(math.log10(step))) if step > 0 else 4
    return f"{value:.{min(decimals, 6)}f}"


def fmt_seconds(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-"
    if abs(seconds) < 100:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}:{rest:02d} min"


def fmt_time(stamp: float | None) -> str:
    if stamp is None:
        return "-"
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(stamp))
    except (OverflowError, OSError, ValueError):  # a record's time past what the clock knows
        return f"{stamp:g} s since 1970"


def _float(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _epoch(value: Any) -> int | None:
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if 0 <= number <= MAX_EPOCH else None


def _stamp(value: Any) -> float | None:
    """A time from a record: a finite number, else None (not drawn)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _clamp(value: float) -> float:
    return min(max(value, -FLOAT_MAX), FLOAT_MAX)


def _who(indices: list[int]) -> str:
    return ("worker " if len(indices) == 1 else "workers ") + ", ".join(str(i) for i in indices)


class Scale:
    """Linear map of ``low..high`` onto pixels ``start..end``."""

    def __init__(self, low: float, high: float, start: float, end: float) -> None:
        self.low, self.high, self.start, self.end = low, high, start, end

    def __call__(self, value: float) -> float:
        if self.high == self.low:
            return round((self.start + self.end) / 2, 1)
        # Halves: the same ratio (scaling by two is exact), and no difference overflows.
        fraction = (value / 2 - self.low / 2) / (self.high / 2 - self.low / 2)
        pixel = self.start + fraction * (self.end - self.start)
        return round(pixel, 1) if math.isfinite(pixel) else float(self.start)


def metric_names(attempts: list[dict[str, Any]]) -> list[str]:
    """Every metric any worker printed: ``loss`` first, then by name (summary.json sorts
    its keys, so the order the job printed them in is not kept)."""
    names = {name for a in attempts for row in a.get("workers") or [] for m in (row.get("metrics") or {}).values()
             for name in m}
    return sorted(names, key=lambda name: (name != "loss", name))


def chart(name: str, attempts: list[dict[str, Any]], colors: dict[int, str]) -> dict[str, Any]:
    """One metric over epochs: a polyline per worker and attempt, disagreements marked."""
    multi = len(attempts) > 1
    series_points: list[tuple[dict[str, Any], int, list[tuple[int, float]]]] = []
    skipped: list[str] = []
    for attempt in attempts:
        for row in attempt.get("workers") or []:
            points = []
            for epoch_key, values in (row.get("metrics") or {}).items():
                if name not in values:
                    continue
                epoch, value = _epoch(epoch_key), _float(values[name])
                if epoch is None or value is None:
                    skipped.append(
                        f"{'attempt %d, ' % attempt['attempt'] if multi else ''}epoch {epoch_key}, "
                        f"worker {row['index']}: {name}={values[name]}"
                    )
                    continue
                points.append((epoch, value))
            series_points.append((row, attempt["attempt"], sorted(points)))
    all_points = [p for entry in series_points for p in entry[2]]
    if not all_points:
        return {"metric": name, "empty": True, "skipped": skipped, "width": CHART_W, "height": CHART_H}
    epochs = [point[0] for point in all_points]
    values = [point[1] for point in all_points]
    e_low, e_high = min(epochs), max(epochs)
    v_low, v_high = min(values), max(values)
    # Padded a little, within the float type's range.
    pad = (abs(v_low) * 0.05 or 1.0) if v_high == v_low else (v_high / 2 - v_low / 2) * 0.12
    v_low, v_high = _clamp(v_low - pad), _clamp(v_high + pad)
    x = Scale(e_low, e_high, CHART_LEFT, CHART_W - CHART_RIGHT)
    y = Scale(v_low, v_high, CHART_H - CHART_BOTTOM, CHART_TOP)
    y_ticks = nice_ticks(v_low, v_high, 5)
    y_step = y_ticks[1] - y_ticks[0] if len(y_ticks) > 1 else abs(v_high - v_low) or 1.0
    x_ticks = [int(t) for t in nice_ticks(e_low, e_high, 8) if float(t).is_integer()] or [e_low]
    if x_ticks[0] != e_low and x_ticks[0] - e_low >= (e_high - e_low) * 0.06:
        x_ticks.insert(0, e_low)  # the first epoch is always labelled
    final = attempts[-1]["attempt"]
    per_attempt: dict[int, int] = {}
    for _row, number, _points in series_points:
        per_attempt[number] = per_attempt.get(number, 0) + 1
    markers = (e_high - e_low + 1) <= MARKER_MAX_EPOCHS and len(series_points) <= MARKER_MAX_SERIES
    series = []
    # Workers that agree share their coordinates: each is computed once.
    xs: dict[int, float] = {}
    ys: dict[float, float] = {}
    for position, (row, number, points) in enumerate(series_points):
        if not points:
            continue
        count = per_attempt[number]
        order = sum(1 for entry in series_points[:position] if entry[1] == number)
        nested = 1 < count <= NESTED_MAX_WORKERS
        width = round(2.0 + 4.0 * (count - 1 - order), 1) if nested else 1.6
        coords = [(xs.get(e) or xs.setdefault(e, x(e)), ys.get(v) or ys.setdefault(v, y(v))) for e, v in points]
        series.append(
            {
                "worker": row["index"],
                "attempt": number,
                "label": f"worker {row['index']}" + (f", attempt {number}" if multi else ""),
                "color": colors.get(row["index"], "#555"),
                "width": width,
                "opacity": 0.4 if nested and order < count - 1 else 1,
                "dashed": number != final,
                "points": " ".join(f"{cx},{cy}" for cx, cy in coords),
                # Zero-length segments with round caps: one dot per epoch, one element.
                "dots": "".join(f"M{cx} {cy}h0" for cx, cy in coords) if markers or len(coords) == 1 else "",
                "dot_width": round(max(width + 2.5, 5), 1),
            }
        )
    disagreements = []
    notes = []
    for attempt in attempts:
        for item in attempt.get("disagreements") or []:
            if item.get("metric") != name:
                continue
            epoch = _epoch(item.get("epoch"))
            spread = "; ".join(f"{v['value']} on {_who(v['workers'])}" for v in item.get("values") or [])
            prefix = f"attempt {attempt['attempt']}, " if multi else ""
            text = f"{prefix}epoch {item.get('epoch')}: {spread}"
            notes.append(text)
            if epoch is None:
                continue
            for seen in item.get("values") or []:
                number = _float(seen.get("value"))
                if number is not None:
                    disagreements.append({"x": x(epoch), "y": y(number), "title": f"{name} {text}"})
    # Where a restart resumed: between the epoch every worker had backed up and the next.
    resumes = []
    for attempt in attempts:
        epoch = _epoch(attempt.get("resumed_from_epoch"))
        if epoch is not None and e_low <= epoch <= e_high:
            resumes.append({"x": x(epoch), "label": f"attempt {attempt['attempt']} resumed"})
    legend = []
    for item in series:
        if not any(entry["worker"] == item["worker"] for entry in legend):
            legend.append({"worker": item["worker"], "color": item["color"], "label": f"worker {item['worker']}"})
    return {
        "metric": name,
        "empty": False,
        "legend": legend,
        "dashed_attempts": sorted({s["attempt"] for s in series if s["dashed"]}),
        "width": CHART_W,
        "height": CHART_H,
        "plot": {
            "left": CHART_LEFT,
            "right": CHART_W - CHART_RIGHT,
            "top": CHART_TOP,
            "bottom": CHART_H - CHART_BOTTOM,
        },
        "x_ticks": [{"x": x(t), "label": str(t)} for t in x_ticks],
        "y_ticks": [{"y": y(t), "label": fmt_number(t, y_step)} for t in y_ticks],
        "series": series,
        "disagreements": disagreements,
        "notes": notes,
        "skipped": skipped,
        "agree": not notes,
        "workers": len({s["worker"] for s in series}),
        "curves": len(series),
        "resumes": resumes,
    }


def _status(row: dict[str, Any]) -> str:
    if row.get("culprit"):
        return "culprit"
    if row.get("exit_status") is None:
        return "unknown"
    if row.get("exit_status") == 0:
        return "ok"
    return "stopped" if row.get("stopped") else "failed"


def shown_cause(value: Any) -> dict[str, Any] | None:
    """A worker's cause as the page shows it (summary.json's mapping ``{"kind", "detail",
    ...}``; None where the record has none, as in summaries written before causes). ``css``
    is the kind only when it is one of the contract's (tf_causes.CAUSES)."""
    if isinstance(value, str) and value:
        value = {"kind": value}
    if not isinstance(value, dict) or not value.get("kind"):
        return None
    kind = str(value["kind"])
    return {"kind": kind, "detail": str(value.get("detail") or ""), "css": kind if kind in CAUSES else "other"}


def epoch_ranges(epochs: list[int]) -> str:
    """``[1, 2, 3, 5]`` as ``1-3, 5``."""
    spans: list[list[int]] = []
    for epoch in sorted(set(epochs)):
        if spans and epoch == spans[-1][1] + 1:
            spans[-1][1] = epoch
        else:
            spans.append([epoch, epoch])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def epoch_sources(value: Any) -> dict[int, list[int]]:
    """summary.json's ``epoch_sources`` (``{"<epoch>": attempt}``: the attempt each judged
    epoch was taken from) as attempt -> its epochs; empty where the summary has none."""
    by_attempt: dict[int, list[int]] = {}
    for epoch_key, attempt in (value.items() if isinstance(value, dict) else []):
        epoch = _epoch(epoch_key)
        if epoch is not None and isinstance(attempt, int) and not isinstance(attempt, bool):
            by_attempt.setdefault(attempt, []).append(epoch)
    return {attempt: sorted(epochs) for attempt, epochs in sorted(by_attempt.items())}


def timeline(
    attempt: dict[str, Any],
    following: dict[str, Any] | None,
    colors: dict[int, str],
    log_tails: dict[str, list[str]] | None = None,
) -> dict[str, Any]:
    """One attempt: a row per worker from launch to exit, its join, its epochs, its cause,
    the culprit (with the last lines of its log, from ``log_tails``: log path -> lines),
    and where the next attempt resumed."""
    rows_in = sorted(attempt.get("workers") or [], key=lambda r: r["index"])
    count = max(len(rows_in), 1)
    row_h = 24 if count <= 8 else max(12, min(24, 384 // count))
    resumed_next = bool(following and following.get("resumed_from_epoch") is not None)
    top = TIMELINE_TOP if resumed_next else 8  # room for the resume point's label
    height = top + row_h * count + TIMELINE_BOTTOM

    def epoch_times(row: dict[str, Any]) -> dict[str, float]:
        return {k: t for k, t in ((str(k), _stamp(v)) for k, v in _mapping(row.get("epoch_at")).items()) if t is not None}

    stamps = [
        t
        for r in rows_in
        for t in (_stamp(r.get("launched_at")), _stamp(r.get("joined_at")), _stamp(r.get("finished_at")),
                  *epoch_times(r).values())
        if t is not None
    ]
    started = _stamp(attempt.get("started_at"))
    t0 = started if started is not None else min(stamps, default=0.0)
    t_end = max(stamps, default=t0)
    span = min(max(t_end / 2 - t0 / 2, 0.5) * 2, FLOAT_MAX)  # t_end - t0, at least 1 s, never inf
    x = Scale(0, span, TIMELINE_LABEL_W, TIMELINE_W - TIMELINE_RIGHT)

    def since(stamp: Any) -> float | None:
        value = _stamp(stamp)
        return None if value is None else _clamp(value - t0)

    def at(stamp: Any) -> float | None:
        seconds = since(stamp)
        return None if seconds is None else x(seconds)

    rows = []
    for position, row in enumerate(rows_in):
        row_top = top + position * row_h
        mid = round(row_top + row_h / 2, 1)
        half = round(row_h * 0.32, 1)
        start = at(row.get("launched_at"))
        end = at(row.get("finished_at"))
        open_end = end is None
        if start is not None and end is None:
            end = x(span)
        times = epoch_times(row)
        ticks = sorted(x(_clamp(t - t0)) for t in times.values())
        status = _status(row)
        cause = shown_cause(row.get("cause"))
        joined = since(row.get("joined_at"))
        tail = [str(line) for line in (log_tails or {}).get(str(row.get("log")), [])] if row.get("culprit") else []
        durations = [d for _e, d in epoch_durations(times, row.get("joined_at"))]
        rows.append(
            {
                "index": row["index"],
                "host": row.get("host"),
                "label": f"worker {row['index']} · {row.get('host')}",
                "y": row_top,
                "h": row_h,
                "mid": mid,
                "text_y": round(mid + min(11, row_h - 6) * 0.35, 1),
                "font": min(12, row_h - 4),
                "color": colors.get(row["index"], "#555"),
                "bar": {"x": start, "width": round(end - start, 1), "y": round(mid - half, 1), "height": round(2 * half, 1)}
                if start is not None and end is not None
                else None,
                "open_end": open_end,
                "join": None if joined is None else x(joined),
                "epochs": "".join(f"M{t} {round(mid - half, 1)}V{round(mid + half, 1)}" for t in ticks),
                "epoch_count": len(times) or len(_mapping(row.get("metrics"))),
                # Its time per epoch: the mean (without the first, which holds the
                # start-up, once there is a second) and the last one.
                "per_epoch": fmt_seconds(mean_epoch(durations)) if durations else "-",
                "last_epoch": fmt_seconds(durations[-1]) if durations else "-",
                "exit": end if not open_end else None,
                "status": status,
                "culprit": bool(row.get("culprit")),
                # The culprit's mark is named beside its exit when there is room.
                "culprit_text": end + 10 if row.get("culprit") and end is not None and end < x(span) - 150 else None,
                "title": (
                    f"worker {row['index']} on {row.get('host')}: exit status {row.get('exit_status')}"
                    f" ({row.get('exit_reason')})" + (f", {cause['kind']}" if cause else "")
                    + (" - the culprit" if row.get("culprit") else "")
                ),
                # The table below the chart.
                "launched": fmt_seconds(since(row.get("launched_at"))),
                # A job that prints no contract line (Keras) has no join time, but its
                # exit record says whether it joined.
                "joined": fmt_seconds(joined) if joined is not None else ("yes" if row.get("joined") is True else "-"),
                "finished": fmt_seconds(since(row.get("finished_at"))),
                "exit_status": row.get("exit_status"),
                "exit_reason": row.get("exit_reason") or ("no exit record (still running or lost)" if row.get("exit_status") is None else ""),
                "cause": cause,
                "signal": row.get("signal"),
                "resumed_from_epoch": row.get("resumed_from_epoch"),
                "log": row.get("log"),
                "log_href": quote(str(row.get("log") or "")),
                "has_log": row.get("has_log", True),
                # Its log's last lines, one per line, as the log has them.
                "log_tail": "\n".join(tail),
                "log_tail_lines": len(tail),
            }
        )
    axis = []
    for tick in nice_ticks(0, span, 8):
        axis.append({"x": x(tick), "label": fmt_seconds(tick) if tick else "0"})
    resume = None
    if following and following.get("resumed_from_epoch") is not None:
        epoch = str(following["resumed_from_epoch"])
        seen = [t for t in (epoch_times(r).get(epoch) for r in rows_in) if t is not None]
        resume = {
            "epoch": following["resumed_from_epoch"],
            "attempt": following["attempt"],
            "x": x(_clamp(max(seen) - t0)) if seen else None,
        }
    culprit = next((r for r in rows if r["culprit"]), None)
    failed = any(r["status"] in ("culprit", "failed", "unknown") for r in rows)
    # Each epoch's time, as the lowest-index worker that timed its epochs saw it (in a
    # synchronous run every worker ends an epoch within moments of the others).
    timer = next((r for r in rows_in if epoch_times(r)), None)
    durations = epoch_durations(epoch_times(timer), timer.get("joined_at")) if timer else []
    shown = durations if len(durations) <= MAX_EPOCH_TIMES else durations[: MAX_EPOCH_TIMES // 2] + durations[-MAX_EPOCH_TIMES // 2:]
    return {
        "attempt": attempt["attempt"],
        "ok": bool(rows) and all(r["status"] == "ok" for r in rows),
        "failed": failed or any(r["status"] == "stopped" for r in rows),
        "started": fmt_time(t0 if stamps else None),
        "duration": fmt_seconds(t_end - t0) if stamps else "-",
        "width": TIMELINE_W,
        "height": height,
        "plot": {"left": TIMELINE_LABEL_W, "right": TIMELINE_W - TIMELINE_RIGHT, "top": top,
                 "bottom": top + row_h * count},
        "axis": axis,
        "rows": rows,
        "culprit": culprit,
        "resumed_from_epoch": attempt.get("resumed_from_epoch"),
        "resume_next": resume,
        "disagreements": len(attempt.get("disagreements") or []),
        "has_causes": any(r["cause"] for r in rows),
        "epoch_times": {
            "worker": timer["index"] if timer else None,
            "epochs": [{"epoch": e, "seconds": fmt_seconds(d)} for e, d in shown],
            "left_out": len(durations) - len(shown),
            "mean": fmt_seconds(mean_epoch([d for _e, d in durations])) if durations else "-",
            "last": fmt_seconds(durations[-1][1]) if durations else "-",
        },
        "epochs_taken": "",
        # What the runbook decided after it (attempt-<n>.json): a restart, a spare in a lost
        # host's place, a smaller cluster, a give-up; and why, as the output said it.
        "decision": attempt.get("decision"),
        "why": attempt.get("why"),
        # Ended by an operator's stop (stop.yml), which is not a failure.
        "stopped": any((r["cause"] or {}).get("kind") == "operator" for r in rows),
    }


def _mapping(value: Any) -> dict[Any, Any]:
    return value if isinstance(value, dict) else {}


def stall_view(summary: dict[str, Any]) -> dict[str, Any] | None:
    """summary.json's ``stall`` (``{"culprits": [indices], "detail": text}``), or None."""
    stall = summary.get("stall")
    if not isinstance(stall, dict):
        return None
    culprits = [c for c in stall.get("culprits") or [] if isinstance(c, int) and not isinstance(c, bool)]
    return {
        "detail": str(stall.get("detail") or ""),
        "culprits": culprits,
        "who": _who(culprits) if culprits else "every worker stalled",
    }


def stacks_view(workers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each worker's captured stack (summary.json's per-worker ``stacks``): where it was
    and the innermost frames of the job's own code, innermost last."""
    shown = []
    for worker in workers:
        stacks = _mapping(worker.get("stacks"))
        if not stacks:
            continue
        frames = [str(f) for f in stacks.get("frames") or [] if f is not None][-MAX_FRAMES:]
        shown.append(
            {
                "index": worker.get("index"),
                "host": worker.get("host"),
                "where": str(stacks.get("where") or "unknown"),
                "frames": frames,
                "innermost": frames[-1] if frames else None,
                "file": stacks.get("file"),
            }
        )
    return shown


def total_time(attempts: list[dict[str, Any]]) -> str:
    """The run's time from its first launch to its last exit (or last timed line), over
    every attempt and whatever lay between them (the restarts' copies, a resume later)."""
    starts, ends = [], []
    for attempt in attempts:
        for row in attempt.get("workers") or []:
            starts.extend(t for t in (_stamp(row.get("launched_at")),) if t is not None)
            ends.extend(t for t in (_stamp(row.get("finished_at")), _stamp(row.get("completed_at")),
                                    *(_stamp(v) for v in _mapping(row.get("epoch_at")).values())) if t is not None)
    return fmt_seconds(max(ends) - min(starts)) if starts and ends and max(ends) >= min(starts) else "-"


def next_steps(summary: dict[str, Any], timelines: list[dict[str, Any]], resume: dict[str, Any] | None) -> dict[str, Any] | None:
    """What to do after a failed run: the command that resumes it (``resume``: the
    ``playbook`` and the ``inventory`` sources of the playbook run that judged it; placeholders
    where not given) and the log of the last attempt's culprit. None unless the run failed."""
    if summary.get("status") != "failed":
        return None
    given = resume if isinstance(resume, dict) else {}
    inventory = [str(i) for i in given.get("inventory") or [] if i]
    words = ["ansible-playbook", str(given.get("playbook") or "train.yml")]
    words += [w for source in inventory for w in ("-i", source)] if inventory else ["-i", "<inventory>"]
    words += ["-e", f"tf_run_id={summary['run_id']}", "-e", "tf_resume=true"]
    command = " ".join(shlex.quote(w) if not w.startswith("<") else w for w in words)
    culprit = next((t["culprit"] for t in reversed(timelines) if t.get("culprit")), None)
    return {
        "resume": command,
        "culprit": {"index": culprit["index"], "host": culprit["host"], "log": culprit["log"],
                    "log_href": culprit["log_href"], "has_log": culprit["has_log"]} if culprit else None,
    }  # fmt: skip


def artifacts_view(artifacts: Any) -> dict[str, Any]:
    """The collected artifacts (paths under the run's directory, as the report action
    found them) as links; at most ``MAX_ARTIFACTS``, and how many more there were."""
    paths = sorted({str(p) for p in artifacts or [] if isinstance(p, str) and p})
    return {
        "files": [{"path": p, "href": quote(p)} for p in paths[:MAX_ARTIFACTS]],
        "more": max(0, len(paths) - MAX_ARTIFACTS),
    }


def _devices(devices: dict[str, Any], index: Any) -> str:
    if not isinstance(devices, dict) or str(index) not in devices:
        return "not recorded"
    value = devices[str(index)]
    if value is None:
        return "not set (every device of the host)"
    return f"GPU {value}" if str(value) else "none (GPUs hidden)"


def evaluator_view(summary: dict[str, Any]) -> dict[str, Any] | None:
    """The sidecar evaluator's section: how it ended (its log linked) and its metrics,
    one row per evaluated checkpoint; apart from the training's. None without one."""
    entry = summary.get("evaluator")
    if not isinstance(entry, dict) or not isinstance(entry.get("evaluations"), list):
        return None
    evaluations = [e for e in entry["evaluations"] if isinstance(e, dict) and isinstance(e.get("metrics"), dict)]
    names = sorted({name for e in evaluations for name in e["metrics"]})
    log = entry.get("log_in_run")
    return {
        "line": evaluator_line(entry),
        "state": "fail" if entry.get("status") in (FAILED, UNKNOWN, LOST) else "ok",
        "status": entry.get("status"),
        "log": log,
        "log_href": quote(str(log or "")),
        "names": names,
        "rows": [{"epoch": e.get("epoch"), "cells": [e["metrics"].get(n, "") for n in names]} for e in evaluations],
    }


def tf_report_view(
    summary: dict[str, Any],
    log_tails: dict[str, list[str]] | None = None,
    artifacts: list[str] | None = None,
    resume: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Everything the report template prints, from the verdict's summary; ``log_tails``
    maps a culprit's log (its path under the run, as the timeline names it) to its last
    lines; ``artifacts``: the collected artifacts' paths under the run; ``resume``: the
    ``playbook`` and ``inventory`` a resume command names. Fields that summaries written
    before them lack (causes, stall, stacks, epoch sources) are simply not shown."""
    if not isinstance(summary, dict) or "run_id" not in summary:
        raise AnsibleFilterError(f"tf_report_view: expected the verdict's summary (a dict with run_id), got {type(summary).__name__}")
    attempts = [a for a in summary.get("timeline") or [] if isinstance(a, dict)]
    values = sum(
        len(m) for a in attempts for row in a.get("workers") or [] for m in _mapping(row.get("metrics")).values()
        if isinstance(m, dict)
    )
    if values > MAX_VALUES:
        raise AnsibleFilterError(
            f"tf_report_view: {values} metric values are more than the report draws ({MAX_VALUES}); "
            "summary.json holds them all"
        )
    indices = sorted({r["index"] for a in attempts for r in a.get("workers") or []} | {w["index"] for w in summary.get("workers") or []})
    colors = dict(zip(indices, palette(len(indices))))
    charts = [chart(name, attempts, colors) for name in metric_names(attempts)]
    timelines = [
        timeline(a, attempts[i + 1] if i + 1 < len(attempts) else None, colors, log_tails)
        for i, a in enumerate(attempts)
    ]
    sources = epoch_sources(summary.get("epoch_sources"))
    # Each worker's task (chief:0, worker:1, ps:0) where the inventory gave task types.
    tasks = {w.get("index"): str(w["task"]) for w in summary.get("workers") or [] if isinstance(w, dict) and w.get("task")}
    for view in timelines:
        view["epochs_taken"] = epoch_ranges(sources.get(view["attempt"], []))
        for row in view.get("rows") or []:
            row["task"] = tasks.get(row.get("index"))
    # Worker index to its CUDA_VISIBLE_DEVICES, as the preflight planned it (None: not set).
    devices = (summary.get("context") or {}).get("devices") or {}
    cluster = [
        {
            "index": w.get("index"),
            "host": w.get("host"),
            "endpoint": w.get("endpoint"),
            "port": w.get("port"),
            "devices": _devices(devices, w.get("index")),
            "chief": w.get("index") == 0,
            "task": tasks.get(w.get("index")),
            "color": colors.get(w.get("index"), "#555"),
        }
        for w in summary.get("workers") or []
    ]
    checks = summary.get("checks") or []
    return {
        "run": {
            "id": summary["run_id"],
            "status": summary.get("status", "unknown"),
            "reason": summary.get("reason"),
            "written_at": summary.get("written_at"),
            "attempt": summary.get("attempt", 0),
            "attempts": len(attempts),
            "size": (summary.get("cluster") or {}).get("size"),
            "epochs": len(summary.get("metrics") or {}),
            "duration": total_time(attempts),
        },
        "next_steps": next_steps(summary, timelines, resume),
        "artifacts": artifacts_view(artifacts),
        # ok: true, false, or null for a check the job's output did not allow.
        "checks": [
            {
                "name": c.get("name"),
                "ok": c.get("ok"),
                "state": "ok" if c.get("ok") is True else ("unchecked" if c.get("ok") is None else "fail"),
                "detail": c.get("detail"),
            }
            for c in checks
        ],
        "failed_checks": sum(1 for c in checks if c.get("ok") is False),
        "unchecked": sum(1 for c in checks if c.get("ok") is None),
        "cluster": cluster,
        "has_devices": bool(devices),
        "has_tasks": bool(tasks),
        "charts": charts,
        "timelines": timelines,
        "stall": stall_view(summary),
        "evaluator": evaluator_view(summary),
        "stacks": stacks_view([w for w in summary.get("workers") or [] if isinstance(w, dict)]),
        # Which attempt each judged epoch came from, when the run took epochs from more
        # than one (or from another than its only one).
        "epoch_sources": [{"attempt": a, "epochs": epoch_ranges(e)} for a, e in sources.items()]
        if len(sources) > 1 or (sources and len(attempts) > 1)
        else [],
    }
