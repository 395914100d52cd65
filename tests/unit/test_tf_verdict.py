"""The verdict: parse worker logs, judge a run's checks, load a fetched run, summarise."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from tf_verdict import judge, load_run, parse_log, stopped_as_victim, summarize, table

COLLECTION = "ansible_collections.tf_runbook.multiworker.plugins"
MARKER = "multiworker-complete.txt"
HOSTS = ["node-a", "node-b"]
ENDPOINTS = ["10.0.0.1:2222", "10.0.0.2:2222"]
CHECKS = [
    "logs_collected",
    "exit_status",
    "worker_index",
    "worker_set",
    "same_cluster",
    "cluster_seen",
    "metrics_agree",
    "metrics_finite",
    "epochs_once",
    "restore_agree",
    "epochs_complete",
    "training_complete",
    "chief_marker",
]
METRICS = {
    1: {"loss": "0.6817", "binary_accuracy": "0.6016"},
    2: {"loss": "0.5342", "binary_accuracy": "0.7422"},
    3: {"loss": "0.4127", "binary_accuracy": "0.8203"},
}

NOISE_START = [
    "2025-01-14 10:02:11.482713: I tensorflow/core/util/port.cc:153] oneDNN custom operations are on.",
    "2025-01-14 10:02:12.120034: I tensorflow/core/platform/cpu_feature_guard.cc:210] This TensorFlow "
    "binary is optimized to use available CPU instructions in performance-critical operations.",
    "I0000 00:00:1736848933.51 2931 grpc_server_lib.cc:467] Started server with target: grpc://10.0.0.1:2222",
    "INFO:tensorflow:Enabled multi-worker collective ops with available devices: "
    "['/job:worker/replica:0/task:0/device:CPU:0']",
]


def noise_epoch(epoch: int) -> list[str]:
    m = METRICS.get(epoch, METRICS[1])
    return [
        f"Epoch {epoch}/3",
        f"4/4 ━━━━━━━━━━━━━━━━━━━━ 1s 12ms/step - loss: {m['loss']} - binary_accuracy: {m['binary_accuracy']}",
        "INFO:tensorflow:Collective all_reduce tensors: 6 all_reduces, num_devices = 1, group_size = 2",
    ]


def worker_log(
    index: int,
    size: int = 2,
    *,
    printed_index: int | None = None,
    replicas: int | None = None,
    cluster_workers: int | None = None,
    metrics: dict[int, dict[str, str]] | None = None,
    complete: bool = True,
    noise: bool = True,
    total: int | None = 3,
) -> str:
    """A worker log as the training script prints it, with TensorFlow noise in between."""
    me = index if printed_index is None else printed_index
    lines = list(NOISE_START) if noise else []
    lines.append(
        f"worker={me} cluster_workers={size if cluster_workers is None else cluster_workers} "
        f"replicas={size if replicas is None else replicas} global_batch={16 * size}"
        + ("" if total is None else f" epochs={total}")
    )
    for epoch, values in sorted((METRICS if metrics is None else metrics).items()):
        if noise:
            lines += noise_epoch(epoch)
        shown = " ".join(f"{k}={v}" for k, v in values.items())
        lines.append(f"worker={me} epoch={epoch} {shown}")
    if complete:
        lines.append(f"worker={me} training_complete")
    if noise:
        lines.append("2025-01-14 10:03:01.000001: W tensorflow/core/kernels/data/cache_dataset_ops.cc:914] cache")
    return "\n".join(lines) + "\n"


def tf_config(index: int, size: int = 2) -> dict[str, Any]:
    return {"cluster": {"worker": ENDPOINTS[:size]}, "task": {"type": "worker", "index": index}}


def worker(index: int, **changes: Any) -> dict[str, Any]:
    """A collected worker as load_run returns it; ``changes`` override fields."""
    entry: dict[str, Any] = {
        "index": index,
        "host": HOSTS[index],
        "dir": f"/runs/r/{HOSTS[index]}/worker-{index}",
        "log": worker_log(index),
        "exit": {"returncode": 0, "signal": None, "reason": "exited"},
        "config": tf_config(index),
        "marker": index == 0,
    }
    entry.update(changes)
    return entry


def checks_of(verdict: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in verdict["checks"]}


def only_failure(verdict: dict[str, Any], name: str) -> str:
    """Assert that ``name`` is the one failing check; return its detail."""
    checks = checks_of(verdict)
    failing = sorted(n for n, c in checks.items() if c["ok"] is False)
    assert failing == [name], {n: checks[n]["detail"] for n in failing}
    return checks[name]["detail"]


# --- parse_log ---------------------------------------------------------------------


EMPTY_PARSE = {
    "indices": set(),
    "header": {},
    "epochs": {},
    "complete": False,
    "counts": {},
    "totals": set(),
    "resumed": None,
    "errors": [],
}


def test_parse_log_reads_the_metrics_contract() -> None:
    parsed = parse_log(worker_log(1))
    assert parsed == {
        "indices": {1},
        "header": {"cluster_workers": "2", "replicas": "2", "global_batch": "32", "epochs": "3"},
        "epochs": METRICS,
        "complete": True,
        "counts": {1: 1, 2: 1, 3: 1},
        "totals": {3},
        "resumed": None,
        "errors": [],
    }


def test_parse_log_ignores_tensorflow_noise() -> None:
    assert parse_log(worker_log(0, noise=True)) == parse_log(worker_log(0, noise=False))


@pytest.mark.parametrize(
    "line",
    [
        "4/4 - 1s - loss: 0.1 - epoch=9 worker=0",
        "INFO: worker=0 epoch=9 loss=0.1",
        "Epoch 9/9",
        "workers=0 epoch=9 loss=0.1",
    ],
)
def test_parse_log_ignores_lines_not_starting_with_worker(line: str) -> None:
    parsed = parse_log(line + "\n")
    assert parsed == EMPTY_PARSE


def test_parse_log_without_training_complete() -> None:
    parsed = parse_log(worker_log(0, complete=False))
    assert parsed["complete"] is False
    assert sorted(parsed["epochs"]) == [1, 2, 3]


def test_parse_log_of_empty_text() -> None:
    assert parse_log("") == EMPTY_PARSE


def test_parse_log_collects_every_printed_index() -> None:
    text = worker_log(0) + "worker=1 epoch=4 loss=0.1\r\n"
    parsed = parse_log(text)
    assert parsed["indices"] == {0, 1}
    assert parsed["epochs"][4] == {"loss": "0.1"}


# --- judge -------------------------------------------------------------------------


def test_judge_logs_that_agree_pass_every_check() -> None:
    verdict = judge([worker(0), worker(1)], 2, MARKER)
    checks = checks_of(verdict)
    assert list(checks) == CHECKS
    assert all(c["ok"] for c in checks.values()), checks
    assert verdict["metrics"] == {str(e): m for e, m in METRICS.items()}
    assert checks["metrics_agree"]["detail"] == "3 epoch(s), identical on every worker"


def test_judge_metric_differs_in_one_epoch_of_one_worker() -> None:
    metrics = {e: dict(m) for e, m in METRICS.items()}
    metrics[2]["loss"] = "0.5343"
    verdict = judge([worker(0), worker(1, log=worker_log(1, metrics=metrics))], 2, MARKER)
    detail = only_failure(verdict, "metrics_agree")
    assert "epoch 2 loss" in detail
    assert "0.5342 from worker(s) [0]" in detail
    assert "0.5343 from worker(s) [1]" in detail
    assert "epoch 1" not in detail and "epoch 3" not in detail
    assert "binary_accuracy" not in detail
    # Only what all workers agree on is reported as the run's metrics.
    assert verdict["metrics"]["2"] == {"binary_accuracy": "0.7422"}
    assert verdict["metrics"]["1"] == METRICS[1]


def test_judge_missing_chief_marker() -> None:
    verdict = judge([worker(0, marker=False), worker(1)], 2, MARKER)
    detail = only_failure(verdict, "chief_marker")
    assert detail == f"the chief, worker 0 (node-a), wrote no {MARKER}"


def test_judge_marker_written_by_a_non_chief() -> None:
    verdict = judge([worker(0), worker(1, marker=True)], 2, MARKER)
    detail = only_failure(verdict, "chief_marker")
    assert detail == f"worker 1 (node-b) is not the chief but wrote {MARKER}"


def test_judge_uses_the_given_marker_name() -> None:
    verdict = judge([worker(0, marker=False), worker(1)], 2, "done.flag")
    assert "wrote no done.flag" in only_failure(verdict, "chief_marker")


@pytest.mark.parametrize(
    ("key", "log_args"),
    [("replicas", {"replicas": 1}), ("cluster_workers", {"cluster_workers": 3})],
)
def test_judge_wrong_cluster_size_seen(key: str, log_args: dict[str, int]) -> None:
    verdict = judge([worker(0), worker(1, log=worker_log(1, **log_args))], 2, MARKER)
    detail = only_failure(verdict, "cluster_seen")
    assert detail == f"worker 1 (node-b): {key}={log_args[key]}, cluster has 2"


def test_judge_missing_header() -> None:
    log = "\n".join(line for line in worker_log(1).splitlines() if "replicas=" not in line)
    verdict = judge([worker(0), worker(1, log=log)], 2, MARKER)
    detail = only_failure(verdict, "cluster_seen")
    assert "worker 1 (node-b): printed no cluster_workers" in detail
    assert "worker 1 (node-b): printed no replicas" in detail


def test_judge_missing_training_complete() -> None:
    verdict = judge([worker(0), worker(1, log=worker_log(1, complete=False))], 2, MARKER)
    detail = only_failure(verdict, "training_complete")
    assert detail == "worker 1 (node-b): no training_complete line"


def test_judge_non_zero_exit_status_with_reason() -> None:
    exit_ = {"returncode": 137, "signal": "SIGKILL", "reason": "job deadline of 60 s passed"}
    verdict = judge([worker(0), worker(1, exit=exit_)], 2, MARKER)
    detail = only_failure(verdict, "exit_status")
    assert detail == "worker 1 (node-b): exit status 137 (job deadline of 60 s passed)"


def test_judge_no_exit_status() -> None:
    verdict = judge([worker(0, exit=None), worker(1)], 2, MARKER)
    detail = only_failure(verdict, "exit_status")
    assert detail == "worker 0 (node-a): no exit status (still running or lost)"


def test_judge_log_reports_another_worker_index() -> None:
    verdict = judge([worker(0, log=worker_log(0, printed_index=1)), worker(1)], 2, MARKER)
    detail = only_failure(verdict, "worker_index")
    assert detail == "worker 0 (node-a): log reports worker=[1]"


def test_judge_tf_config_of_another_worker() -> None:
    verdict = judge([worker(0), worker(1, config=tf_config(0))], 2, MARKER)
    detail = only_failure(verdict, "worker_index")
    assert detail == "worker 1 (node-b): TF_CONFIG task.index is 0"


def test_judge_worker_missing_one_epoch_line() -> None:
    metrics = {e: m for e, m in METRICS.items() if e != 2}
    verdict = judge([worker(0), worker(1, log=worker_log(1, metrics=metrics))], 2, MARKER)
    checks = checks_of(verdict)
    assert sorted(n for n, c in checks.items() if c["ok"] is False) == ["epochs_once", "metrics_agree"]
    detail = checks["metrics_agree"]["detail"]
    assert "epoch 2: worker 1 (node-b) printed no metrics" in detail
    assert "epoch 1" not in detail and "epoch 3" not in detail
    assert checks["epochs_once"]["detail"] == "worker 1 (node-b): printed no epoch 2 (epochs 1..3)"


def test_judge_no_epoch_metrics_at_all() -> None:
    logs = [worker(i, log=worker_log(i, metrics={})) for i in range(2)]
    detail = only_failure(judge(logs, 2, MARKER), "metrics_agree")
    assert detail == "no worker printed any epoch metrics"


def test_judge_worker_with_no_files_collected() -> None:
    verdict = judge([worker(0)], 2, MARKER)
    checks = checks_of(verdict)
    assert checks["logs_collected"]["ok"] is False
    assert checks["logs_collected"]["detail"] == "worker 1: no files were collected"


# --- load_run / summarize / table -----------------------------------------------------


def write_worker(run_dir: Path, entry: dict[str, Any], marker: str = MARKER) -> None:
    wdir = run_dir / entry["host"] / f"worker-{entry['index']}"
    wdir.mkdir(parents=True)
    if entry["log"] is not None:
        (wdir / "worker.log").write_text(entry["log"], encoding="utf-8")
    if entry["exit"] is not None:
        (wdir / "exit.json").write_text(json.dumps(entry["exit"]), encoding="utf-8")
    if entry["config"] is not None:
        (wdir / "tf_config.json").write_text(json.dumps(entry["config"]) + "\n", encoding="utf-8")
    if entry["marker"]:
        (wdir / marker).parent.mkdir(parents=True, exist_ok=True)
        (wdir / marker).write_text("complete\n", encoding="utf-8")


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def good_run(tmp_path: Path) -> Path:
    run_dir = tmp_path / "20250114T100200Z-abc123"
    for index in range(2):
        write_worker(run_dir, worker(index))
    return run_dir


def test_load_run_reads_the_fetched_layout(good_run: Path) -> None:
    (good_run / "summary.json").write_text("{}", encoding="utf-8")
    (good_run / "node-a" / "notes.txt").write_text("x", encoding="utf-8")
    (good_run / "node-a" / "worker-x").mkdir()
    workers = load_run(str(good_run), MARKER)
    assert [(w["index"], w["host"]) for w in workers] == [(0, "node-a"), (1, "node-b")]
    assert workers[0]["dir"] == str(good_run / "node-a" / "worker-0")
    assert workers[0]["log"] == worker_log(0)
    assert workers[1]["exit"] == {"returncode": 0, "signal": None, "reason": "exited"}
    assert workers[1]["config"] == tf_config(1)
    assert [w["marker"] for w in workers] == [True, False]


def test_load_run_of_missing_dir_is_empty(tmp_path: Path) -> None:
    assert load_run(str(tmp_path / "absent"), MARKER) == []


def test_load_run_tolerates_unreadable_json(good_run: Path) -> None:
    (good_run / "node-b" / "worker-1" / "exit.json").write_text('{"returncode": ', encoding="utf-8")
    workers = load_run(str(good_run), MARKER)
    assert workers[1]["exit"] is None


def test_summarize_good_run_succeeds_and_writes_nothing(good_run: Path) -> None:
    before = tree(good_run)
    context = {"wait": {"ok": True}}
    summary = summarize("r1", str(good_run), MARKER, 0, context)
    assert tree(good_run) == before
    assert summary["status"] == "succeeded"
    assert summary["run_id"] == "r1"
    assert summary["cluster"] == {"worker": ENDPOINTS, "size": 2}
    assert [c["name"] for c in summary["checks"]] == CHECKS
    assert all(c["ok"] for c in summary["checks"])
    assert summary["metrics"] == {str(e): m for e, m in METRICS.items()}
    assert summary["context"] == context
    assert summary["workers"] == [
        {
            "index": i,
            "host": HOSTS[i],
            "endpoint": ENDPOINTS[i],
            "port": 2222,
            "exit_status": 0,
            "exit_reason": "exited",
            "cause": {"kind": "completed", "detail": "the job exited 0"},
            "stacks": None,
            "log": str(good_run / HOSTS[i] / f"worker-{i}" / "worker.log"),
        }
        for i in range(2)
    ]
    json.dumps(summary)  # summary.json must be serialisable


def test_summarize_port_of_ipv6_endpoint(tmp_path: Path) -> None:
    cluster = {"worker": ["[fd00::1]:2222", "[fd00::1]:2223"]}
    for index in range(2):
        entry = worker(index, host="v6", config={"cluster": cluster, "task": {"type": "worker", "index": index}})
        write_worker(tmp_path, entry)
    summary = summarize("r", str(tmp_path), MARKER, 0, {})
    assert [(w["endpoint"], w["port"]) for w in summary["workers"]] == [
        ("[fd00::1]:2222", 2222),
        ("[fd00::1]:2223", 2223),
    ]
    assert summary["status"] == "succeeded"


@pytest.mark.parametrize("empty_dir", [True, False])
def test_summarize_worker_with_no_files(tmp_path: Path, empty_dir: bool) -> None:
    write_worker(tmp_path, worker(0))
    if empty_dir:
        (tmp_path / "node-b" / "worker-1").mkdir(parents=True)
    summary = summarize("r", str(tmp_path), MARKER, 0, {})
    assert summary["status"] == "failed"
    assert summary["cluster"]["size"] == 2
    detail = checks_of(summary)["logs_collected"]["detail"]
    expected = "worker 1 (node-b): no log" if empty_dir else "worker 1: no files were collected"
    assert detail == expected


def test_summarize_expected_size_larger_than_collected(good_run: Path) -> None:
    summary = summarize("r", str(good_run), MARKER, 3, {})
    assert summary["status"] == "failed"
    assert summary["cluster"]["size"] == 3
    assert "worker 2: no files were collected" in checks_of(summary)["logs_collected"]["detail"]


def test_summarize_takes_the_cluster_most_workers_were_given(tmp_path: Path) -> None:
    """cluster_of is documented as 'the cluster list most workers were given'."""
    majority = ["10.0.0.1:2222", "10.0.0.2:2222", "10.0.0.3:2222"]
    stray = ["10.9.9.9:1", "10.9.9.9:2", "10.9.9.9:3"]
    for index, host in enumerate(["node-a", "node-b", "node-c"]):
        cluster = stray if index == 0 else majority
        entry = {
            "index": index,
            "host": host,
            "log": worker_log(index, 3),
            "exit": {"returncode": 0, "reason": "exited"},
            "config": {"cluster": {"worker": cluster}, "task": {"type": "worker", "index": index}},
            "marker": index == 0,
        }
        write_worker(tmp_path, entry)
    summary = summarize("r", str(tmp_path), MARKER, 0, {})
    assert summary["cluster"]["worker"] == majority


def test_summarize_failed_run(good_run: Path) -> None:
    exit_path = good_run / "node-b" / "worker-1" / "exit.json"
    exit_path.write_text(json.dumps({"returncode": 3, "reason": "exited"}), encoding="utf-8")
    summary = summarize("r", str(good_run), MARKER, 0, {})
    assert summary["status"] == "failed"
    assert summary["workers"][1]["exit_status"] == 3
    assert checks_of(summary)["exit_status"]["detail"] == "worker 1 (node-b): exit status 3 (exited)"


def test_table_shows_status_workers_metrics_and_every_check(good_run: Path) -> None:
    summary = summarize("r1", str(good_run), MARKER, 0, {})
    lines = table(summary)
    assert lines[0] == "run r1: SUCCEEDED"
    text = "\n".join(lines)
    for check in summary["checks"]:
        assert f"[  ok] {check['name']}: {check['detail']}" in lines
    for i in range(2):
        assert any(line.split()[:3] == [str(i), HOSTS[i], ENDPOINTS[i]] and line.endswith(" 0") for line in lines), text
    assert "epoch 2: binary_accuracy=0.7422 loss=0.5342" in lines


def test_table_of_failed_run_marks_the_failing_check(good_run: Path) -> None:
    (good_run / "node-a" / "worker-0" / MARKER).unlink()
    summary = summarize("r2", str(good_run), MARKER, 0, {})
    lines = table(summary)
    assert lines[0] == "run r2: FAILED"
    assert f"[FAIL] chief_marker: the chief, worker 0 (node-a), wrote no {MARKER}" in lines
    assert sum(line.startswith("[  ok]") for line in lines) == len(CHECKS) - 1


def test_table_sorts_epochs_numerically() -> None:
    summary = {
        "run_id": "r",
        "status": "succeeded",
        "workers": [],
        "metrics": {"10": {"loss": "0.1"}, "2": {"loss": "0.2"}, "1": {"loss": "0.3"}},
        "checks": [],
    }
    epochs = [line for line in table(summary) if line.startswith("epoch ")]
    assert epochs == ["epoch 1: loss=0.3", "epoch 2: loss=0.2", "epoch 10: loss=0.1"]


def test_main_writes_summary_json(good_run: Path) -> None:
    """main() is what writes summary.json: run the module as Ansible would."""
    import subprocess

    import tf_verdict

    args = {"ANSIBLE_MODULE_ARGS": {"run_dir": str(good_run), "run_id": "r9", "context": {"k": 1}}}
    proc = subprocess.run(
        [sys.executable, tf_verdict.__file__],
        input=json.dumps(args),
        capture_output=True,
        text=True,
        timeout=60,
        env={
            **os.environ,
            "ANSIBLE_LOCAL_TEMP": str(good_run.parent / "tmp"),
            # The shared module_utils, as AnsiballZ would bundle them.
            "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "collections"),
        },
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["status"] == "succeeded"
    assert result["failed_checks"] == []
    written = json.loads((good_run / "summary.json").read_text(encoding="utf-8"))
    assert written["run_id"] == "r9"
    assert written["context"] == {"k": 1}
    assert written == result["summary"]


def test_judge_a_worker_given_another_cluster_list() -> None:
    reordered = {"cluster": {"worker": ENDPOINTS[::-1]}, "task": {"type": "worker", "index": 1}}
    verdict = judge([worker(0), worker(1, config=reordered)], 2, MARKER)
    detail = only_failure(verdict, "same_cluster")
    assert detail.startswith("worker 1 (node-b): cluster list ['10.0.0.2:2222', '10.0.0.1:2222'] differs")


# --- crafted runs: each gets its verdict, none crashes the module ----------------------

KERAS = {
    1: {"loss": "0.7961", "accuracy": "0.5312"},
    2: {"loss": "0.7115", "accuracy": "0.5813"},
    3: {"loss": "0.6228", "accuracy": "0.6875"},
}


def keras_log(metrics: dict[int, dict[str, str]] | None = None, total: int = 3, ms: int = 170) -> str:
    """What a stock script's model.fit(verbose=2) prints with tf_keras 2.21 (as measured),
    timings included: they differ between workers and are not metrics."""
    lines = list(NOISE_START)
    for epoch, values in sorted((KERAS if metrics is None else metrics).items()):
        lines.append(f"Epoch {epoch}/{total}")
        shown = "".join(f" - {k}: {v}" for k, v in values.items())
        lines.append(f"5/5 - 0s{shown} - {ms + epoch}ms/epoch - {ms // 5}ms/step")
    return "\n".join(lines) + "\n"


def changed(metrics: dict[int, dict[str, str]], epoch: int, **values: str) -> dict[int, dict[str, str]]:
    out = {e: dict(m) for e, m in metrics.items()}
    out[epoch].update(values)
    return out


def fraction_log(index: int, epochs: list[int]) -> str:
    """The contract with epoch=E/N instead of epoch=E (and no epochs= in the header)."""
    text = worker_log(index, metrics={e: METRICS[e] for e in epochs}, total=None)
    for epoch in epochs:
        text = text.replace(f" epoch={epoch} ", f" epoch={epoch}/3 ")
    return text


def put(run_dir: Path, rel: str, content: str | bytes) -> None:
    path = run_dir / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")


def pair(run_dir: Path, marker: str = MARKER, **changes: dict[str, Any]) -> None:
    """Workers 0 and 1 of a good run; ``changes={"w1": {...}}`` overrides worker 1's fields."""
    for index in range(2):
        write_worker(run_dir, worker(index, **changes.get(f"w{index}", {})), marker)


