"""The verdict across attempts (issue 23, point 6; issue 24, point 5): a restarted run is
judged as a whole, each epoch once, from the latest attempt that printed it; a resume is
trusted only after earlier attempts had every worker complete and agree on its epochs;
workers of one attempt that begin at different epochs fail with cause restore-mismatch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from report_runs import build, endpoints, metrics_of, write_worker

KILLED = {"exit_status": 137, "signal": "SIGKILL", "complete": False}


def checks(summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in summary["checks"]}


def failing(summary: dict[str, Any]) -> list[str]:
    return sorted(c["name"] for c in summary["checks"] if c["ok"] is False)


def pair(run: Path, attempt: int = 0, **per_worker: dict[str, Any]) -> None:
    """Workers 0 and 1 of one attempt on node0 and node1; ``w1={...}`` changes worker 1."""
    hosts, cluster = endpoints(2, hosts=2)
    for index in range(2):
        fields = {"epochs": range(1, 4), "total": 3, **per_worker.get(f"w{index}", {})}
        write_worker(run, hosts[index], index, cluster, attempt=attempt, **fields)


def test_a_resume_claimed_in_the_first_attempt_is_never_trusted(tmp_path: Path) -> None:
    """Issue 24, point 5 (reproduced on the old verdict: SUCCEEDED): both workers print
    resumed_from_epoch=2 and only epoch 3 of 3 in attempt 0."""
    run = tmp_path / "first"
    pair(run, w0={"epochs": [3], "resumed_from": 2}, w1={"epochs": [3], "resumed_from": 2})
    summary = build(run, 2)
    assert summary["status"] == "failed"
    assert failing(summary) == ["epochs_once"]
    detail = checks(summary)["epochs_once"]["detail"]
    assert ("worker 0 (node0): resumed_from_epoch=2 in the first attempt: no earlier attempt completed epochs 1..2, "
            "and a resume is trusted only after one") in detail  # fmt: skip
    assert "worker 1 (node1): resumed_from_epoch=2 in the first attempt" in detail
    assert summary["reason"].startswith("epochs_once: worker 0 (node0): resumed_from_epoch=2")


def test_a_resume_backed_by_the_earlier_attempt_is_judged_as_one_run(tmp_path: Path) -> None:
    run = tmp_path / "resumed"
    # Attempt 0: worker 1 killed after epoch 1 (worker 0 got on to epoch 2).
    pair(run, w0={"epochs": [1, 2], "complete": False, "exit_status": 143, "stopped_by": "runbook"},
         w1={"epochs": [1], **KILLED})  # fmt: skip
    pair(run, attempt=1, w0={"epochs": [2, 3], "resumed_from": 1}, w1={"epochs": [2, 3], "resumed_from": 1})
    summary = build(run, 2)
    assert summary["status"] == "succeeded", summary["reason"]
    assert summary["epoch_sources"] == {"1": 0, "2": 1, "3": 1}
    assert summary["metrics"] == {str(e): metrics_of(e) for e in (1, 2, 3)}
    agree = next(c for c in summary["checks"] if c["name"] == "metrics_agree")
    assert agree["detail"] == "3 epoch(s), identical on every worker: 1 agreed in earlier attempt(s), 2 in attempt 1"
    assert summary["attempt"] == 1 and [a["attempt"] for a in summary["attempts"]] == [0, 1]
    assert [a["attempt"] for a in summary["timeline"]] == [0, 1]


def test_a_last_attempt_that_only_restored_after_the_last_epoch_is_judged_from_the_earlier_one(tmp_path: Path) -> None:
    """Worker 1 killed between its last epoch and its exit: the restart resumes after epoch
    3 of 3 and prints no epoch at all. The run is the epochs attempt 0 completed and agreed
    on, not "no worker printed any epoch metrics"."""
    run = tmp_path / "resumed-at-end"
    pair(run, w0={"epochs": [1, 2, 3], "total": 3}, w1={"epochs": [1, 2, 3], "total": 3, **KILLED})
    pair(run, attempt=1, w0={"epochs": [], "total": 3, "resumed_from": 3},
         w1={"epochs": [], "total": 3, "resumed_from": 3})  # fmt: skip
    summary = build(run, 2)
    assert summary["status"] == "succeeded", summary["reason"]
    assert summary["epoch_sources"] == {"1": 0, "2": 0, "3": 0}
    assert checks(summary)["epochs_complete"]["ok"] is True
    agree = checks(summary)["metrics_agree"]
    assert agree["detail"] == "3 epoch(s), identical on every worker: all agreed in earlier attempt(s)"


def test_a_last_attempt_that_printed_nothing_and_claims_no_resume_is_not_complete(tmp_path: Path) -> None:
    run = tmp_path / "silent-end"
    pair(run, w0={"epochs": [1, 2, 3], "total": 3}, w1={"epochs": [1, 2, 3], "total": 3, **KILLED})
    pair(run, attempt=1, w0={"epochs": [], "total": 3}, w1={"epochs": [], "total": 3})
    summary = build(run, 2)
    assert summary["status"] == "failed"
    assert "worker 0 (node0): last epoch printed is 0 of 3" in checks(summary)["epochs_complete"]["detail"]


def test_an_attempt_that_begins_at_its_first_epoch_needs_no_resume_line(tmp_path: Path) -> None:
    """A job restored by TensorFlow's own handler prints no resumed_from_epoch: its first
    epoch (2) says where it began."""
    run = tmp_path / "handler"
    pair(run, w0={"epochs": [1], **KILLED}, w1={"epochs": [1], **KILLED})
    pair(run, attempt=1, w0={"epochs": [2, 3]}, w1={"epochs": [2, 3]})
    summary = build(run, 2)
    assert summary["status"] == "succeeded", summary["reason"]
    assert summary["epoch_sources"] == {"1": 0, "2": 1, "3": 1}


@pytest.mark.parametrize(
    ("attempt0", "says"),
    [
        # Worker 1 never finished epoch 1 before it was killed.
        ({"w0": {"epochs": [1], **KILLED}, "w1": {"epochs": [], **KILLED}}, "agree on epoch 1"),
        # Both printed epoch 1, with different values: no agreed epoch to resume after.
        ({"w0": {"epochs": [1], **KILLED}, "w1": {"epochs": [1], "metrics": {1: {"loss": "9"}}, **KILLED}},
         "agree on epoch 1"),
        # Attempt 0 completed epoch 1 only; attempt 1 begins after epoch 2.
        ({"w0": {"epochs": [1], **KILLED}, "w1": {"epochs": [1], **KILLED}}, "agree on epoch 2"),
    ],
)
def test_a_resume_past_what_earlier_attempts_agreed_on_is_a_gap(
    tmp_path: Path, attempt0: dict[str, Any], says: str
) -> None:
    run = tmp_path / "gap"
    pair(run, **attempt0)
    after = 2 if says.endswith("epoch 2") else 1
    epochs = list(range(after + 1, 4))
    pair(run, attempt=1, w0={"epochs": epochs, "resumed_from": after}, w1={"epochs": epochs, "resumed_from": after})
    summary = build(run, 2)
    assert summary["status"] == "failed"
    assert failing(summary) == ["epochs_once"]
    detail = checks(summary)["epochs_once"]["detail"]
    assert (f"worker 1 (node1): attempt 1 begins after epoch {after} (resumed_from_epoch={after}), but no earlier "
            f"attempt had every worker complete and {says}") in detail  # fmt: skip


def test_a_resume_after_an_epoch_one_worker_never_printed_is_a_gap_that_names_it(tmp_path: Path) -> None:
    """CI of stop 52: worker 1 killed after epoch 3's last collective, before its line; the
    chief printed epoch 3 and backed it up, and the restart resumed after it. The resume is
    refused, and the detail says which worker never printed the epoch and what a job must do."""
    run = tmp_path / "unprinted"
    pair(run, w0={"epochs": [1, 2, 3], "total": 6, "complete": False, "exit_status": 143, "stopped_by": "runbook"},
         w1={"epochs": [1, 2], "total": 6, **KILLED})  # fmt: skip
    pair(run, attempt=1, w0={"epochs": [4, 5, 6], "total": 6, "resumed_from": 3},
         w1={"epochs": [4, 5, 6], "total": 6, "resumed_from": 3})  # fmt: skip
    summary = build(run, 2)
    assert summary["status"] == "failed"
    assert failing(summary) == ["epochs_once"]
    detail = checks(summary)["epochs_once"]["detail"]
    assert detail.endswith(
        "attempt 0 backed up epoch 3, which worker 1 (node1) never printed (worker 0 (node0) did): "
        "a job must back an epoch up only after every worker printed it (docs/your-project.md)"
    ), detail
    assert ("worker 0 (node0): attempt 1 begins after epoch 3 (resumed_from_epoch=3), but no earlier attempt had "
            "every worker complete and agree on epoch 3") in detail  # fmt: skip


def test_a_gap_after_epochs_every_worker_printed_with_other_values_names_no_worker(tmp_path: Path) -> None:
    """Both workers printed epoch 1, with different values: the gap is a disagreement, not
    an epoch a worker never printed, and the detail says nothing of a backup."""
    run = tmp_path / "disagreed"
    pair(run, w0={"epochs": [1], **KILLED}, w1={"epochs": [1], "metrics": {1: {"loss": "9"}}, **KILLED})
    pair(run, attempt=1, w0={"epochs": [2, 3], "resumed_from": 1}, w1={"epochs": [2, 3], "resumed_from": 1})
    detail = checks(build(run, 2))["epochs_once"]["detail"]
    assert "agree on epoch 1" in detail
    assert "backed up" not in detail and "never printed" not in detail, detail


def test_workers_of_one_attempt_that_begin_at_different_epochs_fail_as_restore_mismatch(tmp_path: Path) -> None:
    """Issue 23's example: the chief restored (epochs 2, 3), worker 1 found no checkpoint
    on its host and began again at epoch 1, then crashed on a closed socket."""
    run = tmp_path / "mismatch"
    pair(run, w0={"epochs": [1], **KILLED}, w1={"epochs": [1], **KILLED})
    pair(run, attempt=1, w0={"epochs": [2, 3], "resumed_from": 1},
         w1={"epochs": [1, 2], "complete": False, "exit_status": 1})  # fmt: skip
    summary = build(run, 2)
    assert summary["status"] == "failed"
    assert "restore_agree" in failing(summary)
    assert checks(summary)["restore_agree"]["detail"] == (
        "attempt 1: the workers began at different epochs: worker 0 (node0) at epoch 2 (resumed_from_epoch=1), "
        "worker 1 (node1) at epoch 1 (its first epoch is 1)"
    )
    assert summary["reason"].startswith("restore-mismatch: attempt 1: the workers began at different epochs")
    causes = {w["index"]: w["cause"]["kind"] for w in summary["workers"]}
    assert causes == {0: "completed", 1: "restore-mismatch"}


def test_one_attempt_says_every_epoch_came_from_it(tmp_path: Path) -> None:
    run = tmp_path / "one"
    pair(run)
    summary = build(run, 2)
    assert summary["status"] == "succeeded"
    assert summary["epoch_sources"] == {"1": 0, "2": 0, "3": 0}
    assert checks(summary)["restore_agree"]["ok"] is True


def variant(attempt: int, epoch: int) -> dict[str, str]:
    """Epoch ``epoch``'s metrics as attempt ``attempt`` printed them: another text per attempt."""
    return {"loss": f"0.{attempt}{epoch}0000", "binary_accuracy": f"0.{9 - attempt}{epoch}00"}


