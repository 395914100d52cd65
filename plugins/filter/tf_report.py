"""The run report's view: chart and timeline geometry computed from the verdict's summary."""

from __future__ import annotations

import math
import time
from typing import Any
from urllib.parse import quote

from ansible.errors import AnsibleFilterError


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


def palette(count: int) -> list[str]:
    """``count`` distinct colours (the golden angle around the hue circle)."""
    return [f"hsl({(index * 137.508) % 360:.0f},70%,{42 if index % 2 == 0 else 34}%)" for index in range(count)]


def nice_ticks(low: float, high: float, target: int = 5) -> list[float]:
    """Round tick values covering ``low..high``: steps of 1, 2 or 5 times a power of ten."""
    if not (math.isfinite(low) and math.isfinite(high)):
        raise AnsibleFilterError(f"tf_report_view: cannot scale an axis from {low} to {high}")
    if high <= low:
        return [low]
    raw = (high - low) / max(target, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw * (1 - 1e-9))
    first = math.ceil(low / step - 1e-9) * step
    ticks = []
    value = first
    while value <= high + step * 1e-9:
        ticks.append(round(value, 12))
        value += step
    return ticks


def fmt_number(value: float, step: float) -> str:
    """A tick label with as many decimals as the step needs."""
    if value == 0:
        return "0"
    if abs(value) >= 1e6 or abs(value) < 1e-4:
        return f"{value:.3g}"
    decimals = max(0, -math.floor(math.log10(step))) if step > 0 else 4
    return f"{value:.{min(decimals, 6)}f}"


def fmt_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if abs(seconds) < 100:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}:{rest:02d} min"


def fmt_time(stamp: float | None) -> str:
    if stamp is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(stamp))