def keras_pair(run_dir: Path, marker: str = MARKER, **changes: dict[str, Any]) -> None:
    for index in range(2):
        fields = {"log": keras_log(ms=170 + 40 * index), "marker": False, **changes.get(f"w{index}", {})}
        write_worker(run_dir, worker(index, **fields), marker)


def second_dir(run_dir: Path, log: str | None = None) -> None:
    """Two directories for index 1, on node-b and node-c."""
    pair(run_dir)
    write_worker(run_dir, worker(1, host="node-c", log=log or worker_log(1)))


def duplicate_epoch(run_dir: Path) -> None:
    """Every worker prints epoch 2 twice, the second time with other values."""
    again = {i: worker_log(i) + f"worker={i} epoch=2 loss=0.1111 binary_accuracy=0.9999\n" for i in range(2)}
    pair(run_dir, w0={"log": again[0]}, w1={"log": again[1]})


def index_past_size(run_dir: Path) -> None:
    pair(run_dir)
    entry = worker(1, host="node-c", log=worker_log(2), config=tf_config(2))
    entry["index"] = 2
    write_worker(run_dir, entry)


def resumed(run_dir: Path, skip: bool = False) -> None:
    """Attempt 0: worker 1 killed; retry-1: both resume after epoch 1."""
    killed = {"returncode": 137, "signal": "SIGKILL", "reason": "exited"}
    pair(run_dir, w1={"exit": killed, "log": worker_log(1, metrics={1: METRICS[1]}, complete=False)})
    epochs = {3: METRICS[3]} if skip else {2: METRICS[2], 3: METRICS[3]}
    for index in range(2):
        log = worker_log(index, metrics=epochs).replace(" epochs=3\n", f" epochs=3\nworker={index} resumed_from_epoch=1\n", 1)
        put(run_dir, f"{HOSTS[index]}/retry-1/worker-{index}/worker.log", log)
        put(run_dir, f"{HOSTS[index]}/retry-1/worker-{index}/exit.json", json.dumps({"returncode": 0, "reason": "exited"}))
        put(run_dir, f"{HOSTS[index]}/retry-1/worker-{index}/tf_config.json", json.dumps(tf_config(index)))
    put(run_dir, f"{HOSTS[0]}/retry-1/worker-0/{MARKER}", "complete\n")