@pytest.mark.parametrize(
    ("plan", "sources"),
    [
        # (attempt: (resumed after, epochs printed)): each attempt redoes its predecessor's last epoch.
        ({0: (None, [1, 2]), 1: (1, [2, 3]), 2: (2, [3, 4])}, {1: 0, 2: 1, 3: 2, 4: 2}),
        ({0: (None, [1, 2]), 1: (1, [2, 3]), 2: (2, [3]), 3: (2, [3, 4])}, {1: 0, 2: 1, 3: 3, 4: 3}),
        ({0: (None, [1, 2, 3]), 1: (1, [2, 3]), 2: (1, [2, 3, 4])}, {1: 0, 2: 2, 3: 2, 4: 2}),
    ],
    ids=["three", "four", "redone-twice"],
)
def test_over_three_or_more_attempts_each_epoch_comes_from_the_latest_attempt_that_printed_it(
    tmp_path: Path, plan: dict[int, tuple[int | None, list[int]]], sources: dict[int, int]
) -> None:
    """Every attempt prints its epochs with values of its own: an epoch printed again by a
    later attempt (it restored from an earlier checkpoint) is judged by the later values."""
    run = tmp_path / "many"
    last = max(plan)
    for attempt, (after, epochs) in plan.items():
        ending = {} if attempt == last else KILLED
        fields = {"epochs": epochs, "total": 4, "resumed_from": after,
                  "metrics": {e: variant(attempt, e) for e in epochs}, **ending}  # fmt: skip
        pair(run, attempt=attempt, w0=fields, w1=fields)
    summary = build(run, 2)
    assert summary["status"] == "succeeded", summary["reason"]
    assert summary["epoch_sources"] == {str(e): a for e, a in sources.items()}
    assert summary["metrics"] == {str(e): variant(a, e) for e, a in sources.items()}
    earlier = sum(1 for a in sources.values() if a != last)
    assert checks(summary)["metrics_agree"]["detail"] == (
        f"4 epoch(s), identical on every worker: {earlier} agreed in earlier attempt(s), {4 - earlier} in attempt {last}")


