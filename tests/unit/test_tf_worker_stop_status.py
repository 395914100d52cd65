"""tf_worker_stop (finding and stopping a run's processes), and the reading of a worker's records
(module_utils/tf_worker_records.py) and the wait's window (tf_worker_watch.py, module tf_worker_wait)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import helpers
import pytest
from conftest import PLUGINS

from ansible_collections.tf_runbook.multiworker.plugins.module_utils import tf_worker_watch
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_worker_records import find_workers, worker_state
from tf_worker_stop import group_belongs, run_processes, stop_worker

TF_CONFIG = {"cluster": {"worker": ["127.0.0.1:2222"]}, "task": {"type": "worker", "index": 0}}
EPOCH = re.compile("epoch=")

# Ignores SIGTERM; one child ignores it too and stays in the worker dir, another child
# moves to ``elsewhere`` (same process group, other cwd) and dies on SIGTERM.
STUBBORN = """
import json, os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time\\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\\nwhile True: time.sleep(0.5)"])
stray = subprocess.Popen([sys.executable, "-c",
    "import os, signal, sys, time\\nsignal.signal(signal.SIGTERM, signal.SIG_DFL)\\n"
    "os.chdir(sys.argv[1])\\nopen('stray-ready', 'w').close()\\nwhile True: time.sleep(0.5)", sys.argv[1]])
with open("pids.json.tmp", "w") as handle:
    json.dump({"job": os.getpid(), "child": child.pid, "stray": stray.pid, "pgid": os.getpgrp()}, handle)
os.replace("pids.json.tmp", "pids.json")
while True:
    time.sleep(0.5)