def _float(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _epoch(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _who(indices: list[int]) -> str:
    return ("worker " if len(indices) == 1 else "workers ") + ", ".join(str(i) for i in indices)


class Scale:
    """Linear map of ``low..high`` onto pixels ``start..end``."""

    def __init__(self, low: float, high: float, start: float, end: float) -> None:
        self.low, self.high, self.start, self.end = low, high, start, end

    def __call__(self, value: float) -> float:
        if self.high == self.low:
            return round((self.start + self.end) / 2, 1)
        return round(self.start + (value - self.low) / (self.high - self.low) * (self.end - self.start), 1)


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
    if v_high == v_low:
        pad = abs(v_low) * 0.05 or 1.0
        v_low, v_high = v_low - pad, v_high + pad
    else:
        pad = (v_high - v_low) * 0.06
        v_low, v_high = v_low - pad, v_high + pad
    x = Scale(e_low, e_high, CHART_LEFT, CHART_W - CHART_RIGHT)
    y = Scale(v_low, v_high, CHART_H - CHART_BOTTOM, CHART_TOP)
    y_ticks = nice_ticks(v_low, v_high, 5)
    y_step = y_ticks[1] - y_ticks[0] if len(y_ticks) > 1 else abs(v_high - v_low) or 1.0
    x_ticks = [int(t) for t in nice_ticks(e_low, e_high, 8) if float(t).is_integer()] or [e_low]
    if x_ticks[0] - e_low >= (e_high - e_low) * 0.06:
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


def timeline(attempt: dict[str, Any], following: dict[str, Any] | None, colors: dict[int, str]) -> dict[str, Any]:
    """One attempt: a row per worker from launch to exit, its join, its epochs, the culprit,
    and where the next attempt resumed."""
    rows_in = sorted(attempt.get("workers") or [], key=lambda r: r["index"])
    count = max(len(rows_in), 1)
    row_h = 24 if count <= 8 else max(12, min(24, 384 // count))
    resumed_next = bool(following and following.get("resumed_from_epoch") is not None)
    top = TIMELINE_TOP if resumed_next else 8  # room for the resume point's label
    height = top + row_h * count + TIMELINE_BOTTOM
    stamps = [
        t
        for r in rows_in
        for t in (r.get("launched_at"), r.get("joined_at"), r.get("finished_at"), *(r.get("epoch_at") or {}).values())
        if isinstance(t, (int, float))
    ]
    t0 = attempt.get("started_at") if isinstance(attempt.get("started_at"), (int, float)) else min(stamps, default=0)
    t_end = max(stamps, default=t0)
    span = max(t_end - t0, 1.0)
    x = Scale(0, span, TIMELINE_LABEL_W, TIMELINE_W - TIMELINE_RIGHT)
    rows = []
    for position, row in enumerate(rows_in):
        row_top = top + position * row_h
        mid = round(row_top + row_h / 2, 1)
        half = round(row_h * 0.32, 1)

        def at(stamp: Any) -> float | None:
            return x(stamp - t0) if isinstance(stamp, (int, float)) else None

        start = at(row.get("launched_at"))
        end = at(row.get("finished_at"))
        open_end = end is None
        if start is not None and end is None:
            end = x(span)
        ticks = sorted(
            (x_ for x_ in (at(t) for t in (row.get("epoch_at") or {}).values()) if x_ is not None)
        )
        status = _status(row)
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
                "join": at(row.get("joined_at")),
                "epochs": "".join(f"M{t} {round(mid - half, 1)}V{round(mid + half, 1)}" for t in ticks),
                "epoch_count": len(row.get("epoch_at") or {}) or len(row.get("metrics") or {}),
                "exit": end if not open_end else None,
                "status": status,
                "culprit": bool(row.get("culprit")),
                # The culprit's mark is named beside its exit when there is room.
                "culprit_text": end + 10 if row.get("culprit") and end is not None and end < x(span) - 150 else None,
                "title": (
                    f"worker {row['index']} on {row.get('host')}: exit status {row.get('exit_status')}"
                    f" ({row.get('exit_reason')})" + (" - the culprit" if row.get("culprit") else "")
                ),
                # The table below the chart.
                "launched": fmt_seconds(row["launched_at"] - t0) if isinstance(row.get("launched_at"), (int, float)) else "-",
                "joined": fmt_seconds(row["joined_at"] - t0) if isinstance(row.get("joined_at"), (int, float)) else "-",
                "finished": fmt_seconds(row["finished_at"] - t0) if isinstance(row.get("finished_at"), (int, float)) else "-",
                "exit_status": row.get("exit_status"),
                "exit_reason": row.get("exit_reason") or ("no exit record (still running or lost)" if row.get("exit_status") is None else ""),
                "signal": row.get("signal"),
                "resumed_from_epoch": row.get("resumed_from_epoch"),
                "log": row.get("log"),
                "log_href": quote(str(row.get("log") or "")),
                "has_log": row.get("has_log", True),
            }
        )
    axis = []
    for tick in nice_ticks(0, span, 8):
        axis.append({"x": x(tick), "label": fmt_seconds(tick) if tick else "0"})
    resume = None
    if following and following.get("resumed_from_epoch") is not None:
        epoch = str(following["resumed_from_epoch"])
        seen = [r["epoch_at"][epoch] for r in rows_in if epoch in (r.get("epoch_at") or {})]
        resume = {
            "epoch": following["resumed_from_epoch"],
            "attempt": following["attempt"],
            "x": x(max(seen) - t0) if seen else None,
        }
    culprit = next((r for r in rows if r["culprit"]), None)
    failed = any(r["status"] in ("culprit", "failed", "unknown") for r in rows)
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
    }


def _devices(devices: dict[str, Any], index: Any) -> str:
    if not isinstance(devices, dict) or str(index) not in devices:
        return "not recorded"
    value = devices[str(index)]
    if value is None:
        return "not set (every device of the host)"
    return f"GPU {value}" if str(value) else "none (GPUs hidden)"


def tf_report_view(summary: dict[str, Any]) -> dict[str, Any]:
    """Everything the report template prints, from the verdict's summary."""
    if not isinstance(summary, dict) or "run_id" not in summary:
        raise AnsibleFilterError(f"tf_report_view: expected the verdict's summary (a dict with run_id), got {type(summary).__name__}")
    attempts = [a for a in summary.get("timeline") or [] if isinstance(a, dict)]
    indices = sorted({r["index"] for a in attempts for r in a.get("workers") or []} | {w["index"] for w in summary.get("workers") or []})
    colors = dict(zip(indices, palette(len(indices))))
    charts = [chart(name, attempts, colors) for name in metric_names(attempts)]
    timelines = [timeline(a, attempts[i + 1] if i + 1 < len(attempts) else None, colors) for i, a in enumerate(attempts)]
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
        },
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
        "charts": charts,
        "timelines": timelines,
    }


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"tf_report_view": tf_report_view}