def test_an_earlier_attempts_values_of_an_epoch_are_replaced_by_a_later_one_before_the_last(tmp_path: Path) -> None:
    """The last attempt only restored after epoch 3: each epoch comes from the latest of the
    earlier attempts that completed and agreed on it."""
    run = tmp_path / "restored-at-end"
    for attempt, (after, epochs) in {0: (None, [1, 2]), 1: (1, [2, 3]), 2: (3, [])}.items():
        fields = {"epochs": epochs, "total": 3, "resumed_from": after,
                  "metrics": {e: variant(attempt, e) for e in epochs}, **({} if attempt == 2 else KILLED)}  # fmt: skip
        pair(run, attempt=attempt, w0=fields, w1=fields)
    summary = build(run, 2)
    assert summary["status"] == "succeeded", summary["reason"]
    assert summary["epoch_sources"] == {"1": 0, "2": 1, "3": 1}
    assert summary["metrics"] == {"1": variant(0, 1), "2": variant(1, 2), "3": variant(1, 3)}


# A relative difference of 1e-4, and smaller ones written with more digits: the workers of one
# synchronous job compute the same values, so metrics_agree compares the printed text exactly,
# with no tolerance; a value that differs anywhere is a disagreement.
NEAR_MISSES = [("0.500000", "0.500050"), ("0.693100", "0.693031"), ("0.12345678", "0.12345679"), ("1e-3", "1.0001e-3")]


