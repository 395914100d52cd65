"""logs.yml, status.yml and stop.yml on a run, and the stall watchdog (issue 23 points 1
and 8, issue 25's output points), on localhost (inventory/local: two workers).

- A detached run whose jobs print a few lines, then sleep: logs.yml shows each worker's
  last lines with its prefix, escaped, while it runs (changing no file's modification
  time on the host, the heartbeat's included) and after stop.yml ended it; status.yml
  shows a Keras epoch header as progress; stop.yml says which workers it stopped.
- A TensorFlow job whose worker 1 hangs in its own function after epoch 1, with
  tf_stall_timeout 20: the run ends within 120 s of the hang, names the stall, keeps the
  stuck function's name in worker 1's collected files, and leaves no process.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import helpers

REPO = Path(__file__).resolve().parents[2]

# Prints the startup line, a Keras epoch header, a line with an escape sequence and a
# contract epoch line, then sleeps (silent: no file of the run changes by itself).
CHATTY_JOB = r"""
import json, os, sys, time
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
print(f"worker={index} cluster_workers=2 replicas=2 global_batch=32", flush=True)
print("Epoch 1/3", flush=True)
print(f"worker={index} says \x1b[31mred\x1b[0m", flush=True)
for n in range(60):
    print(f"worker={index} filler {n}", flush=True)
print(f"Epoch 2/3 of worker {index}", flush=True)
open("chatty-ready", "w").close()
time.sleep(600)
"""

# Worker 1 hangs in its own function after epoch 1 (a data loader that deadlocks);
# worker 0 then blocks in TensorFlow's all-reduce of epoch 2.
HANGING_JOB = r"""
import json, os, threading
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf

index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
strategy = tf.distribute.MultiWorkerMirroredStrategy()
print(f"worker={index} cluster_workers={strategy.num_replicas_in_sync} replicas={strategy.num_replicas_in_sync}",
      flush=True)


def load_batch_that_deadlocks():
    threading.Event().wait()


with strategy.scope():
    v = tf.Variable(0.0)


@tf.function
def step():
    def replica():
        return tf.distribute.get_replica_context().all_reduce("sum", tf.constant(1.0))
    return strategy.run(replica)


for epoch in range(1, 4):
    if epoch == 2 and index == 1:
        open("hang-started", "w").close()
        load_batch_that_deadlocks()
    total = step()
    print(f"worker={index} epoch={epoch}/3 loss={1.0 / epoch:.4f}", flush=True)
