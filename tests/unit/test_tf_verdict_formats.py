"""The output formats a log is read in, one parser each in tf_metrics' registry (issue 25,
point 1): a new format is one parser, and the verdict, the timeline, the progress pattern
and the supervisor's timed lines follow it. Issue 24, point 16: a key repeated in one
epoch line is a malformed line."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterator

import pytest
from ansible_collections.tf_runbook.multiworker.plugins.module_utils import tf_metrics
from report_runs import build, endpoints, write_worker

STEP = re.compile(r"^step=(?P<step>\d+)\s+(?P<rest>.*)$")


def parse_steps(lines: list[str]) -> dict[str, Any]:
    """A toy format: ``step=N loss=X ...`` lines, one per epoch N, out of N total."""
    series = tf_metrics.empty_series()
    for line in lines:
        match = STEP.match(line)
        if match:
            pairs, _repeated = tf_metrics.pairs_of(match.group("rest"))
            tf_metrics.add_epoch(series, int(match.group("step")), pairs)
    return series


TOY = tf_metrics.Format(name="steps", label="step lines", parse=parse_steps, progress=r"^step=\d", timed=r"^step=\d")


@pytest.fixture
def toy() -> Iterator[tf_metrics.Format]:
    tf_metrics.register(TOY)
    yield TOY
    tf_metrics.unregister(TOY.name)


def toy_worker(run: Path, index: int, losses: list[str]) -> None:
    hosts, cluster = endpoints(2, hosts=2)
    wdir = run / hosts[index] / f"worker-{index}"
    wdir.mkdir(parents=True)
    (wdir / "tf_config.json").write_text(json.dumps({"cluster": {"worker": cluster}, "task": {"type": "worker", "index": index}}))
    lines = [f"step={n} loss={loss}" for n, loss in enumerate(losses, start=1)]
    (wdir / "worker.log").write_text("noise\n" + "\n".join(lines) + "\n")
    timed = [[100.0 + n, line] for n, line in enumerate(lines, start=1)]
    (wdir / "exit.json").write_text(json.dumps({"returncode": 0, "reason": "exited", "stopped_by": None,
                                                "started_at": 100.0, "finished_at": 110.0, "timed_lines": timed}))  # fmt: skip


def test_a_registered_toy_format_is_judged_and_drawn(tmp_path: Path, toy: tf_metrics.Format) -> None:
    run = tmp_path / "toy"
    toy_worker(run, 0, ["0.5", "0.4"])
    toy_worker(run, 1, ["0.5", "0.41"])
    summary = build(run, 2)
    assert summary["job_output"] == {"contract_lines": False, "metrics_from": "steps"}
    agree = next(c for c in summary["checks"] if c["name"] == "metrics_agree")
    assert agree["ok"] is False and agree["detail"] == "epoch 2 loss: 0.4 from worker(s) [0], 0.41 from worker(s) [1]"
    assert summary["metrics"] == {"1": {"loss": "0.5"}, "2": {}}
    rows = summary["timeline"][0]["workers"]
    assert [row["metrics"] for row in rows] == [{"1": {"loss": "0.5"}, "2": {"loss": "0.4"}},
                                                {"1": {"loss": "0.5"}, "2": {"loss": "0.41"}}]  # fmt: skip
    # The timeline's epoch marks come from the supervisor's timed lines, read by the format.
    assert rows[0]["epoch_at"] == {"1": 101.0, "2": 102.0}
    assert summary["timeline"][0]["disagreements"] == [
        {"epoch": "2", "metric": "loss", "values": [{"value": "0.4", "workers": [0]}, {"value": "0.41", "workers": [1]}]}
    ]
    # The wait's progress and the supervisor's clock know the format too.
    assert re.search(tf_metrics.progress_pattern(), "step=3 loss=0.2")
    assert tf_metrics.is_timed("step=3 loss=0.2")


def test_without_the_toy_format_its_lines_are_not_read(tmp_path: Path) -> None:
    run = tmp_path / "plain"
    toy_worker(run, 0, ["0.5"])
    toy_worker(run, 1, ["0.5"])
    summary = build(run, 2)
    assert summary["job_output"]["metrics_from"] is None
    assert not re.search(tf_metrics.progress_pattern(), "step=3 loss=0.2") and not tf_metrics.is_timed("step=3 loss=0.2")


@pytest.mark.parametrize(
    ("line", "progress", "timed"),
    [
        ("worker=0 epoch=2/5 loss=0.1", True, True),
        ("worker=0 cluster_workers=2 replicas=2", False, True),
        ("  worker=1 training_complete", False, True),
        ("Epoch 31/400", True, True),
        ("5/5 - 0s - loss: 0.6689 - accuracy: 0.5688 - 116ms/epoch - 23ms/step", False, True),
        ("Traceback (most recent call last):", False, False),
        ("2025-01-14 10:02:11.482713: I tensorflow/core/util/port.cc:153] oneDNN custom operations are on.", False, False),
    ],
)
def test_progress_and_timed_lines_of_the_built_in_formats(line: str, progress: bool, timed: bool) -> None:
    assert bool(re.search(tf_metrics.progress_pattern(), line.strip())) is progress
    assert tf_metrics.is_timed(line) is timed


def test_the_progress_pattern_keeps_its_value_and_takes_the_users_pattern() -> None:
    assert tf_metrics.progress_pattern() == r"(?:(?:^|\s)epoch=\d)|(?:^Epoch \d+/\d+)"
    assert re.search(tf_metrics.progress_pattern(r"^iter \d+"), "iter 7 done")
    assert not re.search(tf_metrics.progress_pattern(), "iter 7 done")


def test_a_key_repeated_in_one_epoch_line_is_a_malformed_line(tmp_path: Path) -> None:
    """Issue 24, point 16 (reproduced on the old verdict: SUCCEEDED, worker 0's last value
    agreeing with worker 1)."""
    run = tmp_path / "repeated"
    hosts, cluster = endpoints(2, hosts=2)
    write_worker(run, hosts[0], 0, cluster, epochs=[1], metrics={1: {"loss": "9.9 loss=0.1"}})
    write_worker(run, hosts[1], 1, cluster, epochs=[1], metrics={1: {"loss": "0.1"}})
    summary = build(run, 2)
    assert summary["status"] == "failed"
    failing = {c["name"]: c["detail"] for c in summary["checks"] if c["ok"] is False}
    assert list(failing) == ["metrics_agree", "epochs_once"]
    assert "worker 0 (node0): line 4: epoch 1: key loss repeated in one line" in failing["epochs_once"]
    assert "epoch 1 loss: 0.1 from worker(s) [1], 9.9 from worker(s) [0]" in failing["metrics_agree"]


def test_a_keras_jobs_join_and_epochs_are_timed(tmp_path: Path) -> None:
    """Issue 25: for a Keras job the report showed no join time and no epoch marks."""
    run = tmp_path / "keras"
    hosts, cluster = endpoints(2, hosts=2)
    for index in range(2):
        wdir = run / hosts[index] / f"worker-{index}"
        wdir.mkdir(parents=True)
        (wdir / "tf_config.json").write_text(json.dumps({"cluster": {"worker": cluster}, "task": {"index": index}}))
        lines = ["noise", "Epoch 1/2", "5/5 - 0s - loss: 0.7 - 116ms/epoch", "Epoch 2/2", "5/5 - 0s - loss: 0.6 - 9ms/epoch"]
        (wdir / "worker.log").write_text("\n".join(lines) + "\n")
        timed = [[10.0 + n, line] for n, line in enumerate(lines) if tf_metrics.is_timed(line)]
        (wdir / "exit.json").write_text(json.dumps({"returncode": 0, "reason": "exited", "stopped_by": None,
                                                    "started_at": 9.0, "finished_at": 20.0, "timed_lines": timed}))  # fmt: skip
    summary = build(run, 2)
    assert summary["status"] == "succeeded"
    row = summary["timeline"][0]["workers"][0]
    assert (row["joined_at"], row["epoch_at"]) == (11.0, {"1": 12.0, "2": 14.0})
    assert row["metrics"] == {"1": {"loss": "0.7"}, "2": {"loss": "0.6"}}


def test_a_registered_format_is_seen_by_the_wait_and_the_stall_watchdog(toy: tf_metrics.Format) -> None:
    """Issue 40, point 5: the wait's progress pattern comes from the registry."""
    from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_worker_records import progress_regex

    assert progress_regex("").search("step=3 loss=0.2")
    assert progress_regex("").search("worker=0 epoch=2 loss=0.5") and progress_regex("^iter ").search("iter 3")