"""


def wait_for(path: Path, timeout: float = 10.0) -> None:
    helpers.wait_until(path.exists, timeout, f"{path} to appear")


def wait_group_gone(pgid: int, timeout: float = 3.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.02)
    return False


class Launched:
    def __init__(self, proc: subprocess.Popen[bytes], worker_dir: Path, elsewhere: Path) -> None:
        self.proc = proc
        self.worker_dir = worker_dir
        self.elsewhere = elsewhere
        wait_for(worker_dir / "state.json")
        wait_for(worker_dir / "pids.json")
        wait_for(elsewhere / "stray-ready")
        self.state: dict[str, Any] = json.loads((worker_dir / "state.json").read_text())
        self.pids: dict[str, int] = json.loads((worker_dir / "pids.json").read_text())


@pytest.fixture
def launched(tmp_path: Path, supervisor_path: Path, reaper: None) -> Iterator[Launched]:
    """A supervisor (cwd: the worker dir, as the launch task runs it) on a stubborn job."""
    worker_dir = tmp_path / "runs" / "r1" / "worker-0"
    worker_dir.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (worker_dir / "tf_config.json").write_text(json.dumps(TF_CONFIG) + "\n")
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(STUBBORN))
    proc = subprocess.Popen(
        [sys.executable, str(supervisor_path), "--worker-dir", str(worker_dir), "--python", sys.executable,
         "--script", str(script), "--grace", "30", "--", str(elsewhere)],
        cwd=worker_dir, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        yield Launched(proc, worker_dir, elsewhere)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        try:
            os.killpg(json.loads((worker_dir / "state.json").read_text())["pgid"], signal.SIGKILL)
        except (OSError, ValueError, KeyError):
            pass


# --- run_processes -------------------------------------------------------------------


def test_run_processes_does_not_match_a_pid_whose_cwd_differs(tmp_path: Path) -> None:
    state = {"supervisor_pid": os.getpid(), "pid": os.getpid(), "pgid": None}
    assert run_processes(str(tmp_path), state) == []
    # The same record does match when the directory is this process's cwd.
    assert run_processes(os.getcwd(), state) == [os.getpid()]


def test_run_processes_does_not_match_a_group_whose_cwd_differs(tmp_path: Path) -> None:
    state = {"supervisor_pid": None, "pgid": os.getpgrp()}
    assert run_processes(str(tmp_path), state) == []
    assert os.getpid() in run_processes(os.getcwd(), state)


def test_run_processes_with_empty_state(tmp_path: Path) -> None:
    assert run_processes(os.getcwd(), {}) == []


def test_run_processes_finds_the_run_but_not_a_group_member_elsewhere(launched: Launched) -> None:
    found = run_processes(str(launched.worker_dir), launched.state)
    keeper = launched.state["keeper_pid"]
    assert found == sorted([launched.proc.pid, launched.pids["job"], launched.pids["child"], keeper])
    assert launched.pids["stray"] not in found
    # The stray one is in the group all the same: only its cwd keeps it out.
    assert os.getpgid(launched.pids["stray"]) == launched.state["pgid"]


def test_run_processes_follows_symlinked_worker_dir(launched: Launched, tmp_path: Path) -> None:
    link = tmp_path / "link-to-worker"
    link.symlink_to(launched.worker_dir)
    assert run_processes(str(link), launched.state) == run_processes(str(launched.worker_dir), launched.state)


# --- stop_worker ---------------------------------------------------------------------


def test_stop_worker_kills_the_supervisor_job_and_children(launched: Launched) -> None:
    expected = sorted(
        [launched.proc.pid, launched.pids["job"], launched.pids["child"], launched.pids["stray"],
         launched.state["keeper_pid"]]
    )  # fmt: skip
    start = time.monotonic()
    stopped = stop_worker(str(launched.worker_dir), 1.0)
    elapsed = time.monotonic() - start
    assert stopped == expected
    # The process of the group that moved to another directory was stopped too.
    with pytest.raises(ProcessLookupError):
        os.kill(launched.pids["stray"], 0)
    # The supervisor ended (wait raises TimeoutExpired otherwise) after recording the exit
    # itself: it outlived its job, and its own status is the record's, not a signal's.
    supervisor_status = launched.proc.wait(timeout=10)
    exit_ = json.loads((launched.worker_dir / "exit.json").read_text())
    assert exit_["reason"] == "stopped by signal SIGTERM"
    assert exit_["returncode"] == 137
    assert supervisor_status == exit_["returncode"]
    assert run_processes(str(launched.worker_dir), launched.state) == []
    assert wait_group_gone(launched.state["pgid"]), f"process group {launched.state['pgid']} survived"
    # SIGTERM was ignored: stop_worker had to wait for the grace period, not much more.
    assert 1.0 <= elapsed < 6, f"took {elapsed:.1f} s"
    # A second stop finds nothing left.
    assert stop_worker(str(launched.worker_dir), 1.0) == []


def test_stop_worker_without_state_does_nothing(tmp_path: Path) -> None:
    assert stop_worker(str(tmp_path), 0.1) == []


def test_stop_worker_leaves_a_reused_pid_alone(tmp_path: Path) -> None:
    """A state.json whose pids now belong to another process (here: this test)."""
    (tmp_path / "state.json").write_text(
        json.dumps({"supervisor_pid": os.getpid(), "pid": os.getpid(), "pgid": os.getpgrp()})
    )
    assert stop_worker(str(tmp_path), 0.1) == []


# --- tf_worker_records.worker_state ----------------------------------------------------


def entry(path: Path, index: int = 0, supervisor_pid: int | None = None, **extra: Any) -> dict[str, Any]:
    result: dict[str, Any] = {"index": str(index), "dir": str(path), **extra}
    if supervisor_pid is not None:
        result["supervisor_pid"] = supervisor_pid
    return result


def write_log(path: Path, epochs: int, trailing_noise: int = 2) -> list[str]:
    lines = ["2025-01-14 10:02:11: I tensorflow/core/util/port.cc:153] oneDNN", "worker=0 cluster_workers=2 replicas=2"]
    for epoch in range(1, epochs + 1):
        lines += [f"Epoch {epoch}/{epochs}", f"worker=0 epoch={epoch} loss=0.{9 - epoch} binary_accuracy=0.{epoch}"]
    lines += [f"INFO:tensorflow:noise {i}" for i in range(trailing_noise)]
    (path / "worker.log").write_text("\n".join(lines) + "\n\n")
    return lines


def test_status_starting_without_files(tmp_path: Path) -> None:
    info = worker_state(entry(tmp_path, 2), EPOCH, 8)
    assert info == {
        "index": 2,
        "dir": str(tmp_path),
        "pid": None,
        "state": "starting",
        "returncode": None,
        "reason": None,
        "stopped_by": None,
        "joined": False,
        "last_line": None,
        "progress_lines": 0,
        "log_tail": [],
        "log_hidden": 0,
        "cause": None,
        "stacks": None,
        "finished_at": None,
        "started_at": None,
        "progress": None,
        "evaluator": False,
        "required": False,
        "training_ended": False,
    }


def test_status_running_with_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # This test process plays the supervisor: alive, working in the worker directory.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "state.json").write_text(json.dumps({"pid": 4321, "pgid": 4321, "supervisor_pid": os.getpid()}))
    write_log(tmp_path, 1)
    info = worker_state(entry(tmp_path), EPOCH, 8)
    assert info["state"] == "running"
    assert info["pid"] == 4321
    assert info["returncode"] is None
    assert info["last_line"] == "worker=0 epoch=1 loss=0.8 binary_accuracy=0.1"


@pytest.mark.parametrize(("returncode", "reason"), [(0, "exited"), (3, "exited"), (143, "job deadline of 60 s passed")])
def test_status_exited_with_returncode(tmp_path: Path, returncode: int, reason: str) -> None:
    (tmp_path / "state.json").write_text(json.dumps({"pid": 4321}))
    (tmp_path / "exit.json").write_text(json.dumps({"returncode": returncode, "reason": reason}))
    info = worker_state(entry(tmp_path), EPOCH, 8)
    assert (info["state"], info["returncode"], info["reason"]) == ("exited", returncode, reason)


def test_status_last_line_is_the_latest_epoch_line(tmp_path: Path) -> None:
    lines = write_log(tmp_path, 5, trailing_noise=3)
    info = worker_state(entry(tmp_path), EPOCH, 8)
    assert info["last_line"] == "worker=0 epoch=5 loss=0.4 binary_accuracy=0.5"
    assert info["log_tail"] == lines[-8:]


@pytest.mark.parametrize("tail_lines", [1, 3])
def test_status_log_tail_length(tmp_path: Path, tail_lines: int) -> None:
    lines = write_log(tmp_path, 3)
    info = worker_state(entry(tmp_path), EPOCH, tail_lines)
    assert info["log_tail"] == lines[-tail_lines:]
    # The progress line is found even when it is not among the lines returned.
    assert info["last_line"] == "worker=0 epoch=3 loss=0.6 binary_accuracy=0.3"


def test_status_of_a_launch_whose_supervisor_ended_before_recording_anything(tmp_path: Path) -> None:
    """No state.json, no exit.json: starting while the supervisor the launch started
    lives (in that directory), a failure with the end of its output once it is gone."""
    wdir = tmp_path / "worker-0"
    wdir.mkdir()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], cwd=wdir)
    try:
        assert worker_state(entry(wdir, supervisor_pid=alive.pid), EPOCH, 8)["state"] == "starting"
    finally:
        alive.kill()
        alive.wait()
    (wdir / "supervisor.out").write_text("Traceback (most recent call last):\nImportError: no module \x1b[2Jjson\n")
    info = worker_state(entry(wdir, supervisor_pid=alive.pid), EPOCH, 8)
    assert (info["state"], info["returncode"]) == ("exited", -1)
    assert info["reason"] == (
        f"the worker could not be launched: its supervisor (pid {alive.pid}) ended before it recorded anything: "
        "Traceback (most recent call last): / ImportError: no module \\x1b[2Jjson"
    )
    # Without a pid to go by (a reattached run), it is only starting.
    assert worker_state(entry(wdir), EPOCH, 8)["state"] == "starting"


def test_status_of_a_worker_the_launch_could_not_start(tmp_path: Path) -> None:
    error = "the supervisor could not be started: [Errno 2] No such file or directory: '/nonexistent/bin/python3'"
    info = worker_state(entry(tmp_path, 2, supervisor_pid=None, launch_error=error), EPOCH, 8)
    assert (info["state"], info["returncode"]) == ("exited", -1)
    assert info["reason"] == f"the worker could not be launched: {error}"
    assert worker_state(entry(tmp_path, 2, launch_error=None), EPOCH, 8)["state"] == "starting"


def test_the_module_reports_a_launch_that_ended_as_a_failed_worker(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    wdir = tmp_path / "worker-0"
    wdir.mkdir()
    result = helpers.run_module(
        PLUGINS / "modules" / "tf_worker_wait.py", {"workers": [entry(wdir, supervisor_pid=dead.pid)], "run_dir": str(tmp_path)}
    )
    assert result["workers"][0]["reason"].startswith(f"the worker could not be launched: its supervisor (pid {dead.pid})")
    assert result["failed_workers"] == [0] and result["done"] is True


# --- supervision (issue 10) -------------------------------------------------------------


def test_status_of_a_dead_supervisor_is_a_failure(tmp_path: Path) -> None:
    """state.json without exit.json and no supervisor: failed at once, not 'running'."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / "state.json").write_text(json.dumps({"pid": dead.pid, "pgid": dead.pid, "supervisor_pid": dead.pid}))
    info = worker_state(entry(tmp_path), EPOCH, 8)
    assert (info["state"], info["returncode"]) == ("exited", -1)
    assert info["reason"].startswith(f"the supervisor (pid {dead.pid}) died without recording an exit")


