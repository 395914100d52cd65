"""The smoke test as a user runs it: `ansible-playbook train.yml --limit localhost`.

These runs train for real (two TensorFlow workers on this machine) or use tiny fake jobs
where only the runbook's behaviour is under test. Each test keeps its runs in its own
temporary directories so that it can check exactly what a run left behind.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import browser  # noqa: E402

import helpers

REPO = Path(__file__).resolve().parents[2]


def run_playbook(playbook: str, *args: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    return helpers.run_playbook(playbook, "--limit", "localhost", *args, timeout=timeout)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def dirs(tmp_path: Path) -> dict[str, Path]:
    return {"base": tmp_path / "host", "runs": tmp_path / "runs"}


def extra(dirs: dict[str, Path], **values: object) -> list[str]:
    data = {"tf_worker_base_dir": str(dirs["base"]), "tf_runs_dir": str(dirs["runs"]), **values}
    return ["-e", json.dumps(data)]


def epoch_lines(log: str) -> list[str]:
    """The epoch lines of a log without their `worker=I` prefix."""
    return [line.split(" ", 1)[1] for line in log.splitlines() if " epoch=" in line]


def test_smoke_run_trains_two_workers_and_proves_it(dirs: dict[str, Path]) -> None:
    result = run_playbook("train.yml", *extra(dirs, tf_run_id="smoke-1"))
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "run smoke-1: SUCCEEDED" in result.stdout
    # Progress lines while waiting, not only "retrying": one per worker, or one for the
    # workers of the host that agree (epoch, state, metrics).
    assert re.search(r"localhost (worker-0|workers 0,1): (running|finished) ", result.stdout), result.stdout[-4000:]

    summary = json.loads((dirs["runs"] / "smoke-1" / "summary.json").read_text())
    assert summary["status"] == "succeeded"
    assert summary["cluster"]["worker"] == ["127.0.0.1:2222", "127.0.0.1:2223"]
    assert [(w["index"], w["port"], w["exit_status"]) for w in summary["workers"]] == [
        (0, 2222, 0),
        (1, 2223, 0),
    ]
    assert {c["name"] for c in summary["checks"] if c["ok"]} >= {
        "exit_status", "metrics_agree", "chief_marker", "cluster_seen", "training_complete",
    }

    assert_report_drawn(dirs["runs"] / "smoke-1", summary, dirs["runs"].parent)

    # Independently of the verifier: both logs hold the same epoch metrics.
    fetched = dirs["runs"] / "smoke-1" / "localhost"
    logs = [(fetched / f"worker-{i}" / "worker.log").read_text() for i in (0, 1)]
    assert len(epoch_lines(logs[0])) == 3
    assert epoch_lines(logs[0]) == epoch_lines(logs[1])

    # On the host: only the chief's directory holds the marker; no process is left.
    host_run = dirs["base"] / "runs" / "smoke-1"
    assert (host_run / "worker-0" / "multiworker-complete.txt").is_file()
    assert not (host_run / "worker-1" / "multiworker-complete.txt").exists()
    for index in (0, 1):
        state = json.loads((host_run / f"worker-{index}" / "state.json").read_text())
        assert not pid_alive(state["pid"]) and not pid_alive(state["supervisor_pid"])
        # One host starts its slots in one module run: not armed, no go.
        assert state["armed_at"] is None and state["started_at"] > 0
        assert oct((host_run / f"worker-{index}").stat().st_mode & 0o777) == "0o700"

    # collect.yml runs alone on an earlier run and reaches the same verdict, and report.
    (dirs["runs"] / "smoke-1" / "report.html").unlink()
    again = run_playbook("playbooks/collect.yml", *extra(dirs, tf_run_id="smoke-1"))
    assert again.returncode == 0, again.stdout[-3000:]
    assert json.loads((dirs["runs"] / "smoke-1" / "summary.json").read_text())["status"] == "succeeded"
    assert f"Report: {dirs['runs'] / 'smoke-1' / 'report.html'}" in again.stdout
    assert 'id="status">SUCCEEDED<' in (dirs["runs"] / "smoke-1" / "report.html").read_text()

    # A run id is used once: a second launch under it is refused and changes nothing.
    before = helpers.tree_digest(dirs["base"]) | helpers.tree_digest(dirs["runs"])
    reused = run_playbook("train.yml", *extra(dirs, tf_run_id="smoke-1"))
    assert reused.returncode != 0
    assert "already launched" in reused.stdout
    assert helpers.tree_digest(dirs["base"]) | helpers.tree_digest(dirs["runs"]) == before

    # collect.yml for an id no host holds and this controller never launched (a typo) is
    # refused, nothing written: judged, it would get a failed summary and count as used.
    typo = run_playbook("playbooks/collect.yml", *extra(dirs, tf_run_id="smoke-l"))
    assert typo.returncode != 0
    assert "Run smoke-l: nothing to judge: no host gave a file of this run and this controller never launched it" in (
        typo.stdout), typo.stdout[-3000:]
    assert not (dirs["runs"] / "smoke-l").exists()
    assert helpers.tree_digest(dirs["base"]) | helpers.tree_digest(dirs["runs"]) == before
    # stop.yml with that typo stops nothing and stays a success (a stop is safe to
    # repeat), but says that no host holds the run, where the real id would not.
    stop_typo = run_playbook("playbooks/stop.yml", *extra(dirs, tf_run_id="smoke-l"))
    assert stop_typo.returncode == 0, stop_typo.stdout[-3000:]
    assert "Run smoke-l: no host of this play holds a worker of this run, so nothing was stopped" in (
        stop_typo.stdout), stop_typo.stdout[-3000:]
    stop_real = run_playbook("playbooks/stop.yml", *extra(dirs, tf_run_id="smoke-1"))
    assert stop_real.returncode == 0 and "no host of this play holds" not in stop_real.stdout, stop_real.stdout[-3000:]
    assert helpers.tree_digest(dirs["base"]) | helpers.tree_digest(dirs["runs"]) == before


def assert_report_drawn(run: Path, summary: dict[str, Any], tmp: Path) -> None:
    """The run's report.html, opened in headless chromium: every chart and the timeline
    were drawn with non-zero sizes, one curve and one timeline row per worker; the
    screenshot is kept under .artifacts/ (tests/integration/browser.py)."""
    report = run / "report.html"
    assert report.is_file() and report.stat().st_size < 2 * 1024 * 1024
    assert not re.search(r"https?:|url\(|@import|<script|<link", report.read_text(), re.I)
    browser.ensure_chromium()
    drawn = browser.measure(report, tmp)
    size = summary["cluster"]["size"]
    metrics = sorted(next(iter(summary["metrics"].values())))
    assert sorted(c["metric"] for c in drawn["charts"]) == metrics, drawn
    for chart in drawn["charts"]:
        assert chart["width"] > 300 and chart["height"] > 100, chart
        assert [s["worker"] for s in chart["series"]] == [str(i) for i in range(size)], chart
        for series in chart["series"]:
            assert series["points"] == len(summary["metrics"]) and series["width"] > 100, chart
        assert chart["disagreements"] == 0
    [timeline] = drawn["timelines"]
    assert timeline["width"] > 600 and timeline["height"] > 40, timeline
    assert [r["worker"] for r in timeline["rows"]] == [str(i) for i in range(size)]
    [attempt] = summary["timeline"]
    for row in timeline["rows"]:
        assert row["status"] == "row ok", row
        for part in ("bar", "epochs", "join", "exit"):
            assert row[part] and row[part]["height"] > 0, (part, row)
            # Epoch marks are vertical strokes: a worker whose epochs all ended within one
            # tick of the line clock (a fast machine) has them on one line, zero wide.
            times = set(attempt["workers"][int(row["worker"])]["epoch_at"].values())
            if part != "epochs" or len(times) > 1:
                assert row[part]["width"] > 0, (part, row)
        assert row["bar"]["width"] > 100, row
    shot = browser.screenshot(report, browser.ARTIFACTS / f"report-{summary['run_id']}.png",
                              min(drawn["page"]["height"], 4000))
    print(f"report screenshot: {shot}")


def test_forks_one_and_two_runs_in_a_row_keep_both_results(dirs: dict[str, Path]) -> None:
    for _ in range(2):
        result = run_playbook("train.yml", "--forks", "1", *extra(dirs))
        assert result.returncode == 0, result.stdout[-4000:]
    runs = sorted(p for p in dirs["runs"].iterdir() if p.is_dir())
    assert len(runs) == 2, runs
    for run in runs:
        summary = json.loads((run / "summary.json").read_text())
        assert summary["status"] == "succeeded" and summary["run_id"] == run.name
        assert (dirs["base"] / "runs" / run.name / "worker-0" / "worker.log").is_file()


def test_a_relative_script_and_project_directory_are_read_from_where_ansible_playbook_runs(
    dirs: dict[str, Path],
) -> None:
    """Paths relative to the directory ansible-playbook runs in (the clone, here): the
    check and the deploy read the same file. The deploy's lookup searched the roles' and
    plays' directories, and a module packing the project ran in the playbook's directory."""
    script = run_playbook("train.yml", *extra(dirs, tf_run_id="relative-script", tf_train_script="molecule/job.py"))
    assert script.returncode == 0, script.stdout[-4000:]
    project = run_playbook("train.yml", *extra(dirs, tf_run_id="relative-project", tf_train_dir="molecule",
                                              tf_train_script="job.py"))
    assert project.returncode == 0, project.stdout[-4000:]
    for run in ("relative-script", "relative-project"):
        assert json.loads((dirs["runs"] / run / "summary.json").read_text())["status"] == "succeeded"


@pytest.mark.parametrize("bad", ["../escape", "a/b", "x y", ".hidden"])
def test_unsafe_run_id_is_refused_before_anything_is_created(dirs: dict[str, Path], bad: str) -> None:
    result = run_playbook("train.yml", *extra(dirs, tf_run_id=bad))
    assert result.returncode != 0
    assert repr(bad) in result.stdout, result.stdout[-2000:]
    assert not dirs["base"].exists() and not dirs["runs"].exists()


FAKE_JOB = """
import json, os, sys, time
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
size = len(json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"])
mode = sys.argv[1]
print(f"worker={index} cluster_workers={size} replicas={size} global_batch=32", flush=True)
if mode == "disagree":
    print(f"worker={index} epoch=1 loss={0.5 + index:.4f} binary_accuracy=0.5000", flush=True)
elif mode == "crash" and index == 1:
    sys.exit(3)
elif mode in ("crash", "sleep"):
    time.sleep(600)
elif mode == "sleep-with-child":
    import subprocess
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    open("child.pid", "w").write(str(child.pid))
    time.sleep(600)
if index == 0:
    open("multiworker-complete.txt", "w").write("done\\n")
print(f"worker={index} training_complete", flush=True)
"""


def write_fake_job(tmp_path: Path) -> Path:
    script = tmp_path / "fake_job.py"
    script.write_text(FAKE_JOB)
    return script


def test_workers_that_disagree_fail_the_verdict(dirs: dict[str, Path], tmp_path: Path) -> None:
    job = write_fake_job(tmp_path)
    result = run_playbook(
        "train.yml", *extra(dirs, tf_run_id="disagree", tf_train_script=str(job), tf_train_args=["disagree"])
    )
    assert result.returncode != 0
    assert "metrics_agree: epoch 1 loss: 0.5000 from worker(s) [0], 1.5000 from worker(s) [1]" in result.stdout
    summary = json.loads((dirs["runs"] / "disagree" / "summary.json").read_text())
    assert summary["status"] == "failed"
    report = (dirs["runs"] / "disagree" / "report.html").read_text()
    assert "epoch 1: 0.5000 on worker 0; 1.5000 on worker 1" in report
    assert report.count('class="disagree"') == 2


def test_a_crashed_worker_stops_the_others_and_fails_the_run(dirs: dict[str, Path], tmp_path: Path) -> None:
    job = write_fake_job(tmp_path)
    started = time.monotonic()
    result = run_playbook(
        "train.yml", *extra(dirs, tf_run_id="crash", tf_train_script=str(job), tf_train_args=["crash"])
    )
    elapsed = time.monotonic() - started
    assert result.returncode != 0
    assert "worker 1 (localhost): exit status 3" in result.stdout
    # The culprit's cause leads the failure message, then its exit status (issue 23, point 2).
    assert re.search(r"worker 1 on host localhost failed first: job-error[^\n]*exit status 3 ", result.stdout)
    # Worker 0 slept for 600 s: the runbook stopped it instead of waiting.
    assert elapsed < 400, elapsed
    state = json.loads((dirs["base"] / "runs" / "crash" / "worker-0" / "state.json").read_text())
    assert not pid_alive(state["pid"]) and not pid_alive(state["supervisor_pid"])
    summary = json.loads((dirs["runs"] / "crash" / "summary.json").read_text())
    assert summary["status"] == "failed"
    assert summary["reason"].startswith("worker 1 on host localhost failed first")
    report = (dirs["runs"] / "crash" / "report.html").read_text()
    assert re.findall(r'<g class="row (\w+)" data-worker="(\d)"', report) == [("stopped", "0"), ("culprit", "1")]
    assert f"Report: {dirs['runs'] / 'crash' / 'report.html'}" in result.stdout
    assert (dirs["runs"] / "crash" / "localhost" / "worker-1" / "worker.log").is_file()


def children_of(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` now."""
    found = []
    for child in helpers.processes():
        stat = helpers.proc_stat(child)
        if stat is not None and stat[1][1] == str(pid):
            found.append(child)
    return found


def kill_if_still(pid: int, marker: bytes) -> None:
    """SIGKILL ``pid`` if its command line still holds ``marker``: a process this test
    started, not another that reused its pid."""
    try:
        ours = marker in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        ours = False
    if ours:
        helpers.kill_quietly(pid)


def wait_for_the_children(controller: subprocess.Popen[str], files: list[Path]) -> None:
    """Until every worker recorded its state and started its child (``files``), while the
    playbook still runs."""
    deadline = time.monotonic() + 120
    while not all(p.exists() and p.stat().st_size for p in files):
        assert time.monotonic() < deadline, "the workers never started their children"
        assert controller.poll() is None, "the playbook ended early"
        time.sleep(0.5)


def test_stop_playbook_ends_a_run_the_controller_abandoned(dirs: dict[str, Path], tmp_path: Path) -> None:
    job = write_fake_job(tmp_path)
    # Each job starts a child, as a data loader or a launcher does (issue 24, point 24): the
    # stop must end the job's whole process group, not only the job.
    args = extra(dirs, tf_run_id="abandoned", tf_train_script=str(job), tf_train_args=["sleep-with-child"])
    controller = helpers.start_playbook("train.yml", "--limit", "localhost", *args, quiet=True)
    run = dirs["base"] / "runs" / "abandoned"
    states = [run / f"worker-{i}" / "state.json" for i in (0, 1)]
    child_pids = [run / f"worker-{i}" / "child.pid" for i in (0, 1)]
    wait_for_the_children(controller, states + child_pids)
    # The controller dies without cleaning up: the workers go on. Its own worker
    # processes are sessions of their own: the kill does not reach them (the finally
    # below does, by PID, should one outlive the test).
    ansible_workers = children_of(controller.pid)
    controller.kill()
    controller.wait()
    pids = [json.loads(p.read_text())[key] for p in states for key in ("pid", "supervisor_pid")]
    children = [int(p.read_text()) for p in child_pids]
    assert all(pid_alive(pid) for pid in pids)
    assert all(helpers.pid_running(pid) for pid in children)
    try:
        stopped = run_playbook("playbooks/stop.yml", *extra(dirs, tf_run_id="abandoned"))
        assert stopped.returncode == 0, stopped.stdout[-3000:]
        assert "changed: [localhost]" in stopped.stdout
        assert not any(pid_alive(pid) for pid in pids)
        # A zombie waiting for a slow reaper counts as gone: it runs nothing.
        left = [pid for pid in children if helpers.pid_running(pid)]
        assert left == [], f"the jobs' children {left} outlived the stop"
    finally:
        # Only the processes this test started, should they have outlived it, by PID.
        for pid in ansible_workers:
            kill_if_still(pid, b"ansible-playbook")
        for pid in children:
            kill_if_still(pid, b"time.sleep(600)")
    for index in (0, 1):
        record = json.loads((run / f"worker-{index}" / "exit.json").read_text())
        assert record["returncode"] != 0 and "stopped" in record["reason"]

    # Safe to run twice: nothing left to stop, nothing changes.
    before = helpers.tree_digest(run)
    again = run_playbook("playbooks/stop.yml", *extra(dirs, tf_run_id="abandoned"))
    assert again.returncode == 0 and "changed: [localhost]" not in again.stdout
    assert helpers.tree_digest(run) == before


def test_a_killed_controller_stops_renewing_the_heartbeat_and_the_run_stops(dirs: dict[str, Path], tmp_path: Path) -> None:
    """kill -9 of ansible-playbook (the OOM killer, an operator): its worker process that
    waits on the run is a session of its own and outlives it. It must stop renewing the
    controller heartbeat, so that the supervisors stop the run within
    tf_controller_timeout, and end itself."""
    job = write_fake_job(tmp_path)
    timeout = 10
    args = extra(dirs, tf_run_id="killed", tf_train_script=str(job), tf_train_args=["sleep-with-child"],
                 tf_controller_timeout=timeout, tf_wait_poll_interval=2)
    controller = helpers.start_playbook("train.yml", "--limit", "localhost", *args, quiet=True)
    run = dirs["base"] / "runs" / "killed"
    states = [run / f"worker-{i}" / "state.json" for i in (0, 1)]
    exits = [run / f"worker-{i}" / "exit.json" for i in (0, 1)]
    child_pids = [run / f"worker-{i}" / "child.pid" for i in (0, 1)]
    ansible_workers: list[int] = []
    children: list[int] = []
    try:
        wait_for_the_children(controller, states + child_pids)
        children = [int(p.read_text()) for p in child_pids]
        # The wait's module runs renew the heartbeat: once it is renewed, a worker process of
        # ansible-playbook waits on the run (a fixed sleep could end before, on a loaded machine).
        heartbeat = run / "controller.heartbeat"
        first = helpers.wait_until(lambda: heartbeat.exists() and heartbeat.stat().st_mtime_ns, 120, "the heartbeat",
                                   interval=0.2)
        helpers.wait_until(lambda: heartbeat.stat().st_mtime_ns != first and children_of(controller.pid), 120,
                           "ansible-playbook's wait renewing the heartbeat", interval=0.2)
        ansible_workers = children_of(controller.pid)
        assert ansible_workers, "no worker process of ansible-playbook was waiting on the run"
        controller.kill()
        controller.wait()
        killed_at = time.monotonic()
        bound = timeout + 60
        while not all(p.exists() for p in exits) or any(helpers.pid_running(pid) for pid in ansible_workers):
            assert time.monotonic() - killed_at < bound, (
                f"{bound} s after the kill: exit records {[p.exists() for p in exits]}, "
                f"ansible-playbook's workers still running {[pid for pid in ansible_workers if helpers.pid_running(pid)]}")
            time.sleep(0.5)
        for path in exits:
            record = json.loads(path.read_text())
            assert record["stopped_by"] == "controller", record
        assert not [pid for pid in children if helpers.pid_running(pid)]
    finally:
        if controller.poll() is None:
            controller.kill()
            controller.wait()
        # Only the processes this test started, should they have outlived it, by PID.
        for pid in ansible_workers:
            kill_if_still(pid, b"ansible-playbook")
        for pid in children:
            kill_if_still(pid, b"time.sleep(600)")


def uninterrupted_epochs(tmp: Path, train_args: list[str]) -> list[str]:
    """The epoch lines of the same job run once, by hand, with no interruption."""
    ports = [2290, 2291]
    cluster = [f"127.0.0.1:{port}" for port in ports]
    procs = []
    for index in range(2):
        workdir = tmp / f"reference-{index}"
        workdir.mkdir(parents=True)
        config = {"cluster": {"worker": cluster}, "task": {"type": "worker", "index": index}}
        procs.append(subprocess.Popen(
            [sys.executable, str(REPO / "files" / "multiworker_train.py"), *train_args],
            cwd=workdir, env=dict(os.environ, TF_CONFIG=json.dumps(config)),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        ))
    outputs = [proc.communicate(timeout=300)[0] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs[1][-2000:]
    assert epoch_lines(outputs[0]) == epoch_lines(outputs[1])
    return epoch_lines(outputs[0])


def test_a_restart_resumes_from_the_last_completed_epoch(dirs: dict[str, Path], tmp_path: Path) -> None:
    """tf_restart_attempts: 1 and a worker killed during epoch 2 of 4: the run completes,
    and the resumed epochs are exactly those of an uninterrupted run."""
    # An epoch of 200 steps takes seconds, which the 0.1 s poll below needs to kill the
    # worker inside epoch 2; the reference run trains the same steps again.
    train_args = ["--epochs=4", "--steps-per-epoch=200"]
    args = extra(dirs, tf_run_id="resume", tf_restart_attempts=1, tf_train_args=train_args)
    controller = helpers.start_playbook("train.yml", "--limit", "localhost", *args)
    first = dirs["base"] / "runs" / "resume" / "worker-1"
    deadline = time.monotonic() + 300
    # Killed once its backup of epoch 1 is complete, that is during epoch 2.
    while "checkpoint_saved=1" not in ((first / "worker.log").read_text() if (first / "worker.log").exists() else ""):
        assert time.monotonic() < deadline and controller.poll() is None, "epoch 1 was never backed up"
        time.sleep(0.1)
    os.kill(json.loads((first / "state.json").read_text())["pid"], 9)
    stdout, _ = controller.communicate(timeout=600)
    assert controller.returncode == 0, stdout[-4000:]
    assert "epoch=2 " not in (first / "worker.log").read_text(), "killed too late: epoch 2 had finished"

    summary = json.loads((dirs["runs"] / "resume" / "summary.json").read_text())
    assert summary["status"] == "succeeded" and summary["attempt"] == 1
    assert [a["ok"] for a in summary["attempts"]] == [False, True]
    killed = [w for w in summary["attempts"][0]["workers"] if w["index"] == 1][0]
    assert killed["exit_status"] == 137
    reference = uninterrupted_epochs(tmp_path, train_args)
    assert len(reference) == 4
    # The final attempt resumed after the epoch the first one completed, and trained on
    # to the same numbers as a run that was never interrupted.
    for index in (0, 1):
        log = (dirs["runs"] / "resume" / "localhost" / "retry-1" / f"worker-{index}" / "worker.log").read_text()
        resumed = [line for line in log.splitlines() if "resumed_from_epoch=" in line]
        assert resumed, log[-2000:]
        epoch = int(resumed[0].rsplit("=", 1)[1])
        assert 1 <= epoch < 4
        assert epoch_lines(log) == reference[epoch:], (epoch_lines(log), reference)
    report = (dirs["runs"] / "resume" / "report.html").read_text()
    assert f"attempt 1 resumed after epoch {epoch}</text>" in report
    assert re.findall(r'<g class="row (\w+)" data-worker="1"', report) == ["culprit", "ok"]
    # The first attempt's files are kept next to the final one's.
    assert (dirs["runs"] / "resume" / "localhost" / "worker-1" / "worker.log").is_file()
    assert (dirs["base"] / "runs" / "resume" / "retry-1" / "worker-0" / "multiworker-complete.txt").is_file()
