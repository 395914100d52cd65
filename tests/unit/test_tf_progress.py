"""Progress a person can plan with (issue 39): a worker's timed lines as its progress
record (tf_metrics.progress_of), for every output format, and the record as the epoch N of
M, its metrics, the time per epoch, the elapsed time, the time left and the finishing time
(tf_progress), as the wait, status.yml and the report show them."""

from __future__ import annotations

import time
from typing import Any

import pytest

from ansible_collections.tf_runbook.multiworker.plugins.module_utils import tf_metrics
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_progress import (
    clock_text,
    duration_text,
    epoch_durations,
    grouped,
    mean_epoch,
    worker_progress,
)

# One worker of the contract: joined at 100, epochs ended at 110, 114, 118 (of 6).
CONTRACT_TIMED = [
    (100.0, "worker=0 cluster_workers=2 replicas=2 global_batch=32 epochs=6"),
    (110.0, "worker=0 epoch=1/6 loss=0.9 accuracy=0.5"),
    (114.0, "worker=0 epoch=2/6 loss=0.7 accuracy=0.6"),
    (118.0, "worker=0 epoch=3/6 loss=0.5 accuracy=0.7"),
]
# Keras verbose=2: the header starts the epoch, its step line ends it.
KERAS_TIMED = [
    (100.0, "Epoch 1/6"),
    (103.0, "5/5 - 1s - loss: 0.6689 - accuracy: 0.5688 - 116ms/epoch - 23ms/step"),
    (103.1, "Epoch 2/6"),
    (105.0, "5/5 - 0s - loss: 0.6000 - accuracy: 0.6000 - 90ms/epoch - 18ms/step"),
]
# Keras 3 (verbose=1's last state of its bar): timings before the metrics.
KERAS3_TIMED = [
    (50.0, "Epoch 5/6"),
    (58.0, "5/5 ━━━━━━━━━━━━━━━━━━━━ 0s 3ms/step - accuracy: 0.9000 - loss: 0.2000"),
]


@pytest.mark.parametrize(
    ("timed", "expected"),
    [
        (CONTRACT_TIMED, {"format": "contract", "epoch": 3, "total": 6, "metrics": [["loss", "0.5"], ["accuracy", "0.7"]],
                          "epochs": 3, "joined_at": 100.0, "first_at": 110.0, "prev_at": 114.0, "last_at": 118.0}),
        (KERAS_TIMED, {"format": "keras", "epoch": 2, "total": 6, "metrics": [["loss", "0.6000"], ["accuracy", "0.6000"]],
                       "epochs": 2, "joined_at": 100.0, "first_at": 103.0, "prev_at": 103.0, "last_at": 105.0}),
        (KERAS3_TIMED, {"format": "keras", "epoch": 5, "total": 6, "metrics": [["accuracy", "0.9000"], ["loss", "0.2000"]],
                        "epochs": 1, "joined_at": 50.0, "first_at": 58.0, "prev_at": None, "last_at": 58.0}),
    ],
)
def test_progress_of_reads_every_format(timed: list[tuple[float, str]], expected: dict[str, Any]) -> None:
    record = tf_metrics.progress_of(timed)
    assert record == {**expected, "completed_at": None}


def test_progress_of_without_an_ended_epoch_is_none() -> None:
    assert tf_metrics.progress_of([]) is None
    assert tf_metrics.progress_of([(1.0, "Epoch 1/3"), (2.0, "worker=0 cluster_workers=2 replicas=2")]) is None


def test_progress_of_a_registered_format() -> None:
    """A format registered in tf_metrics is read too (its default clock: each timed line
    alone)."""

    def parse(lines: list[str]) -> dict[str, Any]:
        series = tf_metrics.empty_series()
        for line in lines:
            if line.startswith("step "):
                number, total = line.split()[1].split("/")
                tf_metrics.add_epoch(series, int(number), {"mse": line.split()[-1]})
                series["totals"].add(int(total))
        return series

    fmt = tf_metrics.Format(name="steps", label="step lines", parse=parse, progress=r"^step \d", timed=r"^step \d")
    tf_metrics.register(fmt)
    try:
        record = tf_metrics.progress_of([(10.0, "step 1/4 mse 0.3"), (12.5, "step 2/4 mse 0.2")])
    finally:
        tf_metrics.unregister("steps")
    assert record is not None
    assert (record["format"], record["epoch"], record["total"], record["metrics"]) == ("steps", 2, 4, [["mse", "0.2"]])
    assert (record["prev_at"], record["last_at"]) == (10.0, 12.5)