def test_status_of_a_supervisor_pid_reused_elsewhere_is_a_failure(tmp_path: Path) -> None:
    # A live pid (this test) whose working directory is not the worker's: not the supervisor.
    (tmp_path / "state.json").write_text(json.dumps({"pid": 1, "pgid": 1, "supervisor_pid": os.getpid()}))
    assert worker_state(entry(tmp_path), EPOCH, 8)["state"] == "exited"


def test_status_reports_joined_and_stopped_by(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "state.json").write_text(json.dumps({"supervisor_pid": os.getpid(), "joined_at": 5.0}))
    assert worker_state(entry(tmp_path), EPOCH, 8)["joined"] is True
    (tmp_path / "exit.json").write_text(json.dumps({"returncode": 143, "reason": "r", "stopped_by": "operator"}))
    info = worker_state(entry(tmp_path), EPOCH, 8)
    assert (info["state"], info["stopped_by"], info["joined"]) == ("exited", "operator", True)


def test_find_workers_of_the_latest_attempt(tmp_path: Path) -> None:
    for path in ("worker-0", "worker-1", "retry-1/worker-0", "retry-1/worker-1", "retry-2/worker-1", "job"):
        (tmp_path / path).mkdir(parents=True)
    launch = {"python": "/v/bin/python3", "deadline_at": 123.0}
    (tmp_path / "retry-2" / "worker-1" / "state.json").write_text(json.dumps({"launch": launch}))
    workers, found = find_workers(str(tmp_path))
    assert workers == [{"index": 1, "dir": str(tmp_path / "retry-2" / "worker-1")}]
    assert found == {**launch, "attempt": 2}
    assert find_workers(str(tmp_path / "missing")) == ([], {"attempt": 0})


