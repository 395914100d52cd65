"""A stock Keras script, judged from Keras' own epoch lines (issue 9).

An ordinary model.fit(verbose=2) script (tests/integration/jobs/keras_fit.py, written like
TensorFlow's multi-worker Keras tutorial) that prints nothing for the runbook trains on two
namespace hosts with tf_keras. The verdict compares its Keras epoch lines and passes, and
says what the job's output does not let it check. Then one worker's log is altered on its
host, in one metric of one epoch, and only the collect phase (fetch and judge) runs again:
the verdict fails naming that epoch and metric, and keeps what train.yml's judgement
recorded (the wait's outcome, the attempts).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from nshosts import NamespaceHosts
from test_multihost import Runbook
from workerenv import shared_venv

JOB = Path(__file__).resolve().parent / "jobs" / "keras_fit.py"
# Keras 3's model.fit fails under MultiWorkerMirroredStrategy with two workers (TF 2.21).
KERAS_PINS = ("tf_keras==2.21.0",)


@pytest.fixture(scope="session")
def keras_python() -> str:
    """The worker pins plus tf_keras, in a virtualenv of their own (built once, cached)."""
    return str(shared_venv(KERAS_PINS))


def test_stock_keras_script_is_judged_from_its_epoch_lines(
    make_ns_hosts: Callable[..., NamespaceHosts], tmp_path: Path, keras_python: str
) -> None:
    hosts = make_ns_hosts(count=2)
    book = Runbook(hosts, tmp_path, port=2400, groupvars={"tf_worker_python": keras_python})
    settings = {
        "tf_run_id": "keras",
        "tf_train_script": str(JOB),
        # The script prints no cluster_workers= line: a worker has joined once it trains.
        "tf_startup_pattern": "Epoch 1/",
        "tf_worker_env": {"TF_USE_LEGACY_KERAS": "1"},
        # The chief's saved model is the chief's output (only it writes model/model.keras).
        "tf_collect_artifacts": ["model"],
        "tf_verdict_marker": "model/model.keras",
    }
    # A marker outside the worker directory could never be judged: refused before launch.
    result = book.play("train.yml", extra={**settings, "tf_run_id": "outside", "tf_verdict_marker": "../model.keras"})
    assert result.returncode != 0
    assert (
        'Preflight refused the run: host node0: tf_verdict_marker "../model.keras" must be a relative path '
        "inside the worker directory"
    ) in result.stdout, result.stdout[-3000:]
    assert not book.exists(0, "~/tf-runbook/runs/outside") and not (book.runs / "outside").exists()

    result = book.play("train.yml", extra=settings)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]

    summary = book.summary("keras")
    checks = {c["name"]: c for c in summary["checks"]}
    assert summary["status"] == "succeeded", checks
    assert summary["job_output"] == {"contract_lines": False, "metrics_from": "keras"}
    assert sorted(summary["metrics"]) == ["1", "2", "3"]
    for metrics in summary["metrics"].values():
        assert sorted(metrics) == ["accuracy", "loss"]  # timings are not metrics
    assert checks["metrics_agree"]["detail"] == "3 epoch(s), identical on every worker (Keras epoch lines)"
    assert checks["epochs_complete"]["detail"] == "every worker printed epoch 3 of 3"
    assert checks["chief_marker"]["ok"] is True
    # What a stock script's output cannot show is "not checked": neither ok nor failed,
    # in summary.json and in the verdict the playbook prints.
    assert summary["not_checked"] == ["cluster_seen", "training_complete"]
    for name in summary["not_checked"]:
        assert checks[name]["ok"] is None and checks[name]["result"] == "not checked"
        assert f"[  --] {name}: not checked: " in result.stdout
    assert "not checked (the job's output does not show it): cluster_seen, training_complete" in result.stdout
    assert (book.runs / "keras" / "node0" / "worker-0" / "model" / "model.keras").is_file()
    assert not (book.runs / "keras" / "node1" / "worker-1" / "model").exists()
    assert [w["cause"]["kind"] for w in summary["workers"]] == ["completed", "completed"]
    assert summary["epoch_sources"] == {"1": 0, "2": 0, "3": 0}
    # train.yml judged with the wait's outcome and the attempts: recorded in summary.json.
    judged = summary["context"]
    assert judged["wait"]["ok"] is True and [a["attempt"] for a in judged["attempts"]] == [0]
    assert summary["judged_again"] is None

    # One metric of one epoch altered in worker 1's log, on its host; only collect reruns.
    log = "~/tf-runbook/runs/keras/worker-1/worker.log"
    rc, before, _ = hosts.run(1, f"cat {log}")
    assert rc == 0
    lines = before.splitlines()
    step = lines.index("Epoch 2/3") + 1
    value = summary["metrics"]["2"]["accuracy"]
    altered = "0.0001" if value != "0.0001" else "0.0002"
    assert f" - accuracy: {value} - " in lines[step], lines[step]
    rc, _, err = hosts.run(1, f"sed -i '{step + 1}s/ - accuracy: {value} - / - accuracy: {altered} - /' {log}")
    assert rc == 0, err

    result = book.play("playbooks/collect.yml", extra={"tf_run_id": "keras", **settings})
    assert result.returncode != 0, result.stdout[-4000:]
    spread = sorted([(value, [0]), (altered, [1])])  # the verdict lists values in order
    expected = "epoch 2 accuracy: " + ", ".join(f"{v} from worker(s) {i}" for v, i in spread)
    assert expected in result.stdout, result.stdout[-4000:]
    summary = book.summary("keras")
    failed = {c["name"]: c["detail"] for c in summary["checks"] if c["ok"] is False}
    assert failed == {"metrics_agree": expected}
    assert summary["status"] == "failed"
    assert summary["metrics"]["2"] == {"loss": summary["metrics"]["2"]["loss"]}
    # collect.yml alone knew no wait outcome and no attempts: it kept what train.yml recorded
    # and said what it judged again (issue 24, point 7).
    assert {"wait", "attempts"} <= set(summary["judged_again"]["kept"])
    assert (summary["context"]["wait"], summary["context"]["attempts"]) == (judged["wait"], judged["attempts"])
    assert "judged again from the collected files; kept from the earlier judgement" in result.stdout