def test_progress_of_bounds_the_metrics_it_carries() -> None:
    metrics = " ".join(f"m{i}={'9' * 80}" for i in range(30))
    record = tf_metrics.progress_of([(1.0, f"worker=0 epoch=1/2 {metrics}")])
    assert record is not None
    assert len(record["metrics"]) == tf_metrics.PROGRESS_MAX_METRICS
    assert all(len(v) == tf_metrics.PROGRESS_MAX_TEXT for _k, v in record["metrics"])


def test_progress_of_notes_training_complete() -> None:
    timed = [*CONTRACT_TIMED[:1], (110.0, "worker=0 epoch=6/6 loss=0.1"), (111.0, "worker=0 training_complete")]
    record = tf_metrics.progress_of(timed)
    assert record is not None and record["completed_at"] == 111.0


# --- tf_progress: what a person reads ---------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(None, "?"), (0.04, "0.0 s"), (3.14, "3.1 s"), (42.4, "42 s"), (245, "4 min 05 s"), (7380, "2 h 03 min"), (-3, "0.0 s")],
)
def test_duration_text(seconds: float | None, text: str) -> None:
    assert duration_text(seconds) == text


def test_clock_text_is_utc_with_the_date_when_far() -> None:
    assert clock_text(0.0, 0.0) == "00:00:00 UTC"
    assert clock_text(90000.0, 0.0) == "1970-01-02 01:00 UTC"
    assert clock_text(None) == "?"


def test_a_running_worker_in_the_middle_of_its_training() -> None:
    record = tf_metrics.progress_of(CONTRACT_TIMED)
    progress = worker_progress(record, host_now=120.0, controller_now=1_000_000.0, started_at=95.0)
    assert progress is not None
    # Epochs 2 and 3 took 4 s each (epoch 1's 10 s held the start-up): 3 epochs to come at
    # 4 s, less the 2 s epoch 4 already ran.
    assert (progress["last"], progress["mean"], progress["elapsed"], progress["left"]) == (4.0, 4.0, 25.0, 10.0)
    assert progress["phase"] == "training"
    assert progress["finish_at"] == 1_000_010.0
    assert progress["text"] == (
        "epoch 3 of 6 (loss 0.5, accuracy 0.7); 4.0 s/epoch last, 4.0 s mean; elapsed 25 s; "
        f"about 10 s left, done by {time.strftime('%H:%M:%S', time.gmtime(1_000_010))} UTC"
    )


def test_keras_progress_after_its_first_epoch_uses_that_epoch() -> None:
    record = tf_metrics.progress_of(KERAS_TIMED[:2])
    progress = worker_progress(record, host_now=104.0, controller_now=0.0, started_at=90.0)
    assert progress is not None
    assert (progress["epoch"], progress["last"], progress["mean"]) == (1, 3.0, 3.0)
    assert progress["left"] == pytest.approx(5 * 3.0 - 1.0)
    assert progress["text"].startswith("epoch 1 of 6 (loss 0.6689, accuracy 0.5688); 3.0 s/epoch last; elapsed 14 s; about 14 s left")


def test_after_the_last_epoch_it_says_what_the_job_does() -> None:
    timed = [*CONTRACT_TIMED, (122.0, "worker=0 epoch=6/6 loss=0.2 accuracy=0.9")]
    record = tf_metrics.progress_of(timed)
    progress = worker_progress(record, host_now=134.0, controller_now=0.0)
    assert progress is not None
    assert progress["phase"] == "finishing" and progress["left"] is None
    assert progress["text"].startswith("epoch 6 of 6 done 12 s ago; saving and exiting (loss 0.2, accuracy 0.9)")
    completed = worker_progress({**record, "completed_at": 125.0}, host_now=134.0, controller_now=0.0)
    assert completed is not None and completed["phase"] == "complete"
    assert "training complete; exiting" in completed["text"]