def test_stop_records_who_stopped_and_signals_the_group(launched: Launched) -> None:
    stop_worker(str(launched.worker_dir), 1.0, "operator", "stopped by the operator")
    launched.proc.wait(timeout=10)
    exit_ = json.loads((launched.worker_dir / "exit.json").read_text())
    assert (exit_["stopped_by"], exit_["reason"]) == ("operator", "stopped by the operator")
    assert wait_group_gone(launched.state["pgid"])


def test_group_belongs_only_while_a_member_works_in_the_worker_dir(launched: Launched, tmp_path: Path) -> None:
    assert group_belongs(str(launched.worker_dir), launched.state)
    assert not group_belongs(str(tmp_path / "other"), launched.state)
    assert not group_belongs(str(launched.worker_dir), {"pgid": None})


# --- when one wait returns early (issue 13) ----------------------------------------------


def _w(index: int, state: str = "running", line: str = "", joined: bool = False, returncode: int | None = None) -> dict:
    return {"index": index, "state": state, "last_line": line, "joined": joined, "returncode": returncode}


def test_progress_alone_does_not_end_a_wait_early() -> None:

    first = [_w(0, line="epoch=1"), _w(1, state="starting")]
    later = [_w(0, line="epoch=2", joined=True), _w(1, joined=True)]
    assert tf_worker_watch.worth_returning(first, later, until_joined=False) is False


def test_a_worker_that_fails_ends_a_wait_at_once() -> None:

    first = [_w(0), _w(1)]
    for code in (1, 137, -1):
        later = [_w(0), _w(1, state="exited", returncode=code)]
        assert tf_worker_watch.worth_returning(first, later, until_joined=False) is True


def test_a_worker_that_ends_well_waits_for_the_others_of_its_host() -> None:
    # Its peers of a healthy run end with it: returning now would cost a module run more.

    first = [_w(0), _w(1)]
    assert tf_worker_watch.worth_returning(first, [_w(0), _w(1, state="exited", returncode=0)], False) is False
    # ... but one of them failing afterwards is news again.
    later = [_w(0, state="exited", returncode=2), _w(1, state="exited", returncode=0)]
    assert tf_worker_watch.worth_returning(first, later, until_joined=False) is True