print(f"worker={index} training_complete", flush=True)
"""


def settings(tmp_path: Path, **more: Any) -> dict[str, Any]:
    return {"tf_worker_base_dir": str(tmp_path / "host"), "tf_runs_dir": str(tmp_path / "runs"), **more}


def play(playbook: str, extra: dict[str, Any], timeout: float = 600) -> Any:
    return helpers.run_playbook(playbook, "--limit", "localhost", extra=extra, timeout=timeout)


def wait_for(condition: Any, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, f"{what}: not within {timeout} s"
        time.sleep(0.5)


def mtimes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in sorted(root.rglob("*")) if p.is_file()}


def run_pids(run: Path) -> list[int]:
    pids = []
    for state_path in run.glob("**/worker-*/state.json"):
        state = json.loads(state_path.read_text())
        pids += [state[key] for key in ("pid", "supervisor_pid", "keeper_pid") if state.get(key)]
    return pids


def test_logs_status_and_stop_of_a_running_and_an_ended_run(tmp_path: Path) -> None:
    job = tmp_path / "chatty.py"
    job.write_text(CHATTY_JOB)
    base = settings(tmp_path, tf_run_id="chatty")
    result = play("train.yml", {**base, "tf_train_script": str(job), "tf_detach": True, "tf_job_timeout": 300})
    run = tmp_path / "host" / "runs" / "chatty"
    pids = run_pids(run)
    try:
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
        # The detach message names the inventory used (ansible.cfg's here), not <inventory>.
        inventory = REPO / "inventory" / "local"
        assert f"playbooks/logs.yml   -i {inventory} -e tf_run_id=chatty" in result.stdout, result.stdout[-3000:]
        wait_for(lambda: all((run / f"worker-{i}" / "chatty-ready").exists() for i in (0, 1)), 60, "the jobs printed")
        before = mtimes(run)
        assert "controller.heartbeat" in before
        time.sleep(1.1)

        logs = play("playbooks/logs.yml", {**base, "tf_logs_lines": 3})
        assert logs.returncode == 0, logs.stdout[-3000:]
        for index in (0, 1):
            assert f"[{index} localhost] (running; 3 last line(s) of its log)" in logs.stdout, logs.stdout[-3000:]
            assert f"[{index} localhost] worker={index} filler 59" in logs.stdout
            assert f"[{index} localhost] Epoch 2/3 of worker {index}" in logs.stdout
        # Three lines each: the earlier ones are not shown.
        assert "filler 57" not in logs.stdout
        # Nothing on the host changed, the heartbeat included.
        assert mtimes(run) == before

        logs = play("playbooks/logs.yml", {**base, "tf_logs_workers": "1", "tf_logs_lines": 70})
        assert logs.returncode == 0, logs.stdout[-3000:]
        assert "[1 localhost] worker=1 says \\x1b[31mred\\x1b[0m" in logs.stdout
        assert "\x1b[31m" not in logs.stdout
        assert "[0 localhost]" not in logs.stdout
        assert mtimes(run) == before

        status = play("playbooks/status.yml", base)
        assert status.returncode == 0, status.stdout[-3000:]
        assert "localhost worker-1: running  Epoch 2/3 of worker 1" in status.stdout, status.stdout[-3000:]

        unknown = play("playbooks/logs.yml", settings(tmp_path, tf_run_id="nosuch"))
        assert unknown.returncode != 0
        assert f"host localhost: no worker of run nosuch in {tmp_path / 'host' / 'runs' / 'nosuch'}" in unknown.stdout
        missing = play("playbooks/logs.yml", {**base, "tf_logs_workers": "0,5"})
        assert missing.returncode != 0
        assert "run chatty has no worker 5 in its latest attempt (it has 0, 1)" in missing.stdout, missing.stdout[-2000:]

        stopped = play("playbooks/stop.yml", base)
        assert stopped.returncode == 0, stopped.stdout[-3000:]
        assert "localhost: stopped worker-0, worker-1" in stopped.stdout, stopped.stdout[-3000:]
        assert not any(helpers.pid_running(pid) for pid in pids)
        again = play("playbooks/stop.yml", base)
        assert "localhost: nothing to stop (no live process of run chatty here)" in again.stdout, again.stdout[-2000:]
    finally:
        for pid in pids:
            helpers.kill_quietly(pid)

    ended = mtimes(run)
    logs = play("playbooks/logs.yml", {**base, "tf_logs_lines": 2})
    assert logs.returncode == 0, logs.stdout[-3000:]
    for index in (0, 1):
        assert f"[{index} localhost] (FAILED rc=" in logs.stdout, logs.stdout[-3000:]
        assert f"[{index} localhost] Epoch 2/3 of worker {index}" in logs.stdout
    assert mtimes(run) == ended


def test_a_worker_hung_in_its_own_code_is_a_stall(tmp_path: Path) -> None:
    """Issue 23 (a): ends within 120 s of the hang, names the stall, keeps worker 1's
    stack (the stuck function's name in its collected files), leaves no process."""
    job = tmp_path / "hanging.py"
    job.write_text(HANGING_JOB)
    base = settings(tmp_path, tf_run_id="hang")
    proc = helpers.start_playbook(
        "train.yml", "--limit", "localhost",
        extra={**base, "tf_train_script": str(job), "tf_stall_timeout": 20, "tf_job_timeout": 900},
    )  # fmt: skip
    run = tmp_path / "host" / "runs" / "hang"
    hang = run / "worker-1" / "hang-started"
    try:
        wait_for(lambda: hang.exists() or proc.poll() is not None, 300, "worker 1 reached its hang")
        assert hang.exists(), (proc.communicate()[0] or "")[-4000:]
        hung_at = hang.stat().st_mtime
        out, _ = proc.communicate(timeout=300)
        ended = time.time()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        pids = run_pids(run)
        for pid in pids:
            helpers.kill_quietly(pid)
    print(f"\nTIMING stall: the run ended {ended - hung_at:.1f} s after worker 1 hung (tf_stall_timeout 20 s)")
    assert ended - hung_at < 120, f"the run ended {ended - hung_at:.0f} s after the hang"
    assert proc.returncode != 0
    assert "the run is stalled: no worker printed a progress line for" in out, out[-5000:]
    assert not any(helpers.pid_running(pid) for pid in pids), "a process of the run is left"
    summary = json.loads((tmp_path / "runs" / "hang" / "summary.json").read_text())
    assert summary["status"] == "failed"
    assert "stall" in json.dumps(summary), summary.get("reason")
    collected = tmp_path / "runs" / "hang" / "localhost" / "worker-1"
    texts = [p.read_text(errors="replace") for p in collected.rglob("*") if p.is_file()]
    assert any("load_batch_that_deadlocks" in text for text in texts), sorted(os.listdir(collected))