def test_an_ended_worker_shows_what_it_took_and_no_time_left() -> None:
    record = tf_metrics.progress_of(CONTRACT_TIMED)
    progress = worker_progress(record, host_now=500.0, controller_now=0.0, started_at=95.0, ended_at=119.0)
    assert progress is not None
    assert progress["phase"] == "ended" and progress["left"] is None and progress["elapsed"] == 24.0
    assert progress["text"] == "epoch 3 of 6 (loss 0.5, accuracy 0.7); 4.0 s/epoch last, 4.0 s mean; took 24 s"
    timed = [*CONTRACT_TIMED, (122.0, "worker=0 epoch=6/6 loss=0.2 accuracy=0.9")]
    done = worker_progress(tf_metrics.progress_of(timed), host_now=500.0, controller_now=0.0, ended_at=130.0)
    assert done is not None and done["text"].startswith("epoch 6 of 6 done (loss 0.2, accuracy 0.9); ")


def test_a_total_the_job_never_announced_gives_no_time_left() -> None:
    record = tf_metrics.progress_of([(1.0, "worker=0 epoch=1 loss=1"), (3.0, "worker=0 epoch=2 loss=0.5")])
    progress = worker_progress(record, host_now=4.0, controller_now=0.0)
    assert progress is not None and progress["total"] is None and progress["left"] is None
    assert progress["text"] == "epoch 2 (loss 0.5); 2.0 s/epoch last, 2.0 s mean"


@pytest.mark.parametrize(
    "record",
    [None, "x", {}, {"epoch": 1, "epochs": 1}, {"epoch": True, "epochs": 1, "last_at": 1.0}, {"epoch": 1, "epochs": 0, "last_at": 1.0},
     {"epoch": 1, "epochs": 1, "last_at": float("nan")}],
)
def test_a_malformed_record_is_no_progress(record: Any) -> None:
    assert worker_progress(record, 10.0, 10.0) is None


def test_epoch_durations_and_their_mean() -> None:
    durations = epoch_durations({"1": 110.0, "3": 118.0, "2": 114.0, "x": 1.0, "4": "late"}, joined_at=100.0)
    assert durations == [(1, 10.0), (2, 4.0), (3, 4.0)]
    assert mean_epoch([d for _e, d in durations]) == 4.0
    assert mean_epoch([7.0]) == 7.0 and mean_epoch([]) is None
    assert epoch_durations({"1": 110.0, "2": 114.0}) == [(2, 4.0)]
    assert epoch_durations(None) == []


def entry(index: int, state: str = "running", epoch: int = 3, left: float = 10.0) -> dict[str, Any]:
    progress = {"epoch": epoch, "total": 6, "metrics": {"loss": "0.5"}, "phase": "training", "left": left,
                "elapsed": 20.0, "text": f"epoch {epoch} of 6 ({index})"}  # fmt: skip
    return {"index": index, "state": state, "progress": progress, "fallback": "x"}


def test_workers_that_agree_get_one_line_with_the_slowest_times() -> None:
    lines = grouped([entry(0, left=9.0), entry(1, left=11.0)])
    assert [(line["who"], line["state"], line["text"]) for line in lines] == [("workers 0,1", "running", "epoch 3 of 6 (1)")]


@pytest.mark.parametrize(
    "entries",
    [
        [entry(0), entry(1, epoch=4)],
        [entry(0), entry(1, state="finished")],
        [entry(0), {"index": 1, "state": "running", "progress": None, "fallback": "Epoch 2/3 of worker 1"}],
    ],
)
def test_workers_that_disagree_get_a_line_each(entries: list[dict[str, Any]]) -> None:
    lines = grouped(entries)
    assert [line["who"] for line in lines] == ["worker-0", "worker-1"]
    assert lines[-1]["text"] in ("epoch 4 of 6 (1)", "epoch 3 of 6 (1)", "Epoch 2/3 of worker 1")


def test_the_news_of_a_line_leaves_its_times_out() -> None:
    before = grouped([entry(0, left=10.0)])[0]["key"]
    later = entry(0, left=6.0)
    later["progress"]["text"] = "other times"
    assert grouped([later])[0]["key"] == before
    assert grouped([entry(0, epoch=4)])[0]["key"] != before