def test_a_worker_that_had_exited_before_does_not_end_it_again() -> None:

    first = [_w(0, state="exited", returncode=1), _w(1)]
    later = [_w(0, state="exited", returncode=1), _w(1, line="epoch=3")]
    assert tf_worker_watch.worth_returning(first, later, False) is False


def test_a_detached_wait_ends_once_every_worker_joined() -> None:

    first = [_w(0), _w(1)]
    assert tf_worker_watch.worth_returning(first, [_w(0, joined=True), _w(1)], until_joined=True) is False
    assert tf_worker_watch.worth_returning(first, [_w(0, joined=True), _w(1, joined=True)], until_joined=True) is True
    assert tf_worker_watch.worth_returning(first, [_w(0, joined=True), _w(1, joined=True)], until_joined=False) is False


# --- progress of every format, causes (issues 23 and 25) -----------------------------------

from ansible_collections.tf_runbook.multiworker.plugins.module_utils import tf_causes  # noqa: E402
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_worker_records import progress_regex, read_progress  # noqa: E402

PROGRESS = progress_regex("")


def test_a_keras_jobs_epoch_header_is_its_progress(tmp_path: Path) -> None:
    """Issue 25: a Keras job showed 'running (no epoch yet)' while its log was at Epoch 31/400."""
    lines = ["Epoch 30/400", "10/10 - 1s - 95ms/step - loss: 0.31", "Epoch 31/400", "3/10 [==>....] - ETA: 1s - loss: 0.3"]
    (tmp_path / "worker.log").write_text("\n".join(lines) + "\n")
    info = worker_state(entry(tmp_path), PROGRESS, 8)
    assert info["last_line"] == "Epoch 31/400"
    assert info["progress_lines"] == 2


def test_a_traceback_is_never_progress(tmp_path: Path) -> None:
    """Issue 25: after a stop, status.yml showed a traceback line as the latest epoch line."""
    lines = [
        "worker=0 epoch=2/5 loss=0.4",
        "Traceback (most recent call last):",
        '  File "train.py", line 41, in <module>',
        "    model.fit(x, epoch=3, initial_epoch=2)",
        "    ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        "",
        "During handling of the above exception, another exception occurred:",
        "Traceback (most recent call last):",
        '  File "train.py", line 50, in <module>',
        "    raise ValueError(' epoch=3 bad')",
        "ValueError:  epoch=3 bad",
        "KeyboardInterrupt: Epoch 3/5",
    ]
    (tmp_path / "worker.log").write_text("\n".join(lines) + "\n")
    info = worker_state(entry(tmp_path), PROGRESS, 8)
    # The line after the exception is read again (here, a line the pattern does not take).
    assert info["last_line"] == "worker=0 epoch=2/5 loss=0.4"
    assert info["progress_lines"] == 1


@pytest.mark.parametrize(
    ("line", "progress"),
    [
        ("worker=0 epoch=3/5 loss=0.2", True),
        ("Epoch 3/5", True),
        ("step=1200 loss=0.3", True),  # the user's pattern below
        ("  initial_epoch=3", False),
        ("epochs=5", False),
        ("step=x", False),
        ("INFO:tensorflow:Assets written", False),
    ],
)
def test_the_progress_pattern_with_a_users_own(line: str, progress: bool) -> None:
    assert bool(progress_regex(r"^step=\d+").search(line)) is progress