def exit_of(**fields: Any) -> dict[str, Any]:
    return {"returncode": 0, "signal": None, "reason": "exited", **fields}


def crafted(name: str, build: Any, status: str, failing: list[str], says: list[str] = (), **more: Any) -> Any:
    return pytest.param(build, status, failing, list(says), more, id=name)


CONTRACT_NOT_CHECKED: list[str] = []
# What an extra, empty worker directory fails (beside the run's good workers).
EMPTY_WORKER_FAILS = [
    "logs_collected", "exit_status", "worker_index", "worker_set", "same_cluster", "cluster_seen",
    "metrics_agree", "epochs_complete", "training_complete",
]
KERAS_NOT_CHECKED = ["cluster_seen", "training_complete", "chief_marker"]

CRAFTED = [
    crafted("good contract run", pair, "succeeded", [], not_checked=CONTRACT_NOT_CHECKED),
    # Issue 11, point 7: two directories for one index on different hosts.
    crafted("two dirs for index 1, same logs", second_dir, "failed", ["worker_set"],
            ["worker 1: 2 directories (on node-b, node-c); one index, one directory"]),
    crafted("two dirs for index 1, the first one disagrees",
            lambda d: (pair(d, w1={"log": worker_log(1, metrics=changed(METRICS, 2, loss="0.9"))}),
                       write_worker(d, worker(1, host="node-c"))),
            "failed", ["metrics_agree", "worker_set"], ["epoch 2 loss: 0.5342 from worker(s) [0, 1], 0.9 from worker(s) [1]"]),
    # Point 8.
    crafted("epoch lines without a metric",
            lambda d: pair(d, w0={"log": worker_log(0, metrics={e: {} for e in METRICS})},
                           w1={"log": worker_log(1, metrics={e: {} for e in METRICS})}),
            "failed", ["metrics_agree"], ["epoch 1: worker 0 (node-a) printed an epoch line without any metric"]),
    crafted("one worker lacks a metric name",
            lambda d: pair(d, w1={"log": worker_log(1, metrics={e: {"loss": m["loss"]} for e, m in METRICS.items()})}),
            "failed", ["metrics_agree"], ["epoch 1: worker 1 (node-b) printed no binary_accuracy"]),
    crafted("an epoch printed twice with other values", duplicate_epoch, "failed", ["epochs_once"],
            ["worker 0 (node-a): epoch 2 printed 2 times", "worker 1 (node-b): epoch 2 printed 2 times"]),
    crafted("loss=nan on every worker",
            lambda d: pair(d, w0={"log": worker_log(0, metrics=changed(METRICS, 2, loss="nan"))},
                           w1={"log": worker_log(1, metrics=changed(METRICS, 2, loss="nan"))}),
            "failed", ["metrics_finite"], ["epoch 2 loss=nan from worker(s) [0, 1]: not a finite number"]),
    crafted("loss=inf and a word on every worker",
            lambda d: pair(d, w0={"log": worker_log(0, metrics=changed(METRICS, 1, loss="inf", binary_accuracy="high"))},
                           w1={"log": worker_log(1, metrics=changed(METRICS, 1, loss="inf", binary_accuracy="high"))}),
            "failed", ["metrics_finite"], ["epoch 1 loss=inf", "epoch 1 binary_accuracy=high"]),
    crafted("1 of 3 epochs printed by every worker",
            lambda d: pair(d, w0={"log": worker_log(0, metrics={1: METRICS[1]})},
                           w1={"log": worker_log(1, metrics={1: METRICS[1]})}),
            "failed", ["epochs_complete"], ["worker 0 (node-a): last epoch printed is 1 of 3"]),
    crafted("epoch 2 skipped by every worker",
            lambda d: pair(d, w0={"log": worker_log(0, metrics={1: METRICS[1], 3: METRICS[3]})},
                           w1={"log": worker_log(1, metrics={1: METRICS[1], 3: METRICS[3]})}),
            "failed", ["epochs_once"], ["worker 1 (node-b): printed no epoch 2 (epochs 1..3)"]),
    crafted("no epoch total printed", lambda d: pair(d, w0={"log": worker_log(0, total=None)},
                                                     w1={"log": worker_log(1, total=None)}),
            "succeeded", [], not_checked=["epochs_complete"]),
    crafted("worker index at the cluster size", index_past_size, "failed", ["worker_set"],
            ["worker 2 (node-c): index 2 is outside the cluster of 2 (0..1)"]),
    # Point 9: exits the runbook caused.
    crafted("deadline SIGTERM caught, training_complete, exit 0",
            lambda d: pair(d, w1={"exit": exit_of(reason="job deadline of 60 s passed")}),
            "failed", ["exit_status"],
            ["worker 1 (node-b): exited 0, but the runbook ended it (job deadline of 60 s passed)"]),
    crafted("stop's SIGTERM caught, exit 0",
            lambda d: pair(d, w0={"exit": exit_of(reason="stopped by signal SIGTERM")}),
            "failed", ["exit_status"], ["worker 0 (node-a): exited 0, but the runbook ended it (stopped by signal SIGTERM)"]),
    crafted("exit record without a reason", lambda d: pair(d, w1={"exit": {"returncode": 0}}),
            "failed", ["exit_status"], ["the exit record gives no reason"]),
    crafted("structured stopped_by names the runbook",
            lambda d: pair(d, w1={"exit": exit_of(stopped_by="deadline")}),
            "failed", ["exit_status"], ["the runbook ended it (deadline)"]),
    crafted("structured stopped_by empty", lambda d: pair(d, w1={"exit": exit_of(stopped_by=None)}), "succeeded", []),
    # Point 10: epoch=E/N, and input that must not crash the module.
    crafted("epoch=E/N lines", lambda d: pair(d, w0={"log": fraction_log(0, [1, 2, 3])},
                                              w1={"log": fraction_log(1, [1, 2, 3])}), "succeeded", []),
    crafted("epoch=1/3 and nothing more", lambda d: pair(d, w0={"log": fraction_log(0, [1])},
                                                         w1={"log": fraction_log(1, [1])}),
            "failed", ["epochs_complete"], ["worker 1 (node-b): last epoch printed is 1 of 3"]),
    crafted("epoch=x", lambda d: pair(d, w0={"log": worker_log(0) + "worker=0 epoch=x loss=0.1\n"}),
            "failed", ["epochs_once"], ["epoch=x is not an epoch number (E or E/N)"]),
    crafted("5000-digit epoch and index",
            lambda d: pair(d, w0={"log": worker_log(0) + f"worker=0 epoch={'9' * 5000} loss=1\nworker={'9' * 5000} x=1\n"}),
            "failed", ["epochs_once"], ["is not an epoch number", "is not a small integer"]),
    crafted("epoch 999999999 after epoch 1",
            lambda d: pair(d, w0={"log": worker_log(0) + "worker=0 epoch=999999999 loss=1 binary_accuracy=1\n"}),
            "failed", ["epochs_complete", "epochs_once", "metrics_agree"],
            ["worker 0 (node-a): printed no epoch 4, 5, 6, 7, 8, 9, 10, 11, 12, 13 and 999999985 more (epochs 1..999999999)"]),
    crafted("exit.json holds a list", lambda d: (pair(d), put(d, "node-b/worker-1/exit.json", "[0]")),
            "failed", ["exit_status"], ["worker 1 (node-b): no exit status"]),
    crafted("tf_config.json holds a string", lambda d: (pair(d), put(d, "node-b/worker-1/tf_config.json", '"x"')),
            "failed", ["same_cluster", "worker_index"], ["worker 1 (node-b): TF_CONFIG task.index is None"]),
    crafted("cluster of numbers, task index as text",
            lambda d: pair(d, w0={"config": {"cluster": {"worker": [1, 2]}, "task": {"index": "0"}}},
                           w1={"config": {"cluster": {"worker": [1, 2]}, "task": []}}),
            "failed", ["same_cluster", "worker_index"], ["TF_CONFIG task.index is 0"]),
    crafted("endpoints without a port",
            lambda d: pair(d, w0={"config": {"cluster": {"worker": ["a", "b"]}, "task": {"index": 0}}},
                           w1={"config": {"cluster": {"worker": ["a", "b"]}, "task": {"index": 1}}}),
            "succeeded", []),
    crafted("return code as text, finish time as text",
            lambda d: pair(d, w0={"exit": {"returncode": "0", "reason": "exited", "finished_at": "soon"}},
                           w1={"exit": {"returncode": 1, "reason": "exited", "finished_at": "x"}}),
            "failed", ["exit_status"], ["exit status 0 (exited)", "exit status 1 (exited)"]),
    crafted("return code false", lambda d: pair(d, w1={"exit": exit_of(returncode=False)}), "failed", ["exit_status"],
            ["worker 1 (node-b): exit status False (exited)"]),
    crafted("binary log", lambda d: (pair(d), put(d, "node-a/worker-0/worker.log", b"\x00\xff\xfe" + worker_log(0).encode()
                                                  + b"\x1b[2J\x00\r\r\n")), "succeeded", []),
    crafted("a worker directory with nothing, far past the cluster",
            lambda d: (pair(d), (d / "node-b" / "worker-99999").mkdir()), "failed", EMPTY_WORKER_FAILS,
            ["worker 99999 (node-b): no log", "index 99999 is outside the cluster of 2"]),
    crafted("a file where a host or worker directory should be",
            lambda d: (pair(d), put(d, "stray", "x"), put(d, "node-c/worker-3", "x")), "failed", EMPTY_WORKER_FAILS),
    crafted("empty run directory", lambda d: d.mkdir(), "failed", ["logs_collected"],
            ["no worker's files were collected"]),
    crafted("resumed after epoch 1", resumed, "succeeded", []),
    crafted("resumed after epoch 1, then epoch 2 skipped", lambda d: resumed(d, skip=True), "failed",
            ["epochs_once"], ["printed no epoch 2 (epochs 2..3)"]),
    # Issue 9: stock Keras scripts.
    crafted("keras verbose=2 run", keras_pair, "succeeded", [], not_checked=KERAS_NOT_CHECKED),
    crafted("keras: one metric of one epoch differs",
            lambda d: keras_pair(d, w1={"log": keras_log(changed(KERAS, 2, accuracy="0.5814"))}),
            "failed", ["metrics_agree"], ["epoch 2 accuracy: 0.5813 from worker(s) [0], 0.5814 from worker(s) [1]"]),
    crafted("keras: 2 of 3 epochs", lambda d: keras_pair(d, w0={"log": keras_log({1: KERAS[1], 2: KERAS[2]})},
                                                         w1={"log": keras_log({1: KERAS[1], 2: KERAS[2]})}),
            "failed", ["epochs_complete"], ["last epoch printed is 2 of 3"]),
    crafted("keras: loss nan", lambda d: keras_pair(d, w0={"log": keras_log(changed(KERAS, 3, loss="nan"))},
                                                    w1={"log": keras_log(changed(KERAS, 3, loss="nan"))}),
            "failed", ["metrics_finite"], ["epoch 3 loss=nan from worker(s) [0, 1]"]),
    crafted("keras: epoch 3 began but printed nothing",
            lambda d: keras_pair(d, w1={"log": keras_log({1: KERAS[1], 2: KERAS[2]}) + "Epoch 3/3\n"}),
            "failed", ["metrics_agree"], ["epoch 3: worker 1 (node-b) printed no metrics"]),
    crafted("keras: the chief's model as the marker", lambda d: keras_pair(d, "model/model.keras", w0={"marker": True}),
            "succeeded", [], marker="model/model.keras", not_checked=["cluster_seen", "training_complete"]),
    crafted("keras: the model written by a non-chief too",
            lambda d: keras_pair(d, "model/model.keras", w0={"marker": True}, w1={"marker": True}),
            "failed", ["chief_marker"], ["worker 1 (node-b) is not the chief but wrote model/model.keras"],
            marker="model/model.keras"),
    crafted("keras: no model from the chief", keras_pair, "failed", ["chief_marker"],
            ["the chief, worker 0 (node-a), wrote no model/model.keras"], marker="model/model.keras"),
    crafted("a marker outside the worker directory", pair, "failed", ["chief_marker"],
            ["tf_verdict_marker '../x' is not a relative path inside the worker directory"], marker="../x"),
    crafted("a job that prints nothing", lambda d: pair(d, w0={"log": "", "marker": False}, w1={"log": "\n"}),
            "succeeded", [], not_checked=["cluster_seen", "metrics_agree", "metrics_finite", "epochs_once",
                                          "restore_agree", "epochs_complete", "training_complete", "chief_marker"]),
]


