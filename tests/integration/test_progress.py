"""The operator's view of a running job (issue 39), on localhost (inventory/local: two
workers), with a stock Keras script (jobs/keras_fit.py, tf_keras, verbose=2) that prints
nothing for the runbook and trains 10 epochs of about 2 s each.

The run is launched detached; while it trains, status.yml shows the epoch N of M, the last
epoch's metrics, the time per epoch and the time left with its finishing time (UTC); then
wait.yml reattaches, and its live progress lines show the same, until the verdict; the
report shows the time of each epoch, the run's total time and the collected model.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import helpers
from workerenv import shared_venv

JOB = Path(__file__).resolve().parent / "jobs" / "keras_fit.py"
# Keras 3's model.fit fails under MultiWorkerMirroredStrategy with two workers (TF 2.21).
KERAS_PINS = ("tf_keras==2.21.0",)
EPOCHS = 10
# A progress line: the epoch of the total, Keras' metrics, a time per epoch and a time left.
PROGRESS = re.compile(
    rf"epoch (?P<epoch>\d+) of {EPOCHS} \(loss [0-9.]+, accuracy [0-9.]+\); [0-9.]+ s/epoch last(?:, [0-9.]+ s mean)?; "
    r"elapsed [^;]+; about [^;]+ left, done by \d\d:\d\d:\d\d UTC"
)


def play(playbook: str, extra: dict[str, Any], timeout: float = 300) -> Any:
    return helpers.run_playbook(playbook, "--limit", "localhost", extra=extra, timeout=timeout)


def progress_epoch(state_path: Path) -> int:
    try:
        return int((json.loads(state_path.read_text()).get("progress") or {}).get("epoch") or 0)
    except (OSError, ValueError):
        return 0


def test_status_the_wait_and_the_report_show_progress_a_person_can_plan_with(tmp_path: Path) -> None:
    settings = {
        "tf_worker_base_dir": str(tmp_path / "host"),
        "tf_runs_dir": str(tmp_path / "runs"),
        "tf_run_id": "progress",
        "tf_train_script": str(JOB),
        "tf_worker_python": str(shared_venv(KERAS_PINS)),
        "tf_worker_env": {"TF_USE_LEGACY_KERAS": "1", "KERAS_FIT_EPOCHS": str(EPOCHS), "KERAS_FIT_EPOCH_SECONDS": "4"},
        # The script prints no cluster_workers= line: a worker has joined once it trains.
        "tf_startup_pattern": "Epoch 1/",
        "tf_collect_artifacts": ["model"],
        "tf_verdict_marker": "model/model.keras",
        "tf_wait_poll_interval": 2,
        "tf_job_timeout": 300,
    }
    launched = play("train.yml", {**settings, "tf_detach": True})
    assert launched.returncode == 0, launched.stdout[-4000:] + launched.stderr[-2000:]
    state = tmp_path / "host" / "runs" / "progress" / "worker-0" / "state.json"
    # 4 s an epoch: 32 s of training after epoch 2 for status.yml and wait.yml to start
    # while it runs, on a machine loaded by the other integration suite beside this one.
    end = time.monotonic() + 300
    while progress_epoch(state) < 2:
        assert time.monotonic() < end, "no second epoch within 300 s"
        time.sleep(0.5)

    status = play("playbooks/status.yml", settings)
    assert status.returncode == 0, status.stdout[-3000:]
    shown = [line for line in status.stdout.splitlines() if "localhost worker" in line]
    assert shown and all(PROGRESS.search(line) for line in shown), status.stdout[-3000:]

    waited = play("playbooks/wait.yml", settings)
    assert waited.returncode == 0, waited.stdout[-6000:] + waited.stderr[-2000:]
    # What an operator reads (pytest -s shows it; docs/operating.md quotes it).
    print("\n".join(["status.yml:", *shown, "wait.yml:", *(line for line in waited.stdout.splitlines() if " workers 0,1: " in line
                                                            or " worker-" in line)]))  # fmt: skip
    live = [match for line in waited.stdout.splitlines() if (match := PROGRESS.search(line))]
    assert live, waited.stdout[-6000:]
    assert max(int(m.group("epoch")) for m in live) > 2
    # After the last epoch the job saves its model: the wait says so, or saw it exit.
    assert f"epoch {EPOCHS} of {EPOCHS} done" in waited.stdout, waited.stdout[-4000:]

    run = tmp_path / "runs" / "progress"
    assert json.loads((run / "summary.json").read_text())["status"] == "succeeded"
    report = (run / "report.html").read_text()
    times = re.search(r'<p class="epoch-times" data-attempt="0">Time of each epoch \(worker 0; [^)]*\): ([^<]*)</p>', report)
    assert times, report[-3000:]
    assert f"{EPOCHS}: " in times.group(1) and "mean " in times.group(1)
    assert re.search(r'<span id="total-time">took [0-9.:]+ (s|min)</span>', report)
    assert 'href="localhost/worker-0/model"' in report
