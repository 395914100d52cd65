"""logs.yml, status.yml and stop.yml on a run, on localhost (inventory/local: two workers),
and the stall watchdog (issue 23 points 1 and 8, issue 25's output points).

- A detached run whose jobs print a few lines, then sleep: logs.yml shows each worker's
  last lines with its prefix, escaped, while it runs (changing no file's modification
  time on the host, the heartbeat's included) and after stop.yml ended it; status.yml
  shows a Keras epoch header as progress; stop.yml says which workers it stopped.
- On two namespace hosts (node0, node1), a TensorFlow job whose worker 1 hangs in its own
  function after epoch 1 while worker 0 waits in TensorFlow's all-reduce, with
  tf_stall_timeout 20: the run ends within 120 s of the hang, names the stall with worker 1
  (and not worker 0) as its culprit, collects each worker's stacks (worker 1's name the
  stuck function, worker 0's show TensorFlow's frames), and leaves no process. The test
  prints the hang-to-exit time (pytest -s: the TIMING line), for docs/BENCHMARKS.md.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any, Callable

import helpers
from faults import remote_json, run_processes, start_playbook, wait_for_log, wait_until
from nshosts import NamespaceHosts
from test_multihost import Runbook

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



# -- the stall watchdog, on two namespace hosts that share no filesystem -------------------

HANG_JOB = Path(__file__).resolve().parent / "jobs" / "hang_job.py"
REMOTE_RUN = "~/tf-runbook/runs/hang"
# A frame of TensorFlow's Python code as faulthandler writes it.
TENSORFLOW_FRAME = re.compile(r'^\s+File "[^"]*/tensorflow/[^"]*", line \d+ in ', re.M)


def alive(hosts: NamespaceHosts, host: int, pid: int) -> bool:
    """Whether ``pid`` runs on ``host`` (a zombie does not count: nothing reaps in there)."""
    rc, out, _ = hosts.run(host, f"awk '/^State:/ {{print $2}}' /proc/{pid}/status 2>/dev/null")
    return rc == 0 and out.strip() not in ("", "Z")


def host_pids(hosts: NamespaceHosts) -> dict[int, list[int]]:
    """The job's, the supervisor's and the keeper's pid of each host's worker (host i runs
    worker i), from its state.json."""
    pids: dict[int, list[int]] = {}
    for host in (0, 1):
        state = remote_json(hosts, host, f"{REMOTE_RUN}/worker-{host}/state.json") or {}
        pids[host] = [state[key] for key in ("pid", "supervisor_pid", "keeper_pid") if state.get(key)]
    return pids


def test_a_worker_hung_in_its_own_code_is_a_stall_named_with_its_culprit(
    make_ns_hosts: Callable[..., NamespaceHosts], tmp_path: Path, worker_python: str
) -> None:
    """Issue 23 (a), on node0 and node1: worker 1 hangs in its own function after epoch 1,
    worker 0 waits in TensorFlow's all-reduce, tf_stall_timeout 20. The run ends within
    120 s of the hang, names the stall with worker 1 as its culprit (stuck in its own
    function) and never worker 0; each worker's stacks.txt is collected (worker 1's names
    the stuck function, worker 0's shows TensorFlow's frames); no process is left."""
    hosts = make_ns_hosts(count=2)
    groupvars = {"tf_worker_python": worker_python, "tf_startup_timeout": 120, "tf_job_timeout": 900,
                 "tf_wait_poll_interval": 2, "tf_stall_timeout": 20, "tf_train_script": str(HANG_JOB)}
    book = Runbook(hosts, tmp_path, port=2472, groupvars=groupvars)
    proc = start_playbook(book.inventory, book.runs, {"tf_run_id": "hang"})
    pids: dict[int, list[int]] = {}
    try:
        wait_for_log(hosts, 1, f"{REMOTE_RUN}/worker-1/worker.log", "worker=1 epoch=1/3")
        marker = f"{REMOTE_RUN}/worker-1/hang-started"
        wait_until(lambda: book.exists(1, marker), 60, "worker 1 reached its hang")
        mtime = f"import os; print(os.stat(os.path.expanduser('{marker}')).st_mtime)"
        rc, hung_at, _ = hosts.run(1, f'python3 -c "{mtime}"')
        assert rc == 0, hung_at
        pids = host_pids(hosts)
        assert all(pids.values()), pids
        out, _ = proc.communicate(timeout=300)
        ended = time.time()
        # Checked before any kill of ours: the runbook itself left nothing running.
        left = {host: [pid for pid in pids[host] if alive(hosts, host, pid)] for host in (0, 1)}
        strays = {host: run_processes(hosts, host, "hang") for host in (0, 1)}
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for host, numbers in pids.items():  # safety net only: the hosts go when the test ends
            if numbers:
                hosts.run(host, f"kill -9 {' '.join(map(str, numbers))} 2>/dev/null")
    (tmp_path / "train.out").write_text(out)
    hang_to_exit = ended - float(hung_at)
    print(f"\nTIMING stall: the run ended {hang_to_exit:.1f} s after worker 1 hung (tf_stall_timeout 20 s)")
    assert left == {0: [], 1: []}, f"processes of the run left (host: pids): {left}"
    assert strays == {0: [], 1: []}, strays
    assert hang_to_exit < 240, f"the run ended {hang_to_exit:.0f} s after the hang"
    assert proc.returncode != 0
    assert "the run is stalled: no worker printed a progress line for" in out, out[-5000:]

    summary = book.summary("hang")
    assert summary["status"] == "failed"
    # The culprit: worker 1, in its own function; worker 0 only waited in TensorFlow.
    assert summary["stall"]["culprits"] == [1], summary["stall"]
    reason = summary["reason"]
    assert re.match(r"stalled: worker 1 on host node1 stuck in load_batch_that_deadlocks \(hang_job\.py:\d+\)",
                    reason), reason
    assert "worker 0" not in reason, reason
    assert f"reason: {reason}" in out, out[-5000:]
    stacks = {w["index"]: w["stacks"] for w in summary["workers"]}
    assert stacks[1]["where"] == "own-code", stacks
    assert re.match(r"hang_job\.py:\d+ in load_batch_that_deadlocks$", stacks[1]["frames"][-1]), stacks
    assert stacks[0]["where"] == "tensorflow", stacks

    # Each worker's stacks, collected from its own host.
    texts = {i: (book.runs / "hang" / f"node{i}" / f"worker-{i}" / "stacks.txt").read_text() for i in (0, 1)}
    assert "load_batch_that_deadlocks" in texts[1], texts[1][-3000:]
    assert TENSORFLOW_FRAME.search(texts[0]), texts[0][-3000:]


# -- a silent epoch that computes is no stall (issue 37 A) ---------------------------------

SILENT_EPOCH_JOB = Path(__file__).resolve().parent / "jobs" / "silent_epoch_job.py"


def test_a_silent_epoch_three_times_the_stall_timeout_that_computes_is_no_stall(tmp_path: Path) -> None:
    """Issue 37 (A), on localhost's two workers: after its first progress line each job
    computes for 30 s without printing anything (a Keras verbose=2 epoch), with
    tf_stall_timeout 10 and a restart allowed for a stall. The wait sees the jobs' CPU use
    as progress: the run succeeds in its first attempt, and no stall is reported.

    The host is loaded past its CPUs meanwhile (CI once failed this test under the load of
    the namespace hosts' suite beside it): each job pins itself to one CPU with 24 other
    processes spinning there, and gets under BUSY_CPU_SHARE of it; its computing thread
    stays runnable, which the wait counts as busy."""
    base = settings(tmp_path, tf_run_id="silent")
    extra = {**base, "tf_train_script": str(SILENT_EPOCH_JOB), "tf_train_args": ["30", "24"], "tf_stall_timeout": 10,
             "tf_wait_poll_interval": 2, "tf_restart_attempts": 1, "tf_job_timeout": 300}
    started = time.monotonic()
    result = play("train.yml", extra)
    took = time.monotonic() - started
    run = tmp_path / "host" / "runs" / "silent"
    for pid in run_pids(run):
        helpers.kill_quietly(pid)
    for pids in run.glob("**/contenders.pids"):
        for pid in pids.read_text().split():
            helpers.kill_quietly(int(pid))
    out = result.stdout
    assert result.returncode == 0, out[-5000:] + result.stderr[-2000:]
    assert "the run is stalled" not in out, out[-5000:]
    summary = json.loads((tmp_path / "runs" / "silent" / "summary.json").read_text())
    assert summary["status"] == "succeeded", summary.get("reason")
    assert [a["attempt"] for a in summary["attempts"]] == [0], summary["attempts"]
    # Both workers really computed through the silent epoch, in the first attempt.
    for index in (0, 1):
        log = (run / f"worker-{index}" / "worker.log").read_text()
        assert f"worker={index} epoch=2/2" in log, log[-2000:]
        share = re.search(rf"worker={index} busy_cpu_share=([0-9.]+)", log)
        # Under the 5 % of a core (tf_activity.BUSY_CPU_SHARE) that CPU use alone counts as busy.
        assert share and float(share.group(1)) < 0.05, log[-2000:]
    assert took > 30, took
