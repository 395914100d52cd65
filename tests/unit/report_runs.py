"""Crafted collected runs for the report tests: directories as tf_collect leaves them.

``write_worker`` lays out one worker of one attempt (log, exit.json with the supervisor's
timed contract lines and any ``exit_extra`` fields such as ``cause`` and ``stacks``,
tf_config.json, the chief's marker; ``total`` adds ``epochs=N`` to the header); ``build`` runs the verdict over
the run directory and returns its summary with the report's timeline; ``render`` renders
the report as the role's tf_report action does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tf_report_action import render_report
from tf_verdict import add_timeline, summarize

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "templates" / "report.html.j2"
MARKER = "multiworker-complete.txt"
T0 = 1_764_000_000.0


def metrics_of(epoch: int) -> dict[str, str]:
    return {"loss": f"{0.7 / (1 + 0.3 * epoch):.6f}", "binary_accuracy": f"{min(0.5 + 0.02 * epoch, 0.99):.4f}"}


def write_worker(
    run: Path,
    host: str,
    index: int,
    cluster: list[str],
    *,
    attempt: int = 0,
    epochs: range | list[int] = range(1, 4),
    start: float = T0,
    join_after: float = 2.0,
    epoch_seconds: float = 1.5,
    metrics: dict[int, dict[str, str]] | None = None,
    resumed_from: int | None = None,
    complete: bool = True,
    exit_status: int = 0,
    reason: str = "exited",
    stopped_by: str | None = None,
    signal: str | None = None,
    finished_at: float | None = None,
    total: int | None = None,
    exit_extra: dict[str, Any] | None = None,
) -> Path:
    """One worker directory of a collected run; returns it."""
    wdir = run / host / (f"retry-{attempt}" if attempt else "") / f"worker-{index}"
    wdir.mkdir(parents=True)
    (wdir / "tf_config.json").write_text(
        json.dumps({"cluster": {"worker": cluster}, "task": {"type": "worker", "index": index}})
    )
    size = len(cluster)
    timed: list[list[Any]] = []
    lines = ["2026-01-01 I tensorflow noise before the contract"]
    now = start + join_after
    header = f"worker={index} cluster_workers={size} replicas={size} global_batch={16 * size}"
    if total is not None:
        header += f" epochs={total}"
    lines.append(header)
    timed.append([now, header])
    if resumed_from is not None:
        line = f"worker={index} resumed_from_epoch={resumed_from}"
        lines.append(line)
        timed.append([now, line])
    for epoch in epochs:
        now += epoch_seconds
        values = (metrics or {}).get(epoch) or metrics_of(epoch)
        line = f"worker={index} epoch={epoch} " + " ".join(f"{k}={v}" for k, v in values.items())
        lines += [f"Epoch {epoch}/{len(epochs)}", line, f"worker={index} checkpoint_saved={epoch}"]
        timed += [[now, line], [now + 0.1, f"worker={index} checkpoint_saved={epoch}"]]
    if complete:
        lines.append(f"worker={index} training_complete")
        timed.append([now + 0.2, f"worker={index} training_complete"])
        if index == 0:
            (wdir / MARKER).write_text("done\n")
    (wdir / "worker.log").write_text("\n".join(lines) + "\n")
    (wdir / "exit.json").write_text(
        json.dumps(
            {
                "returncode": exit_status,
                "signal": signal,
                "reason": reason,
                "stopped_by": stopped_by,
                "started_at": start,
                "finished_at": finished_at if finished_at is not None else now + 0.5,
                "joined": True,
                "timed_lines": timed,
                **(exit_extra or {}),
            }
        )
    )
    return wdir


def endpoints(count: int, hosts: int = 1) -> tuple[list[str], list[str]]:
    """Hosts and endpoints of ``count`` workers spread over ``hosts`` hosts."""
    names = [f"node{i % hosts}" for i in range(count)]
    return names, [f"10.0.0.{1 + i % hosts}:{2222 + i // hosts}" for i in range(count)]


def build(run: Path, size: int, context: dict[str, Any] | None = None) -> dict[str, Any]:
    summary = summarize(run.name, str(run), MARKER, size, context or {})
    return add_timeline(summary, str(run), MARKER)


def render(summary: dict[str, Any]) -> str:
    """The page exactly as the role's tf_report action renders it."""
    return render_report(json.loads(json.dumps(summary)), TEMPLATE.read_text(encoding="utf-8"))