@pytest.mark.parametrize(("ours", "theirs"), NEAR_MISSES)
def test_a_near_miss_between_workers_fails_metrics_agree(tmp_path: Path, ours: str, theirs: str) -> None:
    run = tmp_path / "near"
    values = {e: {"loss": ours, "binary_accuracy": "0.5000"} for e in (1, 2, 3)}
    pair(run, w0={"metrics": values}, w1={"metrics": {**values, 2: {**values[2], "loss": theirs}}})
    summary = build(run, 2)
    assert summary["status"] == "failed"
    assert failing(summary) == ["metrics_agree"]
    spread = ", ".join(f"{value} from worker(s) {idx}" for value, idx in sorted({ours: [0], theirs: [1]}.items()))
    assert checks(summary)["metrics_agree"]["detail"] == f"epoch 2 loss: {spread}"
    assert "2" not in summary["metrics"] or "loss" not in summary["metrics"]["2"]


@pytest.mark.parametrize(("ours", "theirs"), NEAR_MISSES[:1])
def test_an_earlier_attempts_near_miss_is_no_agreed_epoch_to_resume_after(tmp_path: Path, ours: str, theirs: str) -> None:
    run = tmp_path / "near-earlier"
    values = {1: {"loss": ours, "binary_accuracy": "0.5000"}}
    pair(run, w0={"epochs": [1], "metrics": values, **KILLED},
         w1={"epochs": [1], "metrics": {1: {**values[1], "loss": theirs}}, **KILLED})  # fmt: skip
    pair(run, attempt=1, w0={"epochs": [2, 3], "resumed_from": 1}, w1={"epochs": [2, 3], "resumed_from": 1})
    summary = build(run, 2)
    assert failing(summary) == ["epochs_once"]
    assert "no earlier attempt had every worker complete and agree on epoch 1" in checks(summary)["epochs_once"]["detail"]