def run_module(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], exit_code: int = 0,
               **params: Any) -> dict[str, Any]:
    """main() in this process, as Ansible runs it; returns its result."""
    import tf_verdict
    from ansible.module_utils import basic

    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", json.dumps({"ANSIBLE_MODULE_ARGS": params}).encode())
    monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy")
    with pytest.raises(SystemExit) as exited:
        tf_verdict.main()
    assert exited.value.code == exit_code
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(("build", "status", "failing", "says", "more"), CRAFTED)
def test_crafted_run_gets_its_verdict(
    build: Any,
    status: str,
    failing: list[str],
    says: list[str],
    more: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_dir = tmp_path / "run"
    build(run_dir)
    result = run_module(monkeypatch, capsys, run_dir=str(run_dir), run_id="crafted", marker=more.get("marker", MARKER))
    written = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    # The module read the run (no fallback summary) and ran every check.
    assert [c["name"] for c in written["checks"]] == CHECKS
    checks = checks_of(written)
    assert written["status"] == status, {n: c["detail"] for n, c in checks.items() if c["ok"] is not True}
    assert result["status"] == status
    assert sorted(n for n, c in checks.items() if c["ok"] is False) == sorted(failing)
    details = " | ".join(c["detail"] for c in written["checks"])
    for text in says:
        assert text in details
    if "not_checked" in more:
        assert written["not_checked"] == more["not_checked"]
        assert [n for n, c in checks.items() if c["result"] == "not checked"] == more["not_checked"]
    for check in written["checks"]:
        assert (check["ok"], check["result"]) in {(True, "ok"), (False, "failed"), (None, "not checked")}
    assert ("reason" in written) and (written["reason"] is None) == (status == "succeeded")


def test_module_writes_a_summary_even_when_the_verdict_itself_breaks(
    good_run: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import tf_verdict

    def broken(*_args: Any) -> dict[str, Any]:
        raise RecursionError("deep")

    monkeypatch.setattr(sys.modules[f"{COLLECTION}.module_utils.tf_verdict_summary"], "summarize_run", broken)
    result = run_module(monkeypatch, capsys, run_dir=str(good_run), run_id="r", context={"k": 1})
    written = json.loads((good_run / "summary.json").read_text(encoding="utf-8"))
    assert written == result["summary"]
    assert written["status"] == "failed" and written["context"] == {"k": 1}
    assert written["reason"] == "the verdict could not read the run: RecursionError: deep"
    assert result["failed_checks"] == ["verdict: the verdict could not read the run: RecursionError: deep"]


def test_a_run_the_controller_never_saw_is_refused_and_nothing_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """collect.yml -e tf_run_id=<a typo>: no host gave a file, no launch claimed the
    directory. Judged, the id would get a failed summary.json and count as used."""
    runs = tmp_path / "runs"
    runs.mkdir()
    result = run_module(monkeypatch, capsys, exit_code=1, run_dir=str(runs / "nosuch"), run_id="nosuch")
    assert result["failed"] and "summary" not in result, result
    assert result["msg"] == (
        f"Run nosuch: nothing to judge: no host gave a file of this run and this controller never launched it "
        f"({runs / 'nosuch'} does not exist); check -e tf_run_id (the runs this controller knows are under {runs})")
    assert list(runs.iterdir()) == []


@pytest.mark.parametrize(
    ("line", "metrics"),
    [
        # tf_keras 2.21, verbose=2, as printed under MultiWorkerMirroredStrategy here.
        ("5/5 - 0s - loss: 0.6689 - accuracy: 0.5688 - 116ms/epoch - 23ms/step", {"loss": "0.6689", "accuracy": "0.5688"}),
        # Keras 3 puts the timing first.
        ("5/5 - 0s - 23ms/step - loss: 0.6689 - val_loss: 1.0e-03", {"loss": "0.6689", "val_loss": "1.0e-03"}),
        # A progress bar rewritten with carriage returns: its last state counts.
        ("1/5 [==>....] - ETA: 1s - loss: 0.9\r5/5 [=======] - 0s 2ms/step - loss: 0.5", {"loss": "0.5"}),
        ("5/5 - 0s - 116ms/epoch - 23ms/step", {}),
    ],
)
def test_parse_keras_reads_metrics_not_timings(line: str, metrics: dict[str, str]) -> None:
    from tf_verdict import parse_keras

    parsed = parse_keras(f"noise\nEpoch 2/3\n{line}\nINFO:tensorflow:after\n")
    assert parsed == {"epochs": {2: metrics}, "counts": {2: 1}, "totals": {3}, "errors": []}


def test_parse_keras_ignores_step_lines_outside_an_epoch_and_counts_repeats() -> None:
    from tf_verdict import parse_keras

    text = "5/5 - 0s - loss: 9.0\nEpoch 1/2\n5/5 - 0s - loss: 0.5\nEpoch 1/2\n5/5 - 0s - loss: 0.7\n"
    assert parse_keras(text) == {"epochs": {1: {"loss": "0.5"}}, "counts": {1: 2}, "totals": {2}, "errors": []}


@pytest.mark.parametrize(
    ("record", "by"),
    [
        ({"returncode": 0, "reason": "exited"}, None),
        ({"returncode": 0, "reason": "job deadline of 60 s passed"}, "job deadline of 60 s passed"),
        ({"returncode": 0, "reason": "stopped by the runbook"}, "stopped by the runbook"),
        ({"returncode": 0}, "the exit record gives no reason"),
        ({"returncode": 0, "reason": "exited", "stopped_by": "operator"}, "operator"),
        ({"returncode": 0, "reason": "job deadline of 60 s passed", "stopped_by": None}, None),
        ({"returncode": 0, "reason": "exited", "stopped_by": "job"}, None),
    ],
)
def test_stopped_by_runbook_reads_the_exit_record(record: dict[str, Any], by: str | None) -> None:
    from tf_verdict import stopped_by_runbook

    assert stopped_by_runbook(record) == by


def test_module_says_so_when_summary_json_cannot_be_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import tf_verdict
    from ansible.module_utils import basic

    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x", encoding="utf-8")
    args = {"ANSIBLE_MODULE_ARGS": {"run_dir": str(blocker), "run_id": "r"}}
    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", json.dumps(args).encode())
    monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy")
    with pytest.raises(SystemExit) as exited:
        tf_verdict.main()
    assert exited.value.code == 1
    result = json.loads(capsys.readouterr().out)
    assert result["msg"].startswith(f"cannot write {blocker}/summary.json: ")
    assert result["summary"]["status"] == "failed"


def test_module_documentation_is_valid_yaml() -> None:
    import tf_verdict
    import yaml

    assert set(yaml.safe_load(tf_verdict.DOCUMENTATION)["options"]) == {
        "run_dir", "run_id", "marker", "expected_size", "wait_outcome", "attempts", "devices", "left_out", "context"
    }
    examples = [task["tf_runbook.multiworker.tf_verdict"] for task in yaml.safe_load(tf_verdict.EXAMPLES)[:2]]
    assert examples[1]["marker"] == "model/model.keras"
    assert set(yaml.safe_load(tf_verdict.RETURN)) == {"summary", "table", "failed_checks", "not_checked", "status", "reason"}


@pytest.mark.parametrize(
    ("first", "printed", "examples", "count"),
    [
        (1, [1, 2, 3], [], 0),
        (1, [1, 3], [2], 1),
        (1, [4], [1, 2, 3], 3),
        (3, [3, 5, 9], [4, 6, 7, 8], 4),
        (2, [1, 2, 4], [3], 1),
        (1, [1, 10**9], list(range(2, 12)), 10**9 - 2),
    ],
)
def test_skipped_epochs(first: int, printed: list[int], examples: list[int], count: int) -> None:
    from tf_verdict import skipped

    assert skipped(first, printed) == (examples, count)


@pytest.mark.parametrize(
    ("exit_record", "victim"),
    [
        ({"stopped_by": "runbook", "reason": "killed"}, True),
        ({"stopped_by": "operator", "reason": "anything"}, True),
        ({"stopped_by": "peer", "reason": "peer failed"}, True),
        # A user can set the stop's reason text: only the structured field decides.
        ({"stopped_by": None, "reason": "stopped by the operator"}, False),
        ({"stopped_by": "job-deadline", "reason": "job deadline of 5 s passed"}, False),
        ({"stopped_by": "controller", "reason": "lost the controller"}, False),
        # A record without the field (an older supervisor) is no victim: text never decides.
        ({"reason": "stopped by signal SIGTERM"}, False),
        ({"reason": "exited"}, False),
    ],
)
def test_victims_are_told_from_culprits_by_the_structured_field(
    exit_record: dict[str, Any], victim: bool
) -> None:
    assert stopped_as_victim(exit_record) is victim


def test_log_lines_in_the_failure_reason_carry_no_terminal_escapes(tmp_path: Path) -> None:
    from tf_verdict import failure_reason

    worker = {
        "index": 1,
        "host": "w1",
        "exit": {"returncode": 1, "reason": "exited", "finished_at": 1.0},
        "log": "Traceback\n\x1b[2J\x1b]0;pwned\x07boom\n",
    }
    reason = failure_reason([worker], [], {})
    assert reason is not None and "\x1b" not in reason and "\x07" not in reason
    assert "\\x1b[2J\\x1b]0;pwned\\x07boom" in reason


@pytest.mark.parametrize("stop_reason", ["stopped by the runbook after another worker failed", "maintenance", ""])
def test_the_culprit_is_told_by_stopped_by_whatever_the_stop_reason_says(stop_reason: str) -> None:
    """tf_stop_reason / tf_attempts_stop_reason are texts a user sets: the victim is the
    worker whose exit record says stopped_by runbook, the culprit the one that failed by
    itself, even when its own reason reads like a stop and it finished first."""
    from tf_verdict import failure_reason

    culprit = {"index": 1, "host": "w1", "log": "boom\n",
               "exit": {"returncode": 1, "reason": "stopped by the operator", "stopped_by": None, "finished_at": 2.0}}
    victim = {"index": 0, "host": "w0", "log": "",
              "exit": {"returncode": 143, "reason": stop_reason, "stopped_by": "runbook", "finished_at": 1.0}}
    reason = failure_reason([victim, culprit], [], {})
    # The culprit's cause leads (issue 23, point 2): derived from the record, which has none.
    assert reason is not None and reason.startswith("worker 1 on host w1 failed first: job-error: exit status 1")


# --- the controller action of the same name (issue 13) --------------------------------


def run_verdict_action(monkeypatch: pytest.MonkeyPatch, check_mode: bool, **args: Any) -> dict[str, Any]:
    """plugins/action/tf_verdict.py's run(), as Ansible calls it on the controller."""
    from types import SimpleNamespace

    from ansible.plugins.action import ActionBase
    from ansible_collections.tf_runbook.multiworker.plugins.action import tf_verdict as action

    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    monkeypatch.setattr(ActionBase, "validate_argument_spec",
                        lambda self, argument_spec=None, **kw: (None, {"marker": MARKER, "expected_size": 0,
                                                                        "context": {}, **args}))
    plugin = object.__new__(action.ActionModule)
    plugin._task = SimpleNamespace(args=args, check_mode=check_mode)
    return plugin.run(task_vars={})


def test_the_action_judges_as_the_module_does_without_a_module_process(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], good_run: Path, tmp_path: Path) -> None:
    twin = tmp_path / "twin" / good_run.name
    twin.parent.mkdir()
    import shutil

    shutil.copytree(good_run, twin)
    by_module = run_module(monkeypatch, capsys, run_dir=str(good_run), run_id=good_run.name, marker=MARKER)
    by_action = run_verdict_action(monkeypatch, False, run_dir=str(twin), run_id=twin.name)
    assert by_action["status"] == by_module["status"] == "succeeded"
    assert by_action["table"] == by_module["table"]
    assert by_action["changed"] is True
    assert json.loads((twin / "summary.json").read_text())["status"] == "succeeded"


def test_the_action_writes_nothing_in_check_mode(monkeypatch: pytest.MonkeyPatch, good_run: Path) -> None:
    result = run_verdict_action(monkeypatch, True, run_dir=str(good_run), run_id=good_run.name)
    assert result["changed"] is False and result["status"] == "succeeded"
    assert not (good_run / "summary.json").exists()