def test_a_log_is_read_once_then_only_what_was_appended(tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    log.write_text("worker=0 epoch=1/3\nnoise\nworker=0 epo")
    mark = read_progress(str(log), PROGRESS, None)
    # The line still being written is not read yet.
    assert (mark["count"], mark["last"], mark["offset"]) == (1, "worker=0 epoch=1/3", len("worker=0 epoch=1/3\nnoise\n"))
    with log.open("a") as handle:
        handle.write("ch=2/3\nEpoch 3/3\n")
    mark = read_progress(str(log), PROGRESS, mark)
    assert (mark["count"], mark["last"]) == (3, "Epoch 3/3")
    assert mark["offset"] == log.stat().st_size
    # Nothing new: nothing counted twice.
    assert read_progress(str(log), PROGRESS, mark) == mark
    # A log replaced by a shorter one is read again from its start.
    log.write_text("Epoch 1/3\n")
    assert read_progress(str(log), PROGRESS, mark)["count"] == 1
    # No log yet.
    assert read_progress(str(tmp_path / "none.log"), PROGRESS, None)["count"] == 0


def test_worker_state_moves_the_marks_on(tmp_path: Path) -> None:
    write_log(tmp_path, 2)
    marks: dict[str, Any] = {}
    assert worker_state(entry(tmp_path), PROGRESS, 8, marks)["progress_lines"] == 4
    offset = marks[str(tmp_path)]["offset"]
    with (tmp_path / "worker.log").open("a") as handle:
        handle.write("worker=0 epoch=3 loss=0.1\n")
    info = worker_state(entry(tmp_path), PROGRESS, 8, marks)
    assert info["progress_lines"] == 5 and info["last_line"] == "worker=0 epoch=3 loss=0.1"
    assert marks[str(tmp_path)]["offset"] > offset


def test_the_cause_and_stacks_of_exit_json(tmp_path: Path) -> None:
    cause = {"kind": "stalled", "detail": "no progress line for 20 s", "stacks": "stacks.txt"}
    stacks = {"file": "stacks.txt", "captured_at": 5.0, "where": "own-code", "frames": ["train.py:41 in load_batch"]}
    (tmp_path / "exit.json").write_text(json.dumps({"returncode": 143, "reason": "r", "cause": cause, "stacks": stacks}))
    info = worker_state(entry(tmp_path), PROGRESS, 8)
    assert (info["cause"], info["stacks"]) == (cause, stacks)


@pytest.mark.parametrize(
    ("record", "log", "kind"),
    [
        ({"returncode": 0, "stopped_by": None}, "", "completed"),
        ({"returncode": 1, "stopped_by": None}, "ModuleNotFoundError: No module named 'x'\n", "job-error"),
        ({"returncode": 143, "stopped_by": "operator"}, "", "operator"),
        ({"returncode": 143, "stopped_by": "job-deadline"}, "", "deadline"),
    ],
)
def test_a_record_without_a_cause_is_classified_by_the_supervisors_rules(
    tmp_path: Path, record: dict[str, Any], log: str, kind: str
) -> None:
    """From its structured fields (tf_causes.cause_of): the log never decides a cause."""
    (tmp_path / "worker.log").write_text(log)
    (tmp_path / "exit.json").write_text(json.dumps({**record, "reason": "why"}))
    cause = worker_state(entry(tmp_path), PROGRESS, 8)["cause"]
    assert cause["kind"] == kind
    assert cause == tf_causes.cause_of({**record, "reason": "why"})


def test_a_dead_supervisor_and_a_launch_that_failed_have_causes(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / "state.json").write_text(json.dumps({"pid": dead.pid, "pgid": dead.pid, "supervisor_pid": dead.pid}))
    info = worker_state(entry(tmp_path), PROGRESS, 8)
    assert info["reason"].startswith(f"the supervisor (pid {dead.pid}) died")
    # Its job got the keeper's SIGKILL, which the runbook did not send.
    assert (info["cause"]["kind"], info["cause"]["signal"]) == ("killed", "SIGKILL")
    other = tmp_path / "other"
    other.mkdir()
    failed = worker_state(entry(other, launch_error="no such interpreter"), PROGRESS, 8)
    assert failed["cause"] == {"kind": "startup", "detail": "the worker could not be launched: no such interpreter"}


def test_the_module_returns_the_hosts_clock_and_the_marks(tmp_path: Path) -> None:
    wdir = tmp_path / "worker-0"
    wdir.mkdir()
    (wdir / "worker.log").write_text("Epoch 1/2\nEpoch 2/2\n")
    (wdir / "exit.json").write_text(json.dumps({"returncode": 0, "reason": "exited"}))
    before = time.time()
    result = helpers.run_module(PLUGINS / "modules" / "tf_worker_wait.py", {"workers": [entry(wdir)], "run_dir": str(tmp_path)})
    assert before <= result["now"] <= time.time()
    assert result["workers"][0]["progress_lines"] == 2
    marks = result["progress_marks"]
    assert marks[str(wdir)]["count"] == 2
    # Given back, the marks spare the module reading the log again.
    with (wdir / "worker.log").open("a") as handle:
        handle.write("step=7\n")
    again = helpers.run_module(
        PLUGINS / "modules" / "tf_worker_wait.py",
        {"workers": [entry(wdir)], "run_dir": str(tmp_path), "progress_marks": marks, "progress_pattern": r"^step=\d"},
    )
    assert again["workers"][0]["progress_lines"] == 3
    assert again["workers"][0]["last_line"] == "step=7"


@pytest.mark.parametrize("module, args", [("tf_worker_wait", {"workers": []}), ("tf_worker_status", {})])
def test_the_modules_refuse_a_bad_pattern(tmp_path: Path, module: str, args: dict[str, Any]) -> None:
    result = helpers.run_module(
        PLUGINS / "modules" / f"{module}.py", {**args, "run_dir": str(tmp_path), "progress_pattern": "step=("}
    )
    assert result["failed"] and result["msg"].startswith("progress_pattern 'step=(' is not a regular expression")


# --- the wait's last status run brings the collect bundle (issue 26) --------------------------

COLLECT = {"patterns": ["worker.log", "exit.json"], "artifacts": ["model"], "max_mb": 500}


def finished_run(tmp_path: Path, returncodes: tuple[int, ...] = (0, 0)) -> tuple[Path, list[dict[str, Any]]]:
    """A run directory whose workers all exited (with ``returncodes``), one with a model."""
    run = tmp_path / "runs" / "r1"
    workers = []
    for index, returncode in enumerate(returncodes):
        wdir = run / f"worker-{index}"
        (wdir / "model").mkdir(parents=True)
        (wdir / "worker.log").write_text(f"worker={index} epoch=1 loss=0.5\n")
        (wdir / "exit.json").write_text(json.dumps({"returncode": returncode, "reason": "exited"}))
        (wdir / "model" / "weights.bin").write_bytes(b"w" * 10)
        (wdir / "job_env.json").write_text("{}")
        workers.append(entry(wdir, index))
    return run, workers


def test_the_last_call_of_a_healthy_host_packs_the_bundle_with_the_collects_rules(tmp_path: Path) -> None:
    run, workers = finished_run(tmp_path)
    result = helpers.run_module(
        PLUGINS / "modules" / "tf_worker_wait.py",
        {"workers": workers, "run_dir": str(run), "collect": COLLECT},
    )
    assert result["done"] and result["failed_workers"] == []
    packed = result["bundle"]
    # The logs and records first, then the artifacts; never job_env.json.
    assert packed["files"] == [
        "worker-0/exit.json", "worker-0/worker.log", "worker-1/exit.json", "worker-1/worker.log",
        "worker-0/model/weights.bin", "worker-1/model/weights.bin",
    ]  # fmt: skip
    assert packed["left_out"] == [] and packed["truncated"] == [] and packed["run_dir"] == str(run)
    assert packed["bundle"] == str(run / ".collect.tar.gz")
    with tarfile.open(packed["bundle"]) as archive:
        assert sorted(archive.getnames()) == sorted(packed["files"])
    # The heartbeat is the contract's file in the run directory.
    assert (run / "controller.heartbeat").is_file()


@pytest.mark.parametrize("check_mode", [False, True])
def test_no_bundle_while_a_worker_failed_or_runs_nor_in_check_mode(tmp_path: Path, check_mode: bool) -> None:
    run, workers = finished_run(tmp_path, (0, 3))
    failed = helpers.run_module(
        PLUGINS / "modules" / "tf_worker_wait.py",
        {"workers": workers, "run_dir": str(run), "collect": COLLECT}, check_mode=check_mode,
    )
    assert failed["failed_workers"] == [1] and "bundle" not in failed
    (run / "worker-1" / "exit.json").write_text(json.dumps({"returncode": 0, "reason": "exited"}))
    (run / "worker-2").mkdir()
    starting = helpers.run_module(
        PLUGINS / "modules" / "tf_worker_wait.py",
        {"workers": [*workers, entry(run / "worker-2", 2)], "run_dir": str(run), "collect": COLLECT},
        check_mode=check_mode,
    )
    assert not starting["done"] and "bundle" not in starting
    healthy = helpers.run_module(
        PLUGINS / "modules" / "tf_worker_wait.py",
        {"workers": workers, "run_dir": str(run), "collect": COLLECT}, check_mode=check_mode,
    )
    assert ("bundle" in healthy) is not check_mode
    # A dry run renews no heartbeat and packs nothing.
    assert (run / "controller.heartbeat").exists() is not check_mode
    assert (run / ".collect.tar.gz").exists() is not check_mode


def test_the_wait_needs_the_run_directory_for_its_heartbeat_and_collect(tmp_path: Path) -> None:
    _run, workers = finished_run(tmp_path)
    for args in ({"collect": COLLECT}, {}):
        result = helpers.run_module(PLUGINS / "modules" / "tf_worker_wait.py", {"workers": workers, **args})
        assert result["failed"] and "run_dir" in result["msg"], result


def test_a_bundle_that_cannot_be_packed_is_reported_not_fatal(tmp_path: Path) -> None:
    run, workers = finished_run(tmp_path)
    (run / ".collect.tar.gz.part").mkdir()  # the packing's temporary file cannot be written
    result = helpers.run_module(
        PLUGINS / "modules" / "tf_worker_wait.py", {"workers": workers, "run_dir": str(run), "collect": COLLECT}
    )
    assert result["done"] and "bundle" not in result
    assert result["bundle_error"].startswith(f"cannot pack the collect bundle in {run}: ")


def test_a_new_exit_record_ends_the_wait_for_news_at_once(tmp_path: Path) -> None:
    run, workers = finished_run(tmp_path)
    (run / "worker-1" / "exit.json").unlink()
    seen = tf_worker_watch.exit_records(workers)
    assert seen == frozenset({str(run / "worker-0")})
    start = time.monotonic()
    assert tf_worker_watch.wait_for_news(workers, seen, start + 0.2) == seen
    assert time.monotonic() - start >= 0.2
    writer = threading.Timer(0.1, lambda: (run / "worker-1" / "exit.json").write_text("{}"))
    writer.start()
    start = time.monotonic()
    try:
        news = tf_worker_watch.wait_for_news(workers, seen, start + 5)
    finally:
        writer.cancel()
    assert news == frozenset({str(run / "worker-0"), str(run / "worker-1")})
    assert time.monotonic() - start < 0.1 + 2 * tf_worker_watch.EXIT_POLL_SECONDS + 0.2


def test_an_exit_record_without_the_supervisors_nonce_is_no_exit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 37, point 5: the job wrote its own exit.json (its working directory is the
    worker's); while the record guard stops it, the wait must not read that as its exit,
    nor print its forged fields."""
    monkeypatch.chdir(tmp_path)  # this test process plays the live supervisor
    state = {"pid": 4321, "pgid": 4321, "supervisor_pid": os.getpid(), "nonce": "a1b2"}
    (tmp_path / "state.json").write_text(json.dumps(state))
    forged = {"returncode": "0\x1b[2J", "reason": "done", "cause": {"kind": "completed", "detail": "mine"}}
    (tmp_path / "exit.json").write_text(json.dumps(forged))
    info = worker_state(entry(tmp_path), EPOCH, 8)
    assert (info["state"], info["returncode"], info["cause"]) == ("running", None, None)
    # The supervisor's own record, with the nonce, is the exit.
    (tmp_path / "exit.json").write_text(json.dumps({"returncode": 3, "reason": "exited\x1b[2J", "nonce": "a1b2"}))
    info = worker_state(entry(tmp_path), EPOCH, 8)
    assert (info["state"], info["returncode"], info["reason"]) == ("exited", 3, "exited\\x1b[2J")


def test_a_forged_exit_record_of_a_gone_supervisor_is_its_death(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    state = {"pid": dead.pid, "pgid": dead.pid, "supervisor_pid": dead.pid, "nonce": "a1b2"}
    (tmp_path / "state.json").write_text(json.dumps(state))
    (tmp_path / "exit.json").write_text(json.dumps({"returncode": 0, "reason": "exited"}))
    info = worker_state(entry(tmp_path), EPOCH, 8)
    assert (info["state"], info["returncode"], info["cause"]["kind"]) == ("exited", -1, "killed")
    assert info["reason"].startswith(f"the supervisor (pid {dead.pid}) died without recording an exit")


def test_a_long_progress_line_is_carried_and_shown_capped(tmp_path: Path) -> None:
    """Issue 38, point 11: a 1 MiB progress line travelled whole to the controller and back
    at every poll, and was printed."""
    log = tmp_path / "worker.log"
    log.write_text("worker=0 epoch=1 loss=0.5 " + "z" * (1 << 20) + "\n")
    mark = read_progress(str(log), PROGRESS, None)
    assert mark["count"] == 1 and len(mark["last"]) == 500
    assert mark["last"].startswith("worker=0 epoch=1 loss=0.5 zzz") and mark["last"].endswith("...")
